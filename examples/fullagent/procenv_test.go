package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/internal/fsutil"
)

// These tests run fullagent as a child process, so that they can kill it
// with SIGKILL and start it again on the same root dir, and stop and start
// the API server and containerd under it.

// procEnv is a control plane, a containerd and a fullagent binary; the
// agent runs as a child process the test kills and restarts.
type procEnv struct {
	*env
	cp    *agenttest.ControlPlane
	rt    *criruntime.Runtime // the test's own CRI client
	agent *agentProcess
	root  string
}

func startProcEnv(t *testing.T, extraArgs ...string) *procEnv {
	t.Helper()
	return startProcEnvWith(t, "", extraArgs...)
}

// startProcEnvWith is startProcEnv with extra KubeletConfiguration lines.
func startProcEnvWith(t *testing.T, extraConfig string, extraArgs ...string) *procEnv {
	t.Helper()
	return startProcEnvWrapped(t, extraConfig, nil, extraArgs...)
}

// startProcEnvWrapped is startProcEnvWith with the agent run through
// wrap (a command and its arguments, the agent's binary and arguments
// appended), such as nsenter into another PID namespace. "@CAFILE@" in
// extraConfig stands for the control plane's CA file.
func startProcEnvWrapped(t *testing.T, extraConfig string, wrap []string, extraArgs ...string) *procEnv {
	t.Helper()
	return startProcEnvOpts(t, procEnvOptions{config: extraConfig, wrap: wrap, args: extraArgs})
}

// procEnvOptions are startProcEnvOpts's: extra KubeletConfiguration lines
// ("@CAFILE@" for the CA file), a wrapper command, extra agent flags, and
// options of the control plane (controllers) and containerd (version),
// and the cgroupRoot ("" is a cgroup root of the test's own).
type procEnvOptions struct {
	cgroupRoot string
	config     string
	wrap       []string
	args       []string
	cp         []agenttest.ControlPlaneOption
	cri        []agenttest.ContainerdOption
}

func startProcEnvOpts(t *testing.T, o procEnvOptions) *procEnv {
	t.Helper()
	extraConfig, wrap, extraArgs := o.config, o.wrap, o.args
	agenttest.SkipShort(t, "the agent as a process")
	cp := agenttest.StartControlPlane(t, o.cp...)
	cri := agenttest.StartContainerd(t, o.cri...)
	client := cp.AdminClient()
	cp.SeedNamespace(t, "default") // what kube-controller-manager would do
	dir := t.TempDir()
	// Volumes stay mounted when the agent stops (their containers run on):
	// unmount them once the agent is gone, before the dir is removed.
	t.Cleanup(func() {
		if _, err := fsutil.UnmountBelow(filepath.Join(dir, "root")); err != nil {
			t.Errorf("unmount the agent's volumes: %v", err)
		}
	})
	config := filepath.Join(dir, "config.yaml")
	cgroupRoot := o.cgroupRoot
	if cgroupRoot == "" {
		cgroupRoot = agenttest.CgroupRoot(t)
	}
	// The node API listens on the test's own bridge address, not on :10250
	// of every interface, so tests (and a local agent) do not clash.
	writeFile(t, config, fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\npodLogsDir: %s\naddress: %s\ncgroupRoot: %s\n",
		filepath.Join(dir, "logs"), cri.Gateway, cgroupRoot)+strings.ReplaceAll(extraConfig, "@CAFILE@", cp.CAFile))
	e := &procEnv{
		env:  &env{client: client, cri: cri, nodeIP: cri.Gateway.String()},
		cp:   cp,
		root: filepath.Join(dir, "root"),
	}
	rt, err := criruntime.New(t.Context(), criruntime.Config{Endpoint: cri.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	e.rt = rt
	args := append([]string{
		"--kubeconfig=" + cp.NodeKubeconfig(testNode), "--config=" + config, "--hostname-override=" + testNode,
		"--node-ip=" + e.nodeIP, "--root-dir=" + e.root, "--container-runtime-endpoint=" + cri.Endpoint, "-v=2",
	}, extraArgs...)
	e.agent = newAgentProcess(t, buildAgent(t), filepath.Join(dir, "agent.log"), args)
	e.agent.wrap = wrap
	e.agent.start()
	return e
}

// buildAgent builds this package's binary into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // a fallback for a go not on PATH; the test binary is built on this machine
	}
	bin := filepath.Join(t.TempDir(), "fullagent")
	start := time.Now()
	if out, err := exec.CommandContext(t.Context(), gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built fullagent in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// agentProcess is fullagent running as a child of the test. It gets
// SIGKILL if the test process dies.
type agentProcess struct {
	t    *testing.T
	bin  string
	log  string
	args []string
	wrap []string // a command the agent runs under, if any
	pid  int
	done chan struct{} // closed when the current process has exited
	runs int
}

func newAgentProcess(t *testing.T, bin, log string, args []string) *agentProcess {
	p := &agentProcess{t: t, bin: bin, log: log, args: args}
	t.Cleanup(func() {
		if p.running() {
			p.signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				p.kill()
			}
		}
		if t.Failed() {
			// The test's temporary dir goes: keep the whole log.
			keep := filepath.Join(os.TempDir(), "nodekit-"+strings.ReplaceAll(t.Name(), "/", "_")+"-agent.log")
			if data, err := os.ReadFile(p.log); err == nil && os.WriteFile(keep, data, 0o644) == nil {
				t.Logf("agent log kept in %s", keep)
			}
			t.Logf("agent log tail:\n%s", tail(p.log, 60))
		}
	})
	return p
}

// start starts the agent; its output is appended to the log.
func (p *agentProcess) start() {
	p.t.Helper()
	if p.running() {
		p.t.Fatal("agent already running")
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.runs++
	fmt.Fprintf(logf, "=== run %d at %s\n", p.runs, time.Now().Format(time.RFC3339Nano))
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread until the agent is gone, then
		// unlock it (ending locked would end the thread, and kill what
		// else it forked with Pdeathsig, such as the API server).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(p.bin, p.args...)
		if len(p.wrap) > 0 {
			cmd = exec.Command(p.wrap[0], append(append(p.wrap[1:len(p.wrap):len(p.wrap)], p.bin), p.args...)...)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = agentEnv(os.Environ(), filepath.Dir(p.log))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Start()
		_ = logf.Close()
		if err == nil {
			p.pid = cmd.Process.Pid
		}
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		p.t.Fatalf("start agent: %v", err)
	}
	p.done = done
}

func (p *agentProcess) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *agentProcess) signal(sig syscall.Signal) {
	if p.running() {
		_ = syscall.Kill(p.pid, sig)
	}
}

// kill sends SIGKILL, as a crash or an OOM kill would, and waits for the
// process to be gone.
func (p *agentProcess) kill() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("agent (pid %d) still runs 30s after SIGKILL", p.pid)
	}
}

// logOfRun returns what the agent logged in its current (latest) run.
func (p *agentProcess) logOfRun() string {
	data, _ := os.ReadFile(p.log)
	s := string(data)
	if i := strings.LastIndex(s, fmt.Sprintf("=== run %d at", p.runs)); i >= 0 {
		s = s[i:]
	}
	return s
}

// waitLog waits until the current run's log has a line containing every
// one of parts.
func (p *agentProcess) waitLog(timeout time.Duration, parts ...string) {
	p.t.Helper()
	err := wait.PollUntilContextTimeout(p.t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return countLines(p.logOfRun(), parts...) > 0, nil
	})
	if err != nil {
		p.t.Fatalf("the agent did not log %q within %v", parts, timeout)
	}
}

// countLines counts the lines of s that contain every one of parts.
func countLines(s string, parts ...string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		for _, part := range parts {
			if !strings.Contains(sc.Text(), part) {
				continue lines
			}
		}
		n++
	}
	return n
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// runtimePod returns the runtime's view of a pod (every container, any
// state), nil if it has none.
func (e *procEnv) runtimePod(t *testing.T, uid types.UID) *nodekit.Pod {
	t.Helper()
	pods, err := e.rt.ListPods(t.Context(), true)
	if err != nil {
		t.Fatalf("list runtime pods: %v", err)
	}
	for _, p := range pods {
		if p.ID == uid {
			return p
		}
	}
	return nil
}

// running returns the IDs of the pod's running containers by name.
func running(p *nodekit.Pod) map[string]string {
	out := map[string]string{}
	if p == nil {
		return out
	}
	for _, c := range p.Containers {
		if c.State == nodekit.StateRunning {
			out[c.Name] = c.ID.ID
		}
	}
	return out
}

// waitRuntime polls the runtime until cond holds for the pod.
func (e *procEnv) waitRuntime(t *testing.T, uid types.UID, timeout time.Duration, what string, cond func(*nodekit.Pod) bool) *nodekit.Pod {
	t.Helper()
	var last *nodekit.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := e.rt.ListPods(ctx, true)
		if err != nil {
			return false, nil
		}
		last = nil
		for _, p := range pods {
			if p.ID == uid {
				last = p
			}
		}
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("runtime pod %s: %s not reached within %v; last: %s", uid, what, timeout, describeRuntime(last))
	}
	return last
}

func describeRuntime(p *nodekit.Pod) string {
	if p == nil {
		return "<no pod>"
	}
	var b strings.Builder
	for _, c := range p.Containers {
		fmt.Fprintf(&b, "[%s %s %s] ", c.Name, c.ID.ID[:12], c.State)
	}
	return b.String()
}

// execIn runs cmd in a container through the CRI and fails unless it
// exits 0.
func (e *procEnv) execIn(t *testing.T, containerID string, cmd ...string) {
	t.Helper()
	if _, stderr, code, err := e.rt.ExecSync(t.Context(), nodekit.ContainerID{ID: containerID}, cmd, 10*time.Second); err != nil || code != 0 {
		t.Fatalf("exec %v: code %d, %v, %s", cmd, code, err, stderr)
	}
}

func (e *procEnv) getPod(t *testing.T, name string) *v1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func containerIDOf(p *v1.Pod, name string) string {
	c := containerStatus(p, name)
	if c == nil {
		return ""
	}
	_, id, _ := strings.Cut(c.ContainerID, "://")
	return id
}

func readyProbe() *v1.Probe { return execProbe("cat /tmp/ready", 1) }

// steadyPod runs forever and is Ready while /tmp/ready exists.
func steadyPod(name string) *v1.Pod {
	p := simplePod(name, v1.RestartPolicyAlways, "touch /tmp/ready; sleep 3600")
	p.Spec.Containers[0].ReadinessProbe = readyProbe()
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	return p
}

// markNodeUnknownAndWaitReady sets the node's Ready condition to Unknown, as the node
// lifecycle controller does when the Lease expires (none runs here), and
// waits until the agent reports Ready again.
func (e *procEnv) markNodeUnknownAndWaitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(t.Context(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == v1.NodeReady {
			c.Status, c.Reason, c.Message = v1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
			c.LastTransitionTime = metav1.Now()
		}
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node not Ready again within %v after it was marked Unknown", timeout)
	}
}

// leaseRenewedSince waits until the node's Lease was renewed after t0.
func (e *procEnv) leaseRenewedSince(t *testing.T, t0 time.Time, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := e.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t0), nil
	})
	if err != nil {
		t.Fatalf("node Lease not renewed after %v within %v", t0, timeout)
	}
}

// agentEnv is the environment of an agent process of a test: the test's,
// with a system bus of the test's own (in dir, where nothing listens)
// unless the test set $DBUS_SYSTEM_BUS_ADDRESS (the logind test points it
// at a private systemd), so no agent reaches the host's systemd or logind.
func agentEnv(env []string, dir string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, systemdBusEnv+"=") {
			return env
		}
	}
	return append(env, systemdBusEnv+"=unix:path="+filepath.Join(dir, "no_system_bus"))
}
