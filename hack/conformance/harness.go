package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
	"github.com/nodekit/nodekit/internal/localregistry"
)

// fakeRegistryHost is where upstream's private-registry specs serve
// localcri.FakeRegistryImage from a hostNetwork pod.
const fakeRegistryHost = "localhost:5000"

// harness is one run: what it started, in order, and how to undo it.
type harness struct {
	o          options
	set        string  // the spec set, see options.specSet
	containerd string  // the resolved containerd version
	bin        string  // the upstream binaries
	out, logs  string  // the report directory and its logs/
	dir        string  // the run's scratch directory
	agentRoot  string  // the agent's --root-dir
	info       runInfo // run.json, filled in as the run goes

	cp       *localcp.ControlPlane
	cri      *localcri.Containerd
	registry *localregistry.Registry

	procs    []*exec.Cmd // controller manager, scheduler, agent: stopped in reverse
	cleanups []func()    // run in reverse by cleanup
}

func run(ctx context.Context, o options) error {
	h, err := newHarness(o)
	if err != nil {
		return err
	}
	defer h.cleanup()
	if err := h.startCluster(ctx); err != nil {
		return err
	}
	if err := h.startNode(ctx); err != nil {
		return err
	}
	return h.runSpecs(ctx)
}

// newHarness checks the options and the binaries and makes the run's
// report and scratch directories.
func newHarness(o options) (*harness, error) {
	if o.agent != "fullagent" && o.agent != "kubelet" {
		return nil, fmt.Errorf("--agent=%q: want fullagent or kubelet", o.agent)
	}
	set, err := o.specSet()
	if err != nil {
		return nil, err
	}
	containerd, err := localcri.ResolveVersion(o.containerd)
	if err != nil {
		return nil, fmt.Errorf("--containerd: %w", err)
	}
	bin, err := localcp.FindBinDir()
	if err != nil {
		return nil, err
	}
	if err := checkDRA(set, containerd); err != nil {
		return nil, err
	}
	need := []string{"kube-controller-manager", "kube-scheduler", "e2e.test", "ginkgo", "kubelet"}
	if needsRegistry(set) {
		need = append(need, "registry")
	}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %s: run bash hack/build-tools.sh conformance", b, bin)
		}
	}
	commit, dirty, err := checkout()
	if err != nil {
		return nil, err
	}
	h := &harness{o: o, set: set, containerd: containerd, bin: bin, info: runInfo{Agent: o.agent,
		Containerd: containerd, Set: set, Focus: o.focus, Procs: o.procs, Commit: commit, Dirty: dirty}}
	if isSerial(set) {
		h.info.Procs = 1
	}
	h.out, _ = filepath.Abs(filepath.Join(o.out, reportName(o.agent, containerd, set)))
	h.logs = filepath.Join(h.out, "logs")
	if err := os.MkdirAll(h.logs, 0o755); err != nil {
		return nil, err
	}
	if h.dir, err = os.MkdirTemp("", "nkconf-"); err != nil {
		return nil, err
	}
	h.onCleanup(func() { _ = os.RemoveAll(h.dir) })
	// After the agent stopped: its root's bind mount and its pods'
	// volumes stay mounted otherwise.
	h.onCleanup(func() {
		if _, err := fsutil.UnmountBelow(h.dir); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
		}
	})
	return h, nil
}

// onCleanup adds an undo step; cleanup runs them last added first.
func (h *harness) onCleanup(f func()) { h.cleanups = append(h.cleanups, f) }

// cleanup stops and removes what the run started, unless --keep.
func (h *harness) cleanup() {
	if h.o.keep {
		fmt.Println("conformance: --keep: cluster left running in", h.dir)
		return
	}
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	h.cleanups = nil
}

// stopProcs stops the started processes, last started first.
func (h *harness) stopProcs() {
	for i := len(h.procs) - 1; i >= 0; i-- {
		_ = h.procs[i].Process.Signal(syscall.SIGTERM)
		_ = h.procs[i].Wait()
	}
	h.procs = nil
}

// start runs a binary with its output in logs/NAME.log; stopProcs (or the
// harness's death) ends it.
func (h *harness) start(path string, args ...string) error {
	name := filepath.Base(path)
	f, err := os.Create(filepath.Join(h.logs, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	h.procs = append(h.procs, cmd)
	return nil
}

// startCluster starts etcd + kube-apiserver, the controller manager and
// the scheduler.
func (h *harness) startCluster(ctx context.Context) error {
	cp, err := localcp.Start(ctx, localcp.Config{Dir: filepath.Join(h.dir, "cp"), NodeNames: []string{nodeName}, Log: os.Stderr,
		APIServerArgs: apiServerArgs(h.set)})
	if err != nil {
		return err
	}
	h.cp = cp
	h.onCleanup(func() { _ = cp.Stop(context.WithoutCancel(ctx)) })
	h.onCleanup(h.stopProcs)
	if err := h.start(filepath.Join(h.bin, "kube-controller-manager"), "--kubeconfig="+cp.AdminKubeconfig,
		"--controllers=*,-nodeipam", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+cp.ServiceAccountKeyFile, "--root-ca-file="+cp.CAFile,
		"--cluster-signing-cert-file="+cp.CAFile, "--cluster-signing-key-file="+cp.CAKeyFile,
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"); err != nil {
		return err
	}
	return h.start(filepath.Join(h.bin, "kube-scheduler"), "--kubeconfig="+cp.AdminKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false")
}

// startNode starts the node's containerd (with the local registry for a
// serial set) and the agent, and waits for the node to be Ready.
func (h *harness) startNode(ctx context.Context) error {
	cfg := localcri.Config{Dir: filepath.Join(h.dir, "cri"), Version: h.containerd, ConformanceImages: true}
	if isDRA(h.set) {
		cfg.CDIDirs = []string{draCDIDir}
	}
	if needsRegistry(h.set) {
		if err := h.startRegistry(ctx); err != nil {
			return err
		}
		cfg.Mirrors = []localcri.Mirror{{Host: h.registry.Host, CAFile: h.registry.CAFile}}
		cfg.PreloadImages = true
		cfg.LocalhostRegistries = []string{fakeRegistryHost}
	}
	cri, err := localcri.Start(ctx, cfg)
	if err != nil {
		return err
	}
	h.cri = cri
	h.info.RuntimeVersion = cri.RuntimeVersion
	fmt.Printf("conformance: node runtime containerd %s (%s)\n", cri.RuntimeVersion, cri.Version)
	h.onCleanup(func() { _ = cri.Stop(context.WithoutCancel(ctx)) })
	if h.registry != nil {
		if err := h.pushImages(ctx); err != nil {
			return err
		}
	}
	// The agent's kubepods tree lives under a cgroup of this run's own, so
	// its orphaned-pod cleanup cannot meet another agent's pods.
	cgRoot, err := cgroot.Create(fmt.Sprintf("nkconf-%s-%d", h.o.agent, os.Getpid()))
	if err != nil {
		return fmt.Errorf("cgroup root: %w", err)
	}
	// The agents stop first, or a kubelet recreates its QoS cgroups under
	// the root being removed.
	h.onCleanup(func() { h.stopProcs(); _ = cgRoot.Remove() })
	nodeKubeconfig, err := h.cp.NodeKubeconfig(nodeName)
	if err != nil {
		return err
	}
	root := filepath.Join(h.dir, "agent")
	if h.agentRoot, err = h.makeAgentRoot(root); err != nil {
		return err
	}
	if err := startAgent(h.o.agent, h.bin, root, h.agentRoot, nodeKubeconfig, h.cp.CAFile, cri, cgRoot.Name, h.start); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(h.cp.Admin)
	if err != nil {
		return err
	}
	return waitReady(ctx, client)
}

// startRegistry starts the local registry; its log is copied to logs/
// when the run ends.
func (h *harness) startRegistry(ctx context.Context) error {
	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: filepath.Join(h.dir, "registry")})
	if err != nil {
		return fmt.Errorf("local registry: %w", err)
	}
	h.registry = reg
	h.onCleanup(func() {
		_ = reg.Stop(context.WithoutCancel(ctx))
		if err := copyFile(reg.LogFile, filepath.Join(h.logs, "registry.log")); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: registry log:", err)
		}
	})
	fmt.Printf("conformance: local registry at %s for %s\n", reg.Host, strings.Join(localcri.MirroredRegistries, ", "))
	return nil
}

// pushImages pushes every image containerd was given to the local
// registry under its upstream names.
func (h *harness) pushImages(ctx context.Context) error {
	for _, it := range h.cri.Images {
		if len(it.Tags) == 0 {
			continue
		}
		if err := h.registry.Push(ctx, it.Path, it.Tags...); err != nil {
			return fmt.Errorf("push %s: %w", it.Name, err)
		}
	}
	return nil
}

// runSpecs runs ginkgo on the set's specs and writes the report.
func (h *harness) runSpecs(ctx context.Context) error {
	skips, err := readSkips("hack/conformance-skips.txt")
	if err != nil {
		return err
	}
	args := []string{"run"}
	if !isSerial(h.set) {
		args = append(args, "-p", fmt.Sprintf("--procs=%d", h.o.procs))
	}
	args = append(args, "--label-filter="+filterFor(h.set),
		"--junit-report=junit.xml", "--output-dir="+h.out, "--timeout="+h.o.timeout.String(), "--no-color")
	if len(skips) > 0 {
		args = append(args, "--skip="+strings.Join(skips, "|"))
	}
	if h.o.focus != "" {
		args = append(args, "--focus="+h.o.focus)
	}
	args = append(args, filepath.Join(h.bin, "e2e.test"), "--", "--kubeconfig="+h.cp.AdminKubeconfig,
		"--provider=local", "--num-nodes=1", "--report-dir="+h.out, "--node-os-distro=debian")
	if isDRA(h.set) {
		args = append(args, h.draE2EArgs()...)
	}
	g := exec.CommandContext(ctx, filepath.Join(h.bin, "ginkgo"), args...)
	g.Stdout, g.Stderr = os.Stdout, os.Stderr
	g.Env = append(os.Environ(), "KUBECONFIG="+h.cp.AdminKubeconfig)
	h.info.Started = time.Now()
	runErr := g.Run()
	h.info.Finished = time.Now()
	specs, err := readJUnit(filepath.Join(h.out, "junit.xml"))
	if err != nil {
		return errors.Join(runErr, err)
	}
	if err := writeSpecs(filepath.Join(h.out, "specs.txt"), specs); err != nil {
		return errors.Join(runErr, err)
	}
	passed, failed, skipped := count(specs)
	h.info.Passed, h.info.Failed, h.info.Skipped = passed, failed, skipped
	if err := writeRunInfo(h.out, h.info); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("conformance (%s): %d passed, %d failed, %d skipped\n", h.o.agent, passed, failed, skipped)
	fmt.Printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return nil
}

// copyFile copies src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
