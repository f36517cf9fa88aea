package localcri

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Restart replaces the containerd process and leaves the containers
// running: the same container answers, still running since the same time.
func TestContainerdRestartKeepsContainers(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	c, cli := startWithCRI(ctx, t, Config{})
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "sleeper", Namespace: "default", Uid: "sleeper-uid"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{},
	}
	_, id := startInSandbox(ctx, t, cli, sbCfg, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: BusyboxImage},
		Command:  []string{"sleep", "3600"},
	})
	before, err := cli.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	oldPID := c.PID()

	start := time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restarted in %v", time.Since(start))
	if c.PID() == oldPID || running(oldPID) {
		t.Fatalf("containerd pid %d still the same or running after Restart", oldPID)
	}
	cli2, err := dialCRI(c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	after, err := cli2.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus after the restart: %v", err)
	}
	if after.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || after.GetStatus().GetStartedAt() != before.GetStatus().GetStartedAt() {
		t.Fatalf("container after the restart: state %v startedAt %d, before %d",
			after.GetStatus().GetState(), after.GetStatus().GetStartedAt(), before.GetStatus().GetStartedAt())
	}
	// The restarted containerd still runs new pods.
	runPod(ctx, t, c, "echo after-restart")
}
