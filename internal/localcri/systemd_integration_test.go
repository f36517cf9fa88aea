package localcri

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/itest"
	"github.com/nodekit/nodekit/internal/localsystemd"
)

// Config.Systemd: containerd runs in a private systemd's namespaces, a
// sandbox asking for system.slice runs in a cri-containerd-<id>.scope
// there (systemd's unit, inside that systemd's cgroup subtree), a
// Restart under the Enter prefix keeps it, and Stop leaves no process,
// scope or mount (in the host's or the namespace's mount table).
func TestContainerdSystemdCgroup(t *testing.T) {
	requireHost(t)
	itest.Require(t, "private systemd", localsystemd.Available())
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		itest.Require(t, "cgroup v1 memory hierarchy", err)
	}
	ctx := testContext(t)
	sdDir, err := os.MkdirTemp("", "nksd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sdDir) })
	sd, err := localsystemd.Start(ctx, localsystemd.Config{Dir: sdDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sd.Stop(context.WithoutCancel(ctx)) })
	enter, err := sd.Enter()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{Dir: shortDir(t), Systemd: &Systemd{Enter: enter, Bus: sd.BusAddress}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
	})
	cli, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "sd", Namespace: "default", Uid: "sd-uid"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "system.slice"},
	}
	sb, err := cli.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	scope := filepath.Join("/sys/fs/cgroup/memory", sd.CgroupBase, "system.slice", "cri-containerd-"+sb.GetPodSandboxId()+".scope")
	procs, err := os.ReadFile(filepath.Join(scope, "cgroup.procs"))
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		t.Fatalf("the sandbox is not in %s: %q, %v", scope, procs, err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart under Enter: %v", err)
	}
	if !processMatches(c.PID(), c.st.Config) {
		t.Fatalf("pid %d after Restart is not the containerd", c.PID())
	}
	st, err := cli.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.GetPodSandboxId()})
	if err != nil || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox after Restart: %v, %v", st.GetStatus().GetState(), err)
	}
	state := c.st
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	assertGone(t, state)
	if _, err := os.Stat(scope); err == nil {
		t.Errorf("%s left after Stop", scope)
	}
	out, err := exec.Command(enter[0], append(enter[1:], "cat", "/proc/self/mountinfo")...).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), state.Dir+"/") {
		t.Errorf("mounts below %s left in systemd's mount namespace", state.Dir)
	}
}
