package localcri

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/internal/itest"
)

// requireHost skips (or, with NODEKIT_REQUIRE_INTEGRATION set, fails) when
// the machine cannot run containerd.
func requireHost(t *testing.T) {
	t.Helper()
	itest.Short(t, "containerd")
	var missing error
	if os.Geteuid() != 0 {
		missing = fmt.Errorf("not root")
	} else if err := LookupBinaries(Config{}); err != nil {
		missing = err
	}
	if missing == nil {
		return
	}
	itest.Require(t, "containerd", missing)
}

func testContext(t *testing.T) context.Context {
	return klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
}

// shortDir is a temp dir with a path short enough for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// startWithCRI starts an instance of cfg (its Dir a shortDir) that the
// test's cleanup stops, and dials its CRI.
func startWithCRI(ctx context.Context, t *testing.T, cfg Config) (*Containerd, *criClient) {
	t.Helper()
	cfg.Dir = shortDir(t)
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	cli, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cli.Close)
	return c, cli
}

func TestContainerdStartStop(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	start := time.Now()
	c, err := Start(ctx, Config{Dir: shortDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v: endpoint %s, bridge %s, gateway %s, subnet %s", time.Since(start), c.Endpoint, c.Bridge, c.Gateway, c.Subnet)
	st := c.st
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
	}()

	if _, err := Start(ctx, Config{Dir: c.Dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Start in the same dir: err = %v, want already running", err)
	}
	id, ip := runPod(ctx, t, c, "echo hello-localcri")
	t.Logf("sandbox %s got IP %s", id, ip)

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	assertGone(t, st)
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestContainerdConcurrent(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	var wg sync.WaitGroup
	cs := make([]*Containerd, 2)
	errs := make([]error, 2)
	dirs := []string{shortDir(t), shortDir(t)}
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = Start(ctx, Config{Dir: dirs[i]}) })
	}
	wg.Wait()
	for i, c := range cs {
		if c != nil {
			t.Cleanup(func() {
				if err := c.Stop(context.WithoutCancel(ctx)); err != nil {
					t.Errorf("stop %d: %v", i, err)
				}
			})
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if cs[0].Bridge == cs[1].Bridge || cs[0].Subnet.String() == cs[1].Subnet.String() {
		t.Fatalf("instances share a network: %s %s / %s %s", cs[0].Bridge, cs[0].Subnet, cs[1].Bridge, cs[1].Subnet)
	}
	for i := range cs {
		wg.Go(func() {
			id, ip := runPod(ctx, t, cs[i], fmt.Sprintf("echo hello-localcri-%d", i))
			t.Logf("instance %d (%s): sandbox %s got IP %s", i, cs[i].Bridge, id, ip)
		})
	}
	wg.Wait()
	for i, c := range cs {
		st := c.st
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop %d: %v", i, err)
		}
		assertGone(t, st)
	}
}

func TestContainerdDetachedStopDir(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	dir := shortDir(t)
	c, err := Start(ctx, Config{Dir: dir, Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	st := c.st
	if err := StopDir(ctx, dir); err != nil {
		t.Fatal(err)
	}
	assertGone(t, st)
	if err := StopDir(ctx, dir); err == nil {
		t.Error("StopDir of a stopped dir: no error")
	}
}

// assertGone checks that no process, mount or bridge of the instance remains.
func assertGone(t *testing.T, st instanceState) {
	t.Helper()
	if running(st.PID) {
		t.Errorf("containerd pid %d still runs", st.PID)
	}
	ids := containerIDs(st)
	if pids := instanceProcesses(st, ids); len(pids) > 0 {
		t.Errorf("processes of the instance remain: %v", pids)
	}
	out, _ := exec.Command("ps", "-eo", "pid,ppid,args").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, st.Dir+"/") {
			t.Errorf("ps still shows the instance: %s", line)
		}
	}
	if _, err := net.InterfaceByName(st.Bridge); err == nil {
		t.Errorf("bridge %s still exists", st.Bridge)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(data), st.Dir+"/") {
		t.Errorf("mounts under %s remain", st.Dir)
	}
}

// runPod runs a busybox container in a new sandbox, waits for it to exit
// and checks its log; it returns the sandbox id and IP.
func runPod(ctx context.Context, t *testing.T, c *Containerd, command string) (string, string) {
	t.Helper()
	cli, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	id, code, out := runOnce(ctx, t, c, cli, ctrSpec{image: BusyboxImage, command: []string{"sh", "-c", command}})
	if code != 0 {
		t.Fatalf("container exited %d: %q", code, out)
	}
	want := strings.TrimPrefix(command, "echo ")
	if !strings.Contains(out, want) {
		t.Errorf("log %q lacks %q", out, want)
	}
	pst, err := cli.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	ip := pst.GetStatus().GetNetwork().GetIp()
	if parsed := net.ParseIP(ip); parsed == nil || !c.Subnet.Contains(parsed) {
		t.Errorf("sandbox IP %q is not in %s", ip, c.Subnet)
	}
	return id, ip
}

// ctrSpec is a container runOnce runs.
type ctrSpec struct {
	image    string
	command  []string
	env      []*runtimeapi.KeyValue
	readOnly bool // readOnlyRootFilesystem
}

// runOnce runs s in a new sandbox of c and waits for it to exit; it
// returns the sandbox id, the exit code and what the container wrote
// (stdout and stderr, from its CRI log).
func runOnce(ctx context.Context, t *testing.T, c *Containerd, cli *criClient, s ctrSpec) (string, int32, string) {
	t.Helper()
	logDir := filepath.Join(c.Dir, "pod-logs", fmt.Sprint(time.Now().UnixNano()))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("pod-%d", time.Now().UnixNano())
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	id, ctrID := startInSandbox(ctx, t, cli, sbCfg, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: s.image},
		Command:  s.command,
		Envs:     s.env,
		LogPath:  "c.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: s.readOnly},
		},
	})
	code := waitExited(ctx, t, cli, ctrID)
	data, err := os.ReadFile(filepath.Join(logDir, "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	return id, code, criLogText(string(data))
}

// startInSandbox runs a sandbox of sbCfg and starts one container of cfg
// in it, and returns the sandbox and container ids.
func startInSandbox(ctx context.Context, t *testing.T, cli *criClient, sbCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, string) {
	t.Helper()
	sb, err := cli.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	ctr, err := cli.runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.GetPodSandboxId(), Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := cli.runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return sb.GetPodSandboxId(), ctr.GetContainerId()
}

// waitExited waits up to a minute for a container to exit and returns its
// exit code.
func waitExited(ctx context.Context, t *testing.T, cli *criClient, id string) int32 {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := cli.runtime.ContainerStatus(wctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st.GetStatus().GetExitCode()
		}
		select {
		case <-wctx.Done():
			t.Fatalf("container still %v: %v", st.GetStatus().GetState(), wctx.Err())
		case <-tick.C:
		}
	}
}

// criLogText is the text of a CRI log file ("<time> <stream> <P|F> <text>"
// lines; P is a partial line).
func criLogText(log string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 {
			continue
		}
		if len(f) == 4 {
			b.WriteString(f[3])
		}
		if f[2] == "F" {
			b.WriteString("\n")
		}
	}
	return b.String()
}
