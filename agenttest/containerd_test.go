package agenttest_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/agenttest"
)

func TestContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	t.Logf("containerd at %s, bridge %s, gateway %s, pod subnet %s", cri.Endpoint, cri.Bridge, cri.Gateway, cri.Subnet)
	if !cri.Subnet.Contains(cri.Gateway) {
		t.Errorf("gateway %s is not in %s", cri.Gateway, cri.Subnet)
	}
	if iface, err := net.InterfaceByName(cri.Bridge); err != nil {
		t.Errorf("bridge %s: %v", cri.Bridge, err)
	} else if addrs, _ := iface.Addrs(); !slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(cri.Gateway)
	}) {
		t.Errorf("bridge %s lacks the gateway %s: %v", cri.Bridge, cri.Gateway, addrs)
	}

	conn, err := grpc.NewClient(cri.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	img := runtimeapi.NewImageServiceClient(conn)
	ctx := t.Context()

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	t.Logf("runtime %s %s, CRI %s", v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())
	if v.GetRuntimeName() != "containerd" || v.GetRuntimeApiVersion() != "v1" {
		t.Errorf("Version = %+v, want containerd with CRI v1", v)
	}

	images, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	var tags []string
	for _, i := range images.GetImages() {
		t.Logf("image %s tags=%v digests=%v", i.GetId(), i.GetRepoTags(), i.GetRepoDigests())
		tags = append(tags, i.GetRepoTags()...)
	}
	for _, want := range []string{
		agenttest.BusyboxImage, "docker.io/library/busybox:latest", "docker.io/library/busybox:1.36",
		agenttest.PauseImage, "registry.k8s.io/pause:3.10.2",
	} {
		if !slices.Contains(tags, want) {
			t.Errorf("ListImages lacks %s", want)
		}
	}
	if cri.HasImage(agenttest.AgnhostImage) && !slices.Contains(tags, agenttest.AgnhostImage) {
		t.Errorf("ListImages lacks %s", agenttest.AgnhostImage)
	}

	logDir := filepath.Join(cri.Dir, "pod-logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "hello", Namespace: "default", Uid: "hello-uid"},
		Hostname:     "hello",
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbConfig})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	sandboxID := sb.GetPodSandboxId()
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	})

	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "hello"},
			Image:    &runtimeapi.ImageSpec{Image: agenttest.BusyboxImage},
			Command:  []string{"sh", "-c", "echo hello-nodekit; env | grep -x data-1=value-1"},
			Envs:     []*runtimeapi.KeyValue{{Key: "data-1", Value: []byte("value-1")}},
			LogPath:  "hello.log",
		},
		SandboxConfig: sbConfig,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	containerID := created.GetContainerId()
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	status := waitExited(ctx, t, rt, containerID)
	if status.GetExitCode() != 0 {
		t.Errorf("container exited %d (%s: %s)", status.GetExitCode(), status.GetReason(), status.GetMessage())
	}
	logData, err := os.ReadFile(filepath.Join(logDir, "hello.log"))
	if err != nil {
		t.Fatalf("container log: %v", err)
	}
	if !strings.Contains(string(logData), "hello-nodekit") {
		t.Errorf("container log %q lacks hello-nodekit", logData)
	}
	// sh passes on environment variables whose names are not identifiers,
	// as upstream's busybox image does (envFrom keys such as data-1).
	if !strings.Contains(string(logData), "data-1=value-1") {
		t.Errorf("container log %q lacks data-1=value-1: the shell dropped it", logData)
	}

	sbStatus, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	ip := sbStatus.GetStatus().GetNetwork().GetIp()
	t.Logf("sandbox %s has IP %s; container %s logged %q", sandboxID, ip, containerID, strings.TrimSpace(string(logData)))
	if parsed := net.ParseIP(ip); parsed == nil || !cri.Subnet.Contains(parsed) || parsed.Equal(cri.Gateway) {
		t.Errorf("sandbox IP %q is not a pod address of %s", ip, cri.Subnet)
	}

	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		t.Errorf("RemoveContainer: %v", err)
	}

	// The pause image, run as a container, ends at once on SIGTERM as
	// upstream's does.
	pause, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "pause"},
			Image:    &runtimeapi.ImageSpec{Image: agenttest.PauseImage},
			LogPath:  "pause.log",
		},
		SandboxConfig: sbConfig,
	})
	if err != nil {
		t.Fatalf("CreateContainer pause: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: pause.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer pause: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // let the shell install its trap
	stopAt := time.Now()
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: pause.GetContainerId(), Timeout: 30}); err != nil {
		t.Fatalf("StopContainer pause: %v", err)
	}
	if st := waitExited(ctx, t, rt, pause.GetContainerId()); st.GetExitCode() != 0 || time.Since(stopAt) > 10*time.Second {
		t.Errorf("pause container: exit %d after %v; want 0 at once on SIGTERM", st.GetExitCode(), time.Since(stopAt))
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: pause.GetContainerId()}); err != nil {
		t.Errorf("RemoveContainer: %v", err)
	}

	// The agnhost image runs the tools conformance tests use in it.
	if !cri.HasImage(agenttest.AgnhostImage) {
		agenttest.RequireIntegration(t, "the agnhost image", errors.New("not imported (build _output/bin/agnhost: make tools)"))
	}
	tools, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "tools"},
			Image:    &runtimeapi.ImageSpec{Image: agenttest.AgnhostImage},
			Command:  []string{"/bin/sh", "-c", "curl --version | head -1 && ip -V && nc -h 2>&1 | grep -q OpenBSD && /agnhost --help >/dev/null && echo tools-ok"},
			LogPath:  "tools.log",
		},
		SandboxConfig: sbConfig,
	})
	if err != nil {
		t.Fatalf("CreateContainer agnhost: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: tools.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer agnhost: %v", err)
	}
	st := waitExited(ctx, t, rt, tools.GetContainerId())
	out, _ := os.ReadFile(filepath.Join(logDir, "tools.log"))
	if st.GetExitCode() != 0 || !strings.Contains(string(out), "tools-ok") {
		t.Errorf("agnhost tools: exit %d, log:\n%s", st.GetExitCode(), out)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: tools.GetContainerId()}); err != nil {
		t.Errorf("RemoveContainer: %v", err)
	}
}

// waitExited polls the container's status until it has exited.
func waitExited(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st := resp.GetStatus(); st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("container %s did not exit: %v (state %v)", id, ctx.Err(), resp.GetStatus().GetState())
		case <-tick.C:
		}
	}
}
