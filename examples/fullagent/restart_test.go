package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/podconfig"
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
// options of the control plane (controllers) and containerd (version).
type procEnvOptions struct {
	config string
	wrap   []string
	args   []string
	cp     []agenttest.ControlPlaneOption
	cri    []agenttest.ContainerdOption
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
		if err := unmountUnder(filepath.Join(dir, "root")); err != nil {
			t.Errorf("unmount the agent's volumes: %v", err)
		}
	})
	config := filepath.Join(dir, "config.yaml")
	// The node API listens on the test's own bridge address, not on :10250
	// of every interface, so tests (and a local agent) do not clash.
	writeFile(t, config, fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\npodLogsDir: %s\naddress: %s\ncgroupRoot: %s\n",
		filepath.Join(dir, "logs"), cri.Gateway, agenttest.CgroupRoot(t))+strings.ReplaceAll(extraConfig, "@CAFILE@", cp.CAFile))
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

// unmountUnder lazily unmounts every mount point at or below dir, deepest
// first, as a reboot would (tmpfs volumes lose their content).
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := strings.ReplaceAll(f[4], "\\040", " ")
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
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

// The agent killed with SIGKILL and started again adopts every container:
// same IDs, same restart counts, no new container; probes resume; a
// finished pod is not run again; a pod deleted while the agent was down is
// cleaned up, once, after the sources have been seen.
func TestAgentRestartAdoptsContainers(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	restarted := simplePod("restarted", v1.RestartPolicyAlways, "touch /tmp/ready; sleep 3600; exit 1")
	restarted.Spec.Containers[0].ReadinessProbe = readyProbe()
	e.createPod(t, restarted)
	e.createPod(t, simplePod("done", v1.RestartPolicyNever, "echo done"))
	orphan := simplePod("orphan", v1.RestartPolicyAlways, "sleep 3600")
	orphan.Spec.TerminationGracePeriodSeconds = new(int64)
	e.createPod(t, orphan)

	e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	p := e.waitPod(t, "restarted", 60*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	// One restart before the agent's: kill the sleep, sh exits 1.
	e.execIn(t, containerIDOf(p, "app"), "killall", "sleep")
	e.waitPod(t, "restarted", 60*time.Second, "restarted once and Ready", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return c.RestartCount == 1 && c.Ready
	})
	e.waitPod(t, "done", 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	orphanPod := e.waitPod(t, "orphan", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	before := map[string]*v1.Pod{}
	counts := map[string]int{}
	for _, name := range []string{"steady", "restarted", "done"} {
		before[name] = e.getPod(t, name)
		counts[name] = len(e.runtimePod(t, before[name].UID).Containers)
	}

	e.agent.kill()
	// While the agent is down: a pod is force-deleted, another is created.
	zero := int64(0)
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := e.client.CoreV1().Pods("default").Delete(ctx, "orphan", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("force-delete orphan: %v; retrying", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("could not force-delete the orphan pod")
	}
	e.createPod(t, simplePod("newcomer", v1.RestartPolicyAlways, "sleep 3600"))
	if len(running(e.runtimePod(t, orphanPod.UID))) != 1 {
		t.Fatal("the orphan's container stopped while no agent ran")
	}
	restartAt := time.Now()
	e.agent.start()

	e.waitPod(t, "newcomer", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.waitRuntime(t, orphanPod.UID, 60*time.Second, "the orphan's containers stopped", func(p *nodekit.Pod) bool { return len(running(p)) == 0 })
	t.Logf("newcomer running and orphan stopped %v after the restart", time.Since(restartAt).Round(time.Millisecond))

	// Probes resumed: readiness follows the file again.
	for _, name := range []string{"steady", "restarted"} {
		e.waitPod(t, name, 30*time.Second, "Ready after the restart", func(p *v1.Pod) bool { return ready(p, "app") })
	}
	e.execIn(t, containerIDOf(before["steady"], "app"), "rm", "/tmp/ready")
	e.waitPod(t, "steady", 30*time.Second, "not Ready once its probe fails", func(p *v1.Pod) bool { return !ready(p, "app") })

	for name, old := range before {
		now := e.getPod(t, name)
		oc, nc := containerStatus(old, "app"), containerStatus(now, "app")
		if nc.ContainerID != oc.ContainerID || nc.RestartCount != oc.RestartCount || now.Status.Phase != old.Status.Phase {
			t.Errorf("%s: container %s restarts %d phase %s before, %s restarts %d phase %s after the restart",
				name, oc.ContainerID, oc.RestartCount, old.Status.Phase, nc.ContainerID, nc.RestartCount, now.Status.Phase)
		}
		if n := len(e.runtimePod(t, now.UID).Containers); n != counts[name] {
			t.Errorf("%s: %d containers in the runtime after the restart, %d before", name, n, counts[name])
		}
	}
	// Housekeeping runs every 2 s: give it a few rounds to repeat itself.
	time.Sleep(6 * time.Second)
	if n := countLines(e.agent.logOfRun(), "Killing a pod the agent does not know", string(orphanPod.UID)); n != 1 {
		t.Errorf("the orphan was killed %d times by housekeeping, want once", n)
	}
}

// The API server stops for a minute and comes back on the same port: no
// container is restarted, a container that exited meanwhile is reported,
// restarts per policy went on, and the Lease and node status resume.
func TestAPIServerOutage(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	e.createPod(t, simplePod("exiter", v1.RestartPolicyNever, "sleep 20; exit 3"))
	e.createPod(t, simplePod("crasher", v1.RestartPolicyAlways, "sleep 5; exit 1"))
	steady := e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	exiter := e.waitPod(t, "exiter", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	crasher := e.waitPod(t, "crasher", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	crashesBefore := containerStatus(crasher, "app").RestartCount
	crasherIDs := func() map[string]bool {
		ids := map[string]bool{}
		for _, c := range e.runtimePod(t, crasher.UID).Containers {
			ids[c.ID.ID] = true
		}
		return ids
	}
	idsBefore := crasherIDs()

	down := time.Now()
	e.cp.StopAPIServer()
	e.waitRuntime(t, exiter.UID, 45*time.Second, "the exiter's container exited during the outage", func(p *nodekit.Pod) bool {
		return p != nil && len(p.Containers) == 1 && p.Containers[0].State == nodekit.StateExited
	})
	if wait := time.Minute - time.Since(down); wait > 0 {
		time.Sleep(wait) // the rest of the outage; nothing to wait for
	}
	if got := running(e.runtimePod(t, steady.UID)); got["app"] != containerIDOf(steady, "app") {
		t.Fatalf("steady's container changed during the outage: %v", got)
	}
	startedDuring := 0
	for id := range crasherIDs() {
		if !idsBefore[id] {
			startedDuring++
		}
	}
	up := time.Now()
	e.cp.StartAPIServer()
	t.Logf("API server back after %v", up.Sub(down).Round(time.Second))

	e.waitPod(t, "exiter", 60*time.Second, "Failed with exit code 3", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return p.Status.Phase == v1.PodFailed && c.State.Terminated != nil && c.State.Terminated.ExitCode == 3
	})
	e.waitPod(t, "crasher", 60*time.Second, "restarts of the outage reported", func(p *v1.Pod) bool {
		return containerStatus(p, "app").RestartCount > crashesBefore
	})
	e.leaseRenewedSince(t, up, 60*time.Second)
	e.markNodeUnknownAndWaitReady(t, 60*time.Second)
	t.Logf("statuses, node status and Lease caught up %v after the API server came back", time.Since(up).Round(time.Millisecond))
	t.Logf("crasher started %d new containers during the outage", startedDuring)
	if startedDuring == 0 {
		t.Errorf("crasher (exits every 5s, restartPolicy Always) got no new container during the outage: restarts did not go on offline")
	}

	now := e.getPod(t, "steady")
	if c := containerStatus(now, "app"); c.ContainerID != containerStatus(steady, "app").ContainerID || c.RestartCount != 0 || !c.Ready {
		t.Fatalf("steady after the outage: %+v", c)
	}
	if n := len(e.runtimePod(t, steady.UID).Containers); n != 1 {
		t.Fatalf("steady has %d containers in the runtime, want 1", n)
	}
}

// containerd restarts under the agent, as an upgrade does: the agent
// reconnects, keeps the running containers, and still notices and
// restarts a container that exits afterwards, once.
func TestContainerdRestart(t *testing.T) {
	e := startProcEnv(t)
	e.createPod(t, steadyPod("steady"))
	crashOnce := simplePod("crashonce", v1.RestartPolicyAlways, "sleep 3600; exit 1")
	e.createPod(t, crashOnce)
	steady := e.waitPod(t, "steady", 90*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	p := e.waitPod(t, "crashonce", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	pid := e.cri.PID()
	restartAt := time.Now()
	e.cri.Restart()
	if e.cri.PID() == pid {
		t.Fatal("containerd has the same pid after Restart")
	}
	// The PLEG sees what happens after the restart.
	e.execIn(t, containerIDOf(p, "app"), "killall", "sleep")
	e.waitPod(t, "crashonce", 60*time.Second, "restarted once", func(p *v1.Pod) bool {
		c := containerStatus(p, "app")
		return c.RestartCount == 1 && c.State.Running != nil
	})
	e.createPod(t, simplePod("after", v1.RestartPolicyAlways, "sleep 3600"))
	e.waitPod(t, "after", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	e.leaseRenewedSince(t, restartAt, 60*time.Second)
	e.markNodeUnknownAndWaitReady(t, 60*time.Second)

	now := e.waitPod(t, "steady", 30*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
	if c := containerStatus(now, "app"); c.ContainerID != containerStatus(steady, "app").ContainerID || c.RestartCount != 0 {
		t.Fatalf("steady after the containerd restart: %+v", c)
	}
	for name, want := range map[string]int{"steady": 1, "crashonce": 2, "after": 1} {
		rp := e.runtimePod(t, e.getPod(t, name).UID)
		if rp == nil {
			t.Errorf("%s: not in the runtime", name)
		} else if len(rp.Containers) != want || len(rp.Sandboxes) != 1 {
			t.Errorf("%s: runtime has %s with %d sandboxes, want %d containers and one sandbox", name, describeRuntime(rp), len(rp.Sandboxes), want)
		}
	}
}

// simulateReboot leaves the node as a host reboot would: no container, no
// sandbox, no mount under the root dir (tmpfs volumes lose their content).
// The agent must not be running.
func (e *procEnv) simulateReboot(t *testing.T) {
	t.Helper()
	if e.agent.running() {
		t.Fatal("simulateReboot with the agent running")
	}
	e.cri.RemoveAllPods()
	if err := unmountUnder(e.root); err != nil {
		t.Fatal(err)
	}
	if pods, err := e.rt.ListPods(t.Context(), true); err != nil || len(pods) != 0 {
		t.Fatalf("after the simulated reboot the runtime has %d pods (%v)", len(pods), err)
	}
}

// With --pod-checkpoint, a node rebooted while the API server is
// unreachable runs its pods again from the checkpoint, with their
// ConfigMap-based environment and volumes and their service account token;
// when the API server returns, a pod deleted meanwhile is stopped and the
// others are left alone. A corrupt checkpoint is reported and ignored: the
// agent waits for the API server.
func TestOfflineRestartFromCheckpoint(t *testing.T) {
	e := startProcEnv(t, "--pod-checkpoint")
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "greetings"}, Data: map[string]string{"hello": "hi", "file": "from-volume"}}
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envPod := simplePod("envpod", v1.RestartPolicyAlways, "sleep 3600")
	envPod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "greetings"}, Key: "hello"}}}}
	envPod.Spec.Volumes = []v1.Volume{{Name: "greetings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "greetings"}}}}}
	envPod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "greetings", MountPath: "/etc/greetings"}}
	names := []string{"envpod", "plain", "doomed"}
	uids := map[string]types.UID{}
	for _, p := range []*v1.Pod{envPod, simplePod("plain", v1.RestartPolicyAlways, "sleep 3600"), simplePod("doomed", v1.RestartPolicyAlways, "sleep 3600")} {
		p.Spec.TerminationGracePeriodSeconds = new(int64) // sleep as PID 1 ignores SIGTERM
		e.createPod(t, p)
	}
	for _, name := range names {
		uids[name] = e.waitPod(t, name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }).UID
	}

	path := checkpointPath(e.root)
	var cp *podconfig.PodCheckpoint
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := podconfig.ReadCheckpoint(path)
		if err != nil {
			return false, nil
		}
		cp = c
		return len(c.Pods) == 3 && len(c.ConfigMaps) >= 1 && len(c.Tokens) >= 3 && c.Node != nil, nil
	})
	if err != nil {
		t.Fatalf("checkpoint %s not complete within 30s: %+v", path, cp)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file: %v, %v; want mode 0600", fi.Mode(), err)
	}

	// The host reboots while the cloud is unreachable.
	e.cp.StopAPIServer()
	e.agent.kill()
	e.simulateReboot(t)
	offline := time.Now()
	e.agent.start()
	e.agent.waitLog(60*time.Second, "running the pods of the checkpoint")
	ids := map[string]string{}
	for _, name := range names {
		rp := e.waitRuntime(t, uids[name], 90*time.Second, name+" running from the checkpoint", func(p *nodekit.Pod) bool { return running(p)["app"] != "" })
		ids[name] = running(rp)["app"]
	}
	t.Logf("pods running from the checkpoint %v after an offline start", time.Since(offline).Round(time.Millisecond))
	e.execIn(t, ids["envpod"], "sh", "-c", `test "$GREETING" = hi`)
	e.execIn(t, ids["envpod"], "sh", "-c", `test "$(cat /etc/greetings/file)" = from-volume`)
	e.execIn(t, ids["envpod"], "test", "-s", "/var/run/secrets/kubernetes.io/serviceaccount/token")

	// The API server comes back; "doomed" was deleted meanwhile.
	if !e.cp.DeleteFromStorage("pods", "default", "doomed") {
		t.Fatal("pod doomed was not in etcd")
	}
	back := time.Now()
	e.cp.StartAPIServer()
	e.waitRuntime(t, uids["doomed"], 60*time.Second, "doomed stopped", func(p *nodekit.Pod) bool { return len(running(p)) == 0 })
	for _, name := range []string{"envpod", "plain"} {
		e.waitPod(t, name, 60*time.Second, "Running with the container started offline", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && containerIDOf(p, "app") == ids[name]
		})
		if rp := e.runtimePod(t, uids[name]); len(rp.Containers) != 1 || running(rp)["app"] != ids[name] {
			t.Errorf("%s after the API server came back: %s, want its offline container %s alone", name, describeRuntime(rp), ids[name][:12])
		}
	}
	t.Logf("reconciled %v after the API server came back", time.Since(back).Round(time.Millisecond))
	if c, err := podconfig.ReadCheckpoint(path); err != nil || len(c.Pods) != 2 {
		t.Fatalf("checkpoint after the reconciliation: %v pods, %v", len(c.Pods), err)
	}

	t.Run("corrupt checkpoint is reported and ignored", func(t *testing.T) {
		e.cp.StopAPIServer()
		e.agent.kill()
		e.simulateReboot(t)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)-10] ^= 0x01 // in the payload
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		e.agent.start()
		e.agent.waitLog(30*time.Second, "pod checkpoint is corrupt")
		time.Sleep(podconfig.DefaultCheckpointWait + 5*time.Second) // what the agent would wait before serving it
		if !e.agent.running() {
			t.Fatal("the agent exited over a corrupt checkpoint")
		}
		if pods, err := e.rt.ListPods(t.Context(), true); err != nil || len(pods) != 0 {
			t.Fatalf("pods started from a corrupt checkpoint: %d (%v)", len(pods), err)
		}
		e.cp.StartAPIServer()
		for _, name := range []string{"envpod", "plain"} {
			e.waitRuntime(t, uids[name], 90*time.Second, name+" running once the API server answered", func(p *nodekit.Pod) bool { return running(p)["app"] != "" })
		}
		err = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			c, err := podconfig.ReadCheckpoint(path)
			return err == nil && len(c.Pods) == 2, nil
		})
		if err != nil {
			t.Fatal("the corrupt checkpoint was not replaced by a good one")
		}
	})
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
