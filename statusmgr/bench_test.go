package statusmgr_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/statusmgr"
)

const benchPods = 110 // kubelet's default maxPods

// benchSink accepts every write, counts it and keeps the last status of
// each pod, so a PodGetter can serve the API server's view.
type benchSink struct {
	mu   sync.Mutex
	sets int
	last map[types.UID]*v1.PodStatus
}

var _ nodekit.StatusSink = (*benchSink)(nil)

func (s *benchSink) SetPodStatus(_ context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets++
	s.last[pod.UID] = st.DeepCopy()
	return nil
}

func (s *benchSink) DeletePod(context.Context, *v1.Pod) error { return nil }

func (s *benchSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sets
}

// benchPod is a running pod of realistic size: an app container and a
// sidecar with resources, on an API-server source.
func benchPod(i int) *v1.Pod {
	container := func(name string) v1.Container {
		return v1.Container{
			Name: name, Image: "registry.example/" + name + ":1.0",
			Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")},
			},
		}
	}
	name := fmt.Sprintf("pod-%03d", i)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "bench", UID: types.UID(name + "-uid"), Generation: 1,
			Annotations: map[string]string{"kubernetes.io/config.source": "api"},
		},
		Spec: v1.PodSpec{
			NodeName: "node-1", RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{container("app"), container("sidecar")},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBurstable},
	}
}

// benchStatus is what a worker computes for a pod whose containers run;
// ready says whether the app container passes its readiness probe.
func benchStatus(pod *v1.Pod, i int, ready bool) v1.PodStatus {
	started := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cond := func(t v1.PodConditionType, ok bool) v1.PodCondition {
		s := v1.ConditionTrue
		if !ok {
			s = v1.ConditionFalse
		}
		return v1.PodCondition{Type: t, Status: s}
	}
	ip := fmt.Sprintf("10.88.%d.%d", i/250, i%250+2)
	st := v1.PodStatus{
		Phase: v1.PodRunning,
		Conditions: []v1.PodCondition{
			cond(v1.PodReadyToStartContainers, true), cond(v1.PodInitialized, true),
			cond(v1.ContainersReady, ready), cond(v1.PodReady, ready), cond(v1.PodScheduled, true),
		},
		HostIP: "10.88.0.1", HostIPs: []v1.HostIP{{IP: "10.88.0.1"}},
		PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}},
		QOSClass: v1.PodQOSBurstable,
	}
	for j, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "sha256:0123456789abcdef",
			ContainerID: fmt.Sprintf("containerd://%03d%d", i, j),
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}},
			Ready:       ready || j > 0, Started: new(true),
			AllocatedResources: c.Resources.Requests.DeepCopy(),
			Resources:          c.Resources.DeepCopy(),
		})
	}
	return st
}

// benchManager returns a manager that has published a running status for
// each of 110 pods, with the pods and two statuses per pod (ready, not
// ready).
func benchManager(b *testing.B, getter bool) (*statusmgr.Manager, *benchSink, []*v1.Pod, [2][]v1.PodStatus) {
	b.Helper()
	sink := &benchSink{last: map[types.UID]*v1.PodStatus{}}
	pods := make([]*v1.Pod, benchPods)
	var statuses [2][]v1.PodStatus
	byUID := map[types.UID]*v1.Pod{}
	for i := range pods {
		pods[i] = benchPod(i)
		byUID[pods[i].UID] = pods[i]
		statuses[0] = append(statuses[0], benchStatus(pods[i], i, true))
		statuses[1] = append(statuses[1], benchStatus(pods[i], i, false))
	}
	cfg := statusmgr.Config{Sink: sink, Clock: clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC))}
	if getter {
		// The API server's view: the pod with the status last published.
		cfg.Pods = statusmgr.PodGetterFunc(func(uid types.UID) (*v1.Pod, bool) {
			p, ok := byUID[uid]
			return p, ok
		})
	}
	m, err := statusmgr.NewManager(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i, p := range pods {
		if err := m.SetPodStatus(p, statuses[0][i]); err != nil {
			b.Fatal(err)
		}
	}
	if err := m.SyncOnce(b.Context()); err != nil {
		b.Fatal(err)
	}
	if n := sink.count(); n != benchPods {
		b.Fatalf("first sync published %d statuses, want %d", n, benchPods)
	}
	for _, p := range pods {
		p.Status = *sink.last[p.UID]
	}
	return m, sink, pods, statuses
}

// BenchmarkSetPodStatus110 measures one round of SetPodStatus for each of
// 110 running pods: what the sync loop does on every periodic sync.
//
// unchanged: every status equals the cached one (the steady state: the
// manager compares and keeps its version). changed: every pod's readiness
// flips each round, so every status is recorded as a new version.
func BenchmarkSetPodStatus110(b *testing.B) {
	b.Run("unchanged", func(b *testing.B) {
		m, sink, pods, statuses := benchManager(b, false)
		b.ReportAllocs()
		for b.Loop() {
			for i, p := range pods {
				if err := m.SetPodStatus(p, statuses[0][i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := m.SyncOnce(b.Context()); err != nil {
			b.Fatal(err)
		}
		if n := sink.count(); n != benchPods {
			b.Fatalf("unchanged statuses were published: %d writes, want %d", n, benchPods)
		}
	})

	b.Run("changed", func(b *testing.B) {
		m, sink, pods, statuses := benchManager(b, false)
		rounds := 0
		b.ReportAllocs()
		for b.Loop() {
			rounds++
			for i, p := range pods {
				if err := m.SetPodStatus(p, statuses[rounds%2][i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := m.SyncOnce(b.Context()); err != nil {
			b.Fatal(err)
		}
		if n := sink.count(); n != 2*benchPods {
			b.Fatalf("after changed statuses: %d writes, want %d", n, 2*benchPods)
		}
	})
}

// BenchmarkResync110 measures the periodic resync (every 10 s) of 110 pods
// whose API-server status matches the manager's: each is compared with the
// API server's copy and none is republished.
func BenchmarkResync110(b *testing.B) {
	m, sink, _, _ := benchManager(b, true)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Resync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if n := sink.count(); n != benchPods {
		b.Fatalf("resync republished matching statuses: %d writes, want %d", n, benchPods)
	}
}

// BenchmarkSyncOneChanged measures what a sync costs when one pod's status
// changed among n known ones (the common case in a burst: each new status
// wakes a sync): one op is one SetPodStatus that changes the status and the
// SyncOnce that publishes it. It stays flat as n grows when a sync looks at
// the changed pods only.
func BenchmarkSyncOneChanged(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			sink := &benchSink{last: map[types.UID]*v1.PodStatus{}}
			m, err := statusmgr.NewManager(statusmgr.Config{Sink: sink, Clock: clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC))})
			if err != nil {
				b.Fatal(err)
			}
			pods := make([]*v1.Pod, n)
			var statuses [2][]v1.PodStatus
			for i := range pods {
				pods[i] = benchPod(i)
				statuses[0] = append(statuses[0], benchStatus(pods[i], i, true))
				statuses[1] = append(statuses[1], benchStatus(pods[i], i, false))
				if err := m.SetPodStatus(pods[i], statuses[0][i]); err != nil {
					b.Fatal(err)
				}
			}
			if err := m.SyncOnce(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				i := k % n
				if err := m.SetPodStatus(pods[i], statuses[(k/n+1)%2][i]); err != nil {
					b.Fatal(err)
				}
				if err := m.SyncOnce(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			if got := sink.count(); got != n+b.N {
				b.Fatalf("%d writes, want %d (one per changed status)", got, n+b.N)
			}
		})
	}
}
