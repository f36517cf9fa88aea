package gc_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/gc"
)

type goneSet map[types.UID]bool

func (g goneSet) ShouldPodContentBeRemoved(uid types.UID) bool { return g[uid] }
func (g goneSet) ShouldPodRuntimeBeRemoved(uid types.UID) bool { return g[uid] }

// TestContainerGCOnContainerd restarts an exiting container four times on
// a real containerd, then checks container GC keeps only the newest dead
// instance, and removes everything once the pod is gone.
func TestContainerGCOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "exits", Namespace: "default", UID: "uid-gc-exits"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"true"},
		}}},
	}
	res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		st := waitAllExited(t, rt, pod, i+1)
		if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Status: st,
			Actions: nodekit.PodActions{SandboxID: res.SandboxID, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st := waitAllExited(t, rt, pod, 4)
	newest := st.Containers[0] // newest first
	for _, c := range st.Containers {
		if c.CreatedAt.After(newest.CreatedAt) {
			newest = c
		}
	}

	gone := goneSet{}
	g, err := gc.NewContainerGC(gc.ContainerGCConfig{Policy: gc.ContainerPolicy{MaxPerPodContainer: 1, MaxContainers: -1}}, rt, gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.GarbageCollect(ctx, false); err != nil {
		t.Fatal(err)
	}
	p := listPod(t, rt, pod.UID)
	if p == nil || len(p.Containers) != 1 || len(p.Sandboxes) != 1 {
		t.Fatalf("after GC: %+v, want one dead container and the sandbox", p)
	}
	if p.Containers[0].ID != newest.ID {
		t.Errorf("kept %s, want the newest %s", p.Containers[0].ID, newest.ID)
	}

	gone[pod.UID] = true
	if err := rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: p}); err != nil {
		t.Fatal(err)
	}
	if err := g.GarbageCollect(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p := listPod(t, rt, pod.UID); p != nil {
		t.Fatalf("gone pod still has %d containers, %d sandboxes", len(p.Containers), len(p.Sandboxes))
	}

	// Image GC: with a busybox pod running, reclaiming removes every image
	// but busybox (in use) and the sandbox image (pinned).
	running := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeps", Namespace: "default", UID: "uid-gc-sleeps"},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptrTo(int64(1)), Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "300"},
		}}},
	}
	if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: running, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pods, _ := rt.ListPods(context.Background(), true)
		for _, p := range pods {
			if p.ID == running.UID {
				_ = rt.KillPod(context.Background(), nodekit.KillPodRequest{Pod: running, Running: p})
			}
		}
	})
	before, err := rt.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	igc, err := gc.NewImageGC(gc.ImageGCConfig{PinnedImages: []string{agenttest.PauseImage}}, rt, rt, noFs{})
	if err != nil {
		t.Fatal(err)
	}
	if err := igc.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := rt.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, im := range after {
		left = append(left, im.RepoTags...)
	}
	t.Logf("images before %d, after %d: %v", len(before), len(after), left)
	if len(after) != 2 || !slices.Contains(left, agenttest.BusyboxImage) || !slices.Contains(left, agenttest.PauseImage) {
		t.Errorf("after reclaim: %v, want only busybox and pause", left)
	}
}

type noFs struct{}

func (noFs) ImageFs(context.Context) (*statsapi.FsStats, error) { return nil, errors.New("unused") }

func listPod(t *testing.T, rt *criruntime.Runtime, uid types.UID) *nodekit.Pod {
	t.Helper()
	pods, err := rt.ListPods(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.ID == uid {
			return p
		}
	}
	return nil
}

// waitAllExited polls the real runtime until n containers exist and all
// have exited.
func waitAllExited(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod, n int) *nodekit.PodStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := rt.GetPodStatus(t.Context(), pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		exited := 0
		for _, c := range st.Containers {
			if c.State == nodekit.StateExited {
				exited++
			}
		}
		if len(st.Containers) == n && exited == n {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d exited containers not reached within 30s", n)
	return nil
}

func ptrTo[T any](v T) *T { return &v }
