package eviction_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/eviction"
	"github.com/nodekit/nodekit/stats"
)

// TestEvictionOnContainerd wires the eviction manager to real stats from a
// private containerd: a nodefs.available hard threshold set above the free
// space puts the node under DiskPressure; node-level reclaim runs before
// any pod is evicted; a pod that filled its emptyDir past sizeLimit is
// evicted with reason Evicted; a Guaranteed pod within its limits stays.
func TestEvictionOnContainerd(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := t.Context()
	root, logs := t.TempDir(), t.TempDir()
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })

	grace := int64(1)
	filler := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "default", UID: "uid-ev-filler"},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace,
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(1<<20, resource.BinarySI)}}}},
			Containers: []v1.Container{{Name: "app", Image: agenttest.BusyboxImage, ImagePullPolicy: v1.PullNever,
				Command:      []string{"sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=4 && sleep 300"},
				VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}}},
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	guaranteed := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "guaranteed", Namespace: "default", UID: "uid-ev-guaranteed"},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{{Name: "app", Image: agenttest.BusyboxImage,
			ImagePullPolicy: v1.PullNever, Command: []string{"sleep", "300"}, Resources: v1.ResourceRequirements{Requests: res, Limits: res}}}},
	}
	for _, pod := range []*v1.Pod{filler, guaranteed} {
		opts := func(_ context.Context, pod *v1.Pod, c *v1.Container, _ []string) (*nodekit.ContainerOptions, error) {
			var o nodekit.ContainerOptions
			for _, m := range c.VolumeMounts {
				dir := filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", m.Name)
				if err := os.MkdirAll(dir, 0o777); err != nil {
					return nil, err
				}
				o.Mounts = append(o.Mounts, nodekit.Mount{Name: m.Name, ContainerPath: m.MountPath, HostPath: dir})
			}
			return &o, nil
		}
		if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Options: opts,
			Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
			t.Fatalf("SyncPod %s: %v", pod.Name, err)
		}
	}
	t.Cleanup(func() {
		pods, _ := rt.ListPods(context.Background(), true)
		for _, p := range pods {
			_ = rt.KillPod(context.Background(), nodekit.KillPodRequest{Running: p})
			for _, sb := range p.Sandboxes {
				_ = rt.RemovePodSandbox(context.Background(), sb.ID.ID)
			}
		}
	})

	sp, err := stats.New(stats.Config{RootDir: root, PodLogsDir: logs, Runtime: rt, Pods: rt, DiskUsagePeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the filler has written its 4 MiB.
	deadline := time.Now().Add(60 * time.Second)
	for {
		use, _ := stats.Du(filepath.Join(root, "pods", string(filler.UID), "volumes", "kubernetes.io~empty-dir", "scratch"))
		if use.Bytes >= 4<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("filler wrote only %d bytes", use.Bytes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fs, err := stats.Statfs(root)
	if err != nil {
		t.Fatal(err)
	}
	ths, err := eviction.ParseThresholds(eviction.ThresholdConfig{Hard: map[string]string{
		// Above the free space: the node is under disk pressure whatever we do.
		"nodefs.available": fmt.Sprint(fs.Available + 1<<30),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []string
	record := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	killed := map[string]v1.PodStatus{}
	m, err := eviction.New(eviction.Config{
		Thresholds:                    ths,
		LocalStorageCapacityIsolation: true,
		Stats:                         sp,
		Pods:                          eviction.PodListerFunc(func(context.Context) []*v1.Pod { return []*v1.Pod{guaranteed, filler} }),
		ContainerGC:                   eviction.ReclaimFunc(func(context.Context) error { record("containers"); return nil }),
		ImageGC:                       eviction.ReclaimFunc(func(context.Context) error { record("images"); return nil }),
		Killer: eviction.PodKillerFunc(func(ctx context.Context, pod *v1.Pod, grace int64, status func(*v1.PodStatus)) error {
			record("kill " + pod.Name)
			var st v1.PodStatus
			status(&st)
			killed[pod.Name] = st
			pods, err := rt.ListPods(ctx, false)
			if err != nil {
				return err
			}
			g := time.Duration(grace) * time.Second
			for _, p := range pods {
				if p.ID == pod.UID {
					return rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: p, GracePeriod: &g})
				}
			}
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}

	// First step: the filler is over its emptyDir limit and goes at once.
	evicted, err := m.Synchronize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evicted) != 1 || evicted[0] != filler {
		t.Fatalf("evicted %v, want the filler", evicted)
	}
	if !m.UnderPressure(v1.NodeDiskPressure) {
		t.Error("no DiskPressure with nodefs.available above the free space")
	}
	st := killed["filler"]
	if st.Phase != v1.PodFailed || st.Reason != "Evicted" || st.Message != `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ` {
		t.Errorf("filler status = %+v", st)
	}
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: guaranteed}); d.Admit || d.Reason != "Evicted" {
		t.Errorf("admission under DiskPressure = %+v", d)
	}

	// Second step, threshold only (no local-storage rule, no candidates):
	// node-level reclaim runs first, dead containers then images.
	m2, err := eviction.New(eviction.Config{Thresholds: ths, Stats: sp,
		Pods:        eviction.PodListerFunc(func(context.Context) []*v1.Pod { return nil }),
		ContainerGC: eviction.ReclaimFunc(func(context.Context) error { record("containers"); return nil }),
		ImageGC:     eviction.ReclaimFunc(func(context.Context) error { record("images"); return nil }),
		Killer:      eviction.PodKillerFunc(func(context.Context, *v1.Pod, int64, func(*v1.PodStatus)) error { record("kill?"); return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := m2.Synchronize(ctx); err != nil || len(ev) != 0 {
		t.Fatalf("second manager evicted %v, %v", ev, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"kill filler", "containers", "images"}; !slices.Equal(calls, want) {
		t.Errorf("calls = %v, want %v", calls, want)
	}
	// The guaranteed pod still runs.
	pods, err := rt.ListPods(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	alive := false
	for _, p := range pods {
		if p.ID == guaranteed.UID && len(p.Containers) == 1 {
			alive = true
		}
		if p.ID == filler.UID && len(p.Containers) > 0 {
			t.Errorf("filler still has running containers")
		}
	}
	if !alive {
		t.Error("guaranteed pod was stopped")
	}
}
