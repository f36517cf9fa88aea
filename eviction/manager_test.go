package eviction

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// fakeStats returns the summaries in turn, the last one forever.
type fakeStats struct{ sums []*statsapi.Summary }

func (f *fakeStats) Summary(context.Context, bool) (*statsapi.Summary, error) {
	s := f.sums[0]
	if len(f.sums) > 1 {
		f.sums = f.sums[1:]
	}
	return s, nil
}

type killed struct {
	pod    *v1.Pod
	grace  int64
	status v1.PodStatus
}

type fakeKiller struct{ killed []killed }

func (f *fakeKiller) KillPod(_ context.Context, pod *v1.Pod, grace int64, status func(*v1.PodStatus)) error {
	var st v1.PodStatus
	status(&st)
	f.killed = append(f.killed, killed{pod, grace, st})
	return nil
}

// countedEvictions counts evictions by signal.
type countedEvictions map[string]int

func (c countedEvictions) IncEviction(signal string) { c[signal]++ }

var (
	_ Metrics         = countedEvictions(nil)
	_ SummaryProvider = (*fakeStats)(nil)
	_ PodKiller       = (*fakeKiller)(nil)
)

func TestSynchronizeReclaimsBeforeEvicting(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	hard := Threshold{Signal: SignalNodeFsAvailable, Value: Value{Percentage: 0.1}}
	pods := []*v1.Pod{mkPod("a", 0), mkPod("b", 0)}
	var calls []string
	mk := func(afterReclaim uint64) (*Manager, *fakeKiller) {
		k := &fakeKiller{}
		m, err := New(Config{
			Thresholds: []Threshold{hard},
			Stats:      &fakeStats{sums: []*statsapi.Summary{nodeSummary(clk.Now(), 1, 1, 5, 100), nodeSummary(clk.Now(), 1, 1, afterReclaim, 100)}},
			Pods:       PodListerFunc(func(context.Context) []*v1.Pod { return pods }),
			Killer:     k,
			ImageGC: ReclaimFunc(func(context.Context) error {
				calls = append(calls, "images")
				return nil
			}),
			ContainerGC: ReclaimFunc(func(context.Context) error {
				calls = append(calls, "containers")
				return nil
			}),
			Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		return m, k
	}

	m, k := mk(50)
	evicted, err := m.Synchronize(t.Context())
	if err != nil || len(evicted) != 0 || len(k.killed) != 0 {
		t.Fatalf("reclaim sufficed, yet evicted %v killed %v err %v", evicted, k.killed, err)
	}
	if !slices.Equal(calls, []string{"containers", "images"}) {
		t.Errorf("reclaim calls = %v", calls)
	}
	if !m.UnderPressure(v1.NodeDiskPressure) || m.UnderPressure(v1.NodeMemoryPressure) {
		t.Errorf("conditions = %v, want DiskPressure", m.Conditions())
	}
	if d := m.Admit(t.Context(), nodekit.AdmitRequest{Pod: mkPod("new", 0, "1Mi")}); d.Admit || d.Reason != Reason {
		t.Errorf("admit under disk pressure = %+v", d)
	}

	calls = nil
	m, k = mk(5)
	evicted, err = m.Synchronize(t.Context())
	if err != nil || len(evicted) != 1 || len(k.killed) != 1 {
		t.Fatalf("evicted %v killed %v err %v", evicted, k.killed, err)
	}
	got := k.killed[0]
	if got.grace != 1 || got.status.Phase != v1.PodFailed || got.status.Reason != "Evicted" ||
		got.status.Message != "The node was low on resource: ephemeral-storage. Threshold quantity: 10, available: 5. " {
		t.Errorf("kill = grace %d status %+v", got.grace, got.status)
	}
	if len(got.status.Conditions) != 1 || got.status.Conditions[0].Type != v1.DisruptionTarget ||
		got.status.Conditions[0].Reason != v1.PodReasonTerminationByKubelet {
		t.Errorf("conditions = %+v", got.status.Conditions)
	}
}

func TestSynchronizeNeverEvictsCritical(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	static := mkPod("static", 0)
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	critical := mkPod("critical", SystemCriticalPriority+1)
	normal := mkPod("normal", 100, "1Gi")
	sum := nodeSummary(clk.Now(), 10, 990, 50, 100,
		podStats(static, 500), podStats(critical, 500), podStats(normal, 10))
	k := &fakeKiller{}
	counted := countedEvictions{}
	m, err := New(Config{
		Thresholds: []Threshold{{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("100")}}},
		Stats:      &fakeStats{sums: []*statsapi.Summary{sum}},
		Pods:       PodListerFunc(func(context.Context) []*v1.Pod { return []*v1.Pod{static, critical, normal} }),
		Killer:     k,
		Clock:      clk,
		Metrics:    counted,
	})
	if err != nil {
		t.Fatal(err)
	}
	evicted, _ := m.Synchronize(t.Context())
	if len(evicted) != 1 || evicted[0] != normal || len(k.killed) != 1 {
		t.Fatalf("evicted %v, want only normal", names(evicted))
	}
	if len(counted) != 1 || counted["memory.available"] != 1 {
		t.Fatalf("evictions counted %v, want memory.available 1", counted)
	}
	// Only critical pods left: nothing is evicted.
	k.killed = nil
	m.cfg.Pods = PodListerFunc(func(context.Context) []*v1.Pod { return []*v1.Pod{static, critical} })
	clk.Step(time.Second)
	m.cfg.Stats = &fakeStats{sums: []*statsapi.Summary{nodeSummary(clk.Now(), 10, 990, 50, 100)}}
	if evicted, _ := m.Synchronize(t.Context()); len(evicted) != 0 || len(k.killed) != 0 {
		t.Errorf("evicted critical pods: %v", names(evicted))
	}
	if !m.UnderPressure(v1.NodeMemoryPressure) {
		t.Error("no MemoryPressure")
	}
}

func TestSynchronizeLocalStorage(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	filler := mkPod("filler", 0)
	filler.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: qty("1Mi")}}}}
	ok := mkPod("guaranteed", 0, "100Mi")
	fs := podStats(filler, 1)
	fs.VolumeStats = []statsapi.VolumeStats{{Name: "scratch", FsStats: statsapi.FsStats{UsedBytes: ptr(uint64(2 << 20))}}}
	k := &fakeKiller{}
	counted := countedEvictions{}
	m, err := New(Config{
		Metrics:                       counted,
		LocalStorageCapacityIsolation: true,
		Stats:                         &fakeStats{sums: []*statsapi.Summary{nodeSummary(clk.Now(), 500, 500, 50, 100, fs, podStats(ok, 1))}},
		Pods:                          PodListerFunc(func(context.Context) []*v1.Pod { return []*v1.Pod{ok, filler} }),
		Killer:                        k,
		Clock:                         clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	evicted, err := m.Synchronize(t.Context())
	if err != nil || len(evicted) != 1 || evicted[0] != filler {
		t.Fatalf("evicted %v err %v", names(evicted), err)
	}
	st := k.killed[0].status
	if st.Reason != "Evicted" || st.Message != `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ` || len(st.Conditions) != 0 {
		t.Errorf("status = %+v", st)
	}
	if len(counted) != 1 || counted["emptydirfs.limit"] != 1 {
		t.Errorf("evictions counted %v, want emptydirfs.limit 1", counted)
	}
}

func TestNewRequiresParts(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New accepted an empty config")
	}
}

func TestWaitForCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cleaned atomic.Bool
		m, err := New(Config{Stats: &fakeStats{}, Pods: PodListerFunc(nil), Killer: &fakeKiller{},
			Cleanup: CleanupFunc(func(context.Context, *v1.Pod) bool { return cleaned.Load() })})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		go func() {
			time.Sleep(3500 * time.Millisecond)
			cleaned.Store(true)
		}()
		m.WaitForCleanup(t.Context(), []*v1.Pod{mkPod("a", 0)})
		if d := time.Since(start); d != 4*time.Second {
			t.Errorf("waited %v, want 4s (first poll after cleanup)", d)
		}
		cleaned.Store(false)
		start = time.Now()
		m.WaitForCleanup(t.Context(), []*v1.Pod{mkPod("a", 0)})
		if d := time.Since(start); d != 30*time.Second {
			t.Errorf("waited %v, want the 30s timeout", d)
		}
	})
}

// nodeAndPodStats offers the node's stats alone (NodeSummaryProvider) and
// the whole summary, and records which was read.
type nodeAndPodStats struct {
	full  *statsapi.Summary
	reads []string
}

func (s *nodeAndPodStats) Summary(context.Context, bool) (*statsapi.Summary, error) {
	s.reads = append(s.reads, "summary")
	return s.full, nil
}

func (s *nodeAndPodStats) NodeSummary(context.Context) (*statsapi.Summary, error) {
	s.reads = append(s.reads, "node")
	node := *s.full
	node.Pods = nil
	return &node, nil
}

var _ NodeSummaryProvider = (*nodeAndPodStats)(nil)

// The pods' stats are read only when they can change the step's outcome:
// a pod with a local-storage limit, or a threshold whose pods are ranked.
func TestSynchronizeReadsPodStatsOnlyWhenTheyDecide(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	small, big := mkPod("small", 0, "1Gi"), mkPod("big", 0, "1Gi")
	limited := mkPod("limited", 0, "1Gi")
	limited.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: qty("1Mi")}}}}
	memory := []Threshold{{Signal: SignalMemoryAvailable, Value: Value{Quantity: qty("100")}}}
	tests := []struct {
		name       string
		pods       []*v1.Pod
		memAvail   uint64
		wantReads  []string
		wantEvicts []string
	}{
		{"no pressure, no limits", []*v1.Pod{small, big}, 500, []string{"node"}, nil},
		{"no pressure, a local-storage limit", []*v1.Pod{small, limited}, 500, []string{"summary"}, nil},
		{"memory pressure ranks on the pods' stats", []*v1.Pod{small, big}, 10, []string{"node", "summary"}, []string{"big"}},
		{"memory pressure, stats already read", []*v1.Pod{small, big, limited}, 10, []string{"summary"}, []string{"big"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stats := &nodeAndPodStats{full: nodeSummary(clk.Now(), tt.memAvail, 990, 50, 100,
				podStats(small, 10<<20), podStats(big, 900<<20), podStats(limited, 0))}
			k := &fakeKiller{}
			m, err := New(Config{Thresholds: memory, LocalStorageCapacityIsolation: true, Stats: stats,
				Pods: PodListerFunc(func(context.Context) []*v1.Pod { return tt.pods }), Killer: k, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			evicted, err := m.Synchronize(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(stats.reads, tt.wantReads) {
				t.Errorf("reads = %v, want %v", stats.reads, tt.wantReads)
			}
			if got := names(evicted); !slices.Equal(got, tt.wantEvicts) {
				t.Errorf("evicted %v, want %v", got, tt.wantEvicts)
			}
		})
	}
}
