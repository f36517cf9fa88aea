package criruntime_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// TestContainerdIntegration runs criruntime against a private, real
// containerd: one instance shared by the subtests.
func TestContainerdIntegration(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	if v, err := rt.Version(ctx); err != nil || !strings.HasPrefix(v, "containerd://") {
		t.Fatalf("Version = %q, %v", v, err)
	}
	if err := rt.Ready(ctx); err != nil {
		t.Fatalf("runtime not ready: %v", err)
	}
	checkSandboxImage(t, rt, cri.Version)

	t.Run("sandbox IP and container log", func(t *testing.T) {
		pod := busyboxPod("log", "sh", "-c", "echo hello from $(WHO)")
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{
			Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
			Options: func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
				return &nodekit.ContainerOptions{Envs: []nodekit.EnvVar{{Name: "WHO", Value: "nodekit"}}}, nil
			},
		})
		if err := res.Err(); err != nil {
			t.Fatalf("SyncPod: %v", err)
		}
		if len(res.PodIPs) == 0 || !cri.Subnet.Contains(net.ParseIP(res.PodIPs[0])) {
			t.Fatalf("sandbox IP %v not in the CNI subnet %v", res.PodIPs, cri.Subnet)
		}
		t.Logf("criruntime created sandbox %s with IP %s and a busybox container", res.SandboxID, res.PodIPs[0])
		st := waitExited(t, rt, pod, "app")
		if st.ExitCode != 0 || st.LogPath == "" {
			t.Fatalf("container status: %+v", st)
		}
		b, err := os.ReadFile(st.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		// CRI log format: TIMESTAMP STREAM TAG MESSAGE
		if !strings.Contains(string(b), " stdout F hello from nodekit") {
			t.Fatalf("log file %s holds %q", st.LogPath, b)
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("graceful stop delivers SIGTERM", func(t *testing.T) {
		pod := busyboxPod("grace", "sh", "-c", "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.2; done")
		if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatal(err)
		}
		waitLog(t, rt, pod, "app", "ready")
		status, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		running := &nodekit.Pod{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range status.Containers {
			running.Containers = append(running.Containers, &nodekit.Container{ID: c.ID, Name: c.Name, State: c.State})
		}
		for _, sb := range status.Sandboxes {
			running.Sandboxes = append(running.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{ID: sb.ID}})
		}
		grace := 20 * time.Second
		start := time.Now()
		if err := rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: running, GracePeriod: &grace}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		st := waitExited(t, rt, pod, "app")
		b, _ := os.ReadFile(st.LogPath)
		if st.ExitCode != 0 || !strings.Contains(string(b), "got-term") {
			t.Fatalf("container did not handle SIGTERM: exit %d, log %q", st.ExitCode, b)
		}
		if took >= grace {
			t.Fatalf("stop took %v: the container was killed at the deadline instead of exiting on SIGTERM", took)
		}
		t.Logf("container trapped SIGTERM and exited 0 after %v", took.Round(time.Millisecond))
		killAndRemove(t, rt, pod)
	})

	t.Run("pull policy Never on a missing image", func(t *testing.T) {
		pod := busyboxPod("never")
		pod.Spec.Containers[0].Image = "registry.example/absent:1.0"
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		err := res.Err()
		if !errors.Is(err, nodekit.ErrImageNeverPull) {
			t.Fatalf("error %v is not ErrImageNeverPull", err)
		}
		if f := res.Failure("app"); f == nil || !strings.Contains(f.Message, "is not present with pull policy of Never") {
			t.Fatalf("failure: %+v", f)
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("runAsNonRoot with the image's numeric user", func(t *testing.T) {
		pod := busyboxPod("nonroot", "id", "-u")
		pod.Spec.Containers[0].Image = agenttest.NonRootImage
		yes := true
		pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsNonRoot: &yes}
		if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatalf("SyncPod: %v", err)
		}
		st := waitExited(t, rt, pod, "app")
		b, err := os.ReadFile(st.LogPath)
		if err != nil || st.ExitCode != 0 || !strings.Contains(string(b), " 1234") {
			t.Fatalf("exit %d, log %q, %v; want uid 1234", st.ExitCode, b, err)
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("a pull of a missing image fails at once, on loopback", func(t *testing.T) {
		pod := busyboxPod("pull")
		pod.Spec.Containers[0].Image = "registry.k8s.io/e2e-test-images/not-imported:1.0"
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
		start := time.Now()
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		if err := res.Err(); !errors.Is(err, nodekit.ErrImagePull) {
			t.Fatalf("error %v is not ErrImagePull", err)
		}
		if f := res.Failure("app"); f == nil || !strings.Contains(f.Message, "127.0.0.1:9") {
			t.Fatalf("the pull did not go to the loopback blackhole: %+v", f)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("the failed pull took %v", d)
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("termination message falls back to the log", func(t *testing.T) {
		pod := busyboxPod("fallback", "sh", "-c", "echo line one; echo last words; exit 5")
		pod.Spec.Containers[0].TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
		if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatal(err)
		}
		st := waitExited(t, rt, pod, "app")
		if st.ExitCode != 5 || st.Message != "line one\nlast words\n" {
			t.Fatalf("exit %d message %q", st.ExitCode, st.Message)
		}
		killAndRemove(t, rt, pod)
	})

	t.Run("termination message", func(t *testing.T) {
		pod := busyboxPod("msg", "sh", "-c", "echo -n bye-bye > /dev/termination-log; exit 3")
		pod.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
		dir := t.TempDir()
		res := rt.SyncPod(ctx, nodekit.SyncPodRequest{
			Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
			Options: func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
				return &nodekit.ContainerOptions{PodContainerDir: dir}, nil
			},
		})
		if err := res.Err(); err != nil {
			t.Fatal(err)
		}
		st := waitExited(t, rt, pod, "app")
		if st.ExitCode != 3 || st.Message != "bye-bye" {
			t.Fatalf("exit %d message %q, want 3 and bye-bye", st.ExitCode, st.Message)
		}
		killAndRemove(t, rt, pod)
	})
}

func busyboxPod(name string, cmd ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: cmd,
		}}},
	}
}

// waitExited polls the runtime (a real one: there is no clock to fake)
// until the named container has exited.
func waitExited(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod, name string) *nodekit.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := rt.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.FindContainer(name); c != nil && c.State == nodekit.StateExited {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("container %s of %s did not exit within 30s", name, pod.Name)
	return nil
}

func waitLog(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod, name, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := rt.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.FindContainer(name); c != nil && c.LogPath != "" {
			if b, _ := os.ReadFile(c.LogPath); strings.Contains(string(b), want) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("log of %s/%s never showed %q", pod.Name, name, want)
}

// killAndRemove stops the pod and removes its containers and sandboxes,
// then checks the runtime no longer lists it.
func killAndRemove(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod) {
	t.Helper()
	ctx := t.Context()
	pods, err := rt.ListPods(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.ID != pod.UID {
			continue
		}
		if err := rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: p}); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Containers {
			if err := rt.RemoveContainer(ctx, c.ID); err != nil {
				t.Fatal(err)
			}
		}
		for _, sb := range p.Sandboxes {
			if err := rt.RemovePodSandbox(ctx, sb.ID.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	pods, _ = rt.ListPods(ctx, true)
	for _, p := range pods {
		if p.ID == pod.UID {
			t.Fatalf("pod %s still listed after removal: %+v", pod.Name, p)
		}
	}
}

// checkSandboxImage: containerd 1.6 names its sandbox image in its verbose
// status; containerd 2 does not, and pins the image instead (CRI
// Image.pinned), which image GC honours.
func checkSandboxImage(t *testing.T, rt *criruntime.Runtime, version string) {
	t.Helper()
	ctx := t.Context()
	img, err := rt.SandboxImage(ctx)
	if err != nil {
		t.Fatalf("SandboxImage: %v", err)
	}
	if version != agenttest.ContainerdVersion2 {
		if img != agenttest.PauseImage {
			t.Fatalf("SandboxImage = %q; want %q", img, agenttest.PauseImage)
		}
		return
	}
	if img != "" {
		t.Fatalf("SandboxImage = %q on containerd 2; want \"\" (it does not report it)", img)
	}
	imgs, err := rt.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if slices.Contains(im.RepoTags, agenttest.PauseImage) {
			if !im.Pinned {
				t.Fatalf("containerd 2 does not pin its sandbox image %s: %+v", agenttest.PauseImage, im)
			}
			return
		}
	}
	t.Fatalf("sandbox image %s not listed", agenttest.PauseImage)
}
