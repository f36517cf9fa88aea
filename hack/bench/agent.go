package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/kubeletconf"
)

// agentProc is a running node agent, a child of the bench.
type agentProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// serving is the agent's HTTPS server (https://address:port), where
	// /debug/pprof/goroutine is read; "" for the ideal agent, which has none.
	serving string
	done    chan struct{} // closed once the process is reaped
	waitErr error         // read after done
}

// startAgent writes the agent's KubeletConfiguration and starts it. Both
// agents get the same flags and the same configuration, except for the
// fields only the kubelet reads (kubeletconf.KubeletOnly), and the API
// limits of --kube-api-qps. The ideal agents are this binary, started
// with idealCommand; ideal-limited gets the agents' client limits.
func startAgent(agent, bin, dir, kubeconfig, caFile string, n *benchNode, cg *cgroot.Root, o options) (*agentProc, error) {
	pods := o.pods
	logPath := filepath.Join(dir, agent+".log")
	if isIdeal(agent) {
		args := []string{idealCommand, "--kubeconfig=" + kubeconfig, "--node-name=" + nodeName,
			"--node-ip=" + n.nodeIP, fmt.Sprintf("--max-pods=%d", max(110, pods+10))}
		if agent == agentIdealRequests || agent == agentIdealLimited {
			args = append(args, "--kubelet-requests")
		}
		if agent == agentIdealLimited {
			args = append(args, o.idealLimits()...)
		}
		return startChild(agent, bin, args, logPath)
	}
	root := filepath.Join(dir, "agent")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(root, "config.yaml")
	conf := agentConfig(root, n, caFile, max(110, pods+10)) + fmt.Sprintf("cgroupRoot: %s\n", cg.Name) + o.apiLimits()
	if agent == agentKubelet {
		conf += kubeletconf.KubeletOnly(n.healthz)
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	args := kubeletconf.Args(kubeconfig, cfg, nodeName, n.nodeIP, filepath.Join(root, "root"))
	p, err := startChild(agent, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	port := n.port
	if port == 0 {
		port = 10250
	}
	p.serving = "https://" + net.JoinHostPort(n.address, strconv.Itoa(port))
	return p, nil
}

// agentConfig is the configuration both agents get: the CRI endpoint and
// the addresses of the run's node (see startNode), the upstream defaults
// for status and lease frequencies and API QPS, and no image pulls in
// series (none happen: the image is present). kubelet's healthz, which
// only it serves, is on the node's address (kubeletconf.KubeletOnly) or, when the
// node has none for it, off.
func agentConfig(root string, n *benchNode, caFile string, maxPods int) string {
	s := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: %s
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
address: %s
maxPods: %d
serializeImagePulls: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
`, filepath.Join(root, "logs"), n.endpoint, n.address, maxPods, caFile)
	if n.port != 0 {
		s += fmt.Sprintf("port: %d\n", n.port)
	}
	if n.healthz == "" {
		s += "healthzPort: 0\n"
	}
	return s
}

// startChild starts bin with its output in logPath. The child gets SIGKILL
// if the bench dies (Pdeathsig). Pdeathsig fires when the thread that forked
// the child exits, not the process: the child is forked from a goroutine
// locked to its thread for the child's whole life, and the thread is
// unlocked (not ended) once the child is reaped.
func startChild(name, bin string, args []string, logPath string) (*agentProc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	fmt.Fprintf(log, "# %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &agentProc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, nil
}

func (p *agentProc) pid() int { return p.cmd.Process.Pid }

func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after timeout, SIGKILL, and waits for the exit.
// Both agents leave the containers running; containerd's Stop removes them.
func (p *agentProc) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s ignored SIGTERM for %v and was killed", p.name, timeout)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.name, p.pid())
	}
}

// logTail is the end of the agent's log, for error messages.
func (p *agentProc) logTail() string {
	status := "running"
	if p.exited() {
		status = fmt.Sprint(p.waitErr)
		if p.waitErr == nil {
			status = "exited with status 0"
		}
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return status
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 8<<10 {
		_, _ = f.Seek(fi.Size()-8<<10, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return status + "\n--- last lines of " + p.logPath + " ---\n" + strings.Join(lines, "\n")
}

// releaseTags are the build tags upstream's release binaries are built
// with (k8s.io/kubernetes v1.37.2 hack/lib/golang.sh, build_binaries, any
// build that is not DBG=1): grpcnotrace leaves out gRPC's
// golang.org/x/net/trace, whose init registers an html/template page; the
// template package's reflective method calls would make the linker keep
// every exported method of every reachable type (about 40% of either
// binary). Both agents are built with them, and -trimpath, as a release.
const releaseTags = "selinux,notest,grpcnotrace"

// upstreamLdflags stamps the kubelet's version, as hack/build-tools.sh does.
const upstreamLdflags = "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

// buildFullagent builds examples/fullagent of this checkout into dir, as a
// release would be built (releaseTags, and static: CGO_ENABLED=0, as
// hack/run-agent.sh builds it; see examples/fullagent/doc.go).
func buildFullagent(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", agentFull)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", releaseTags, "-o", bin, "./examples/fullagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build fullagent: %w", err)
	}
	return bin, nil
}

// releaseKubelet is the upstream kubelet v1.37.2 built as its release is
// (releaseTags, -trimpath, cgo on: kubelet is not among upstream's static
// binaries; symbols kept, which are not loaded, so the residency report
// can name packages), in _output/bench/kubelet of this checkout; built
// from hack/tools' module on first use, which takes minutes.
// hack/build-tools.sh's kubelet (for conformance) is built without the
// tags.
func releaseKubelet(ctx context.Context) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "_output", "bench", "kubelet")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	logf("building the upstream kubelet with the release tags into %s (minutes, once)", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", releaseTags, "-ldflags", upstreamLdflags,
		"-o", bin+".tmp", "k8s.io/kubernetes/cmd/kubelet")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the kubelet: %w", err)
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// buildTags is the -tags a Go binary was built with, from its build
// information, or "none", and its CGO_ENABLED setting.
func buildTags(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "unknown"
	}
	tags, cgo := "none", "?"
	for _, s := range bi.Settings {
		switch s.Key {
		case "-tags":
			tags = s.Value
		case "CGO_ENABLED":
			cgo = s.Value
		}
	}
	return tags + " (CGO_ENABLED=" + cgo + ")"
}

// moduleRoot is the directory of this module's go.mod, found upwards from
// the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/nodekit/nodekit\n")) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of github.com/nodekit/nodekit in %s or above: run the bench from the checkout", wd)
		}
	}
}

// binaryVersion runs bin --version ("Kubernetes v1.37.2") and returns the
// version.
func binaryVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", fmt.Errorf("%s --version printed nothing", bin)
	}
	return f[len(f)-1], nil
}

// unmountBelow detaches every mount under dir, deepest first: a stopped
// agent leaves its pods' volumes (the kubelet's tmpfs for projected
// service-account tokens) mounted, as it should.
func unmountBelow(dir string) {
	if _, err := fsutil.UnmountUnder(dir); err != nil {
		logf("unmount below %s: %v", dir, err)
	}
}
