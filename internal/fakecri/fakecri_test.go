package fakecri_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/fakecri"
)

const busybox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"

// stopTime is when the fake clock says containers exit and stats are read.
var stopTime = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

// start serves a fake runtime in a temporary directory and connects
// upstream's CRI client to it, as an agent does.
func start(t *testing.T) (*fakecri.Server, internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	ctx := t.Context()
	dir, err := os.MkdirTemp("", "fakecri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := fakecri.Start(ctx, fakecri.Config{Dir: dir, Images: []string{busybox}, Clock: testingclock.NewFakePassiveClock(stopTime)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(s.Endpoint).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(s.Endpoint).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close(context.Background()); _ = is.Close(context.Background()) })
	return s, rs, is
}

func TestReadyAsARealRuntime(t *testing.T) {
	_, rs, _ := start(t)
	ctx := t.Context()
	v, err := rs.Version(ctx, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != "0.1.0" || v.RuntimeName != fakecri.RuntimeName || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version = %+v, want version 0.1.0 (as kubelet checks), name %s, API v1", v, fakecri.RuntimeName)
	}
	st, err := rs.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, c := range st.GetStatus().GetConditions() {
		ready[c.Type] = c.Status
	}
	if !ready[runtimeapi.RuntimeReady] || !ready[runtimeapi.NetworkReady] {
		t.Errorf("Status conditions = %v, want RuntimeReady and NetworkReady true", st.GetStatus().GetConditions())
	}
	if len(st.RuntimeHandlers) == 0 || !st.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Errorf("Status handlers %v features %v, want a default handler and supplemental groups policy", st.RuntimeHandlers, st.Features)
	}
	if got, want := st.Info["config"], `{"sandboxImage":"`+fakecri.DefaultSandboxImage+`"}`; got != want {
		t.Errorf("verbose Status config = %q, want %q", got, want)
	}
	rc, err := rs.RuntimeConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig = %v, want the cgroupfs driver", rc)
	}
}

func TestRunSandboxAndContainer(t *testing.T) {
	_, rs, is := start(t)
	ctx := t.Context()
	img, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busybox}, false)
	if err != nil {
		t.Fatal(err)
	}
	if img.GetImage().GetId() == "" {
		t.Fatalf("ImageStatus(%s) = %v, want the image present", busybox, img)
	}
	logDir := t.TempDir()
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "uid-1"},
		Labels:       map[string]string{"io.kubernetes.pod.uid": "uid-1"},
		LogDirectory: logDir,
	}
	sb, err := rs.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		t.Fatal(err)
	}
	sb2, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "q", Namespace: "default", Uid: "uid-2"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	st1, err := rs.PodSandboxStatus(ctx, sb, false)
	if err != nil {
		t.Fatal(err)
	}
	st2, err := rs.PodSandboxStatus(ctx, sb2, false)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st1.Status.Network.Ip == "" || st1.Status.Network.Ip == st2.Status.Network.Ip {
		t.Errorf("sandboxes: %v and %v, want READY with IPs of their own", st1.Status, st2.Status)
	}

	cConfig := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: img.Image.Id},
		Labels:   map[string]string{"io.kubernetes.pod.uid": "uid-1"},
		LogPath:  "app/0.log",
	}
	id, err := rs.CreateContainer(ctx, sb, cConfig, sbConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	cs, err := rs.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || cs.Status.StartedAt == 0 {
		t.Errorf("after start: %v, want RUNNING with a start time", cs.Status)
	}
	if want := filepath.Join(logDir, "app/0.log"); cs.Status.LogPath != want {
		t.Errorf("log path %q, want %q", cs.Status.LogPath, want)
	} else if _, err := os.Stat(want); err != nil {
		t.Errorf("the log file: %v", err)
	}
	stats, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Attributes.Id != id || stats[0].Cpu.GetTimestamp() != stopTime.UnixNano() {
		t.Errorf("container stats of the sandbox = %v, want the one container's, read at the clock's time", stats)
	}
	sbStats, err := rs.ListPodSandboxStats(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbStats) != 2 {
		t.Errorf("sandbox stats: %d, want 2", len(sbStats))
	}
	running, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].Id != id {
		t.Errorf("running containers = %v, want %s", running, id)
	}

	if err := rs.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	cs, err = rs.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || cs.Status.ExitCode != fakecri.StopExitCode || cs.Status.FinishedAt != stopTime.UnixNano() {
		t.Errorf("after the sandbox stopped: %v, want EXITED with code %d", cs.Status, fakecri.StopExitCode)
	}
	if err := rs.StopContainer(ctx, id, 0); err != nil {
		t.Errorf("stopping an exited container again: %v", err)
	}
	if err := rs.RemovePodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ContainerStatus(ctx, id, false); status.Code(err) != codes.NotFound {
		t.Errorf("status of a container whose sandbox was removed: %v, want NotFound", err)
	}
	if _, err := rs.CreateContainer(ctx, sb, cConfig, sbConfig); status.Code(err) != codes.NotFound {
		t.Errorf("create in a removed sandbox: %v, want NotFound", err)
	}
	if err := rs.StopPodSandbox(ctx, sb); err != nil {
		t.Errorf("stopping a removed sandbox: %v, want nothing to do", err)
	}
}

func TestUnimplementedAsContainerd16(t *testing.T) {
	_, rs, _ := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := rs.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil)
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("GetContainerEvents: %v, want Unimplemented (agents relist)", err)
	}
}
