package eviction

import (
	"fmt"
	"math/rand"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// naiveRank is the reference: repeatedly take, from the pods left, the
// first one that no other pod beats on (no stats, usage over request,
// lower priority, larger usage over request), each worked out directly
// from the raw fields.
func naiveRank(sig Signal, pods []*v1.Pod, stats map[string]statsapi.PodStats, dedicated bool) []*v1.Pod {
	type key struct {
		stats   bool
		over    bool
		prio    int32
		overUse int64
	}
	keyOf := func(p *v1.Pod) key {
		s, ok := stats[string(p.UID)]
		k := key{stats: ok, prio: *p.Spec.Priority}
		if !ok {
			return k
		}
		var use, req int64
		switch sig {
		case SignalMemoryAvailable:
			use = int64(*s.Memory.WorkingSetBytes)
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Requests[v1.ResourceMemory]; ok {
					req += q.Value()
				}
			}
		case SignalPIDAvailable:
			k.overUse = int64(*s.ProcessStats.ProcessCount)
			return k
		case SignalNodeFsAvailable, SignalImageFsAvailable:
			for _, c := range s.Containers {
				if !dedicated || sig == SignalImageFsAvailable {
					use += int64(*c.Rootfs.UsedBytes)
				}
				if !dedicated || sig == SignalNodeFsAvailable {
					use += int64(*c.Logs.UsedBytes)
				}
			}
			if !dedicated || sig == SignalNodeFsAvailable {
				for _, v := range s.VolumeStats {
					use += int64(*v.UsedBytes) // every generated volume is an emptyDir
				}
			}
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Requests[v1.ResourceEphemeralStorage]; ok {
					req += q.Value()
				}
			}
		}
		k.over = use > req
		k.overUse = use - req
		return k
	}
	before := func(a, b key) bool { // a strictly before b
		if a.stats != b.stats {
			return !a.stats
		}
		if !a.stats {
			return false
		}
		if sig != SignalPIDAvailable && a.over != b.over {
			return a.over
		}
		if a.prio != b.prio {
			return a.prio < b.prio
		}
		return a.overUse > b.overUse
	}
	left := append([]*v1.Pod{}, pods...)
	var out []*v1.Pod
	for len(left) > 0 {
		best := 0
		for i := 1; i < len(left); i++ {
			if before(keyOf(left[i]), keyOf(left[best])) {
				best = i
			}
		}
		out = append(out, left[best])
		left = append(left[:best], left[best+1:]...)
	}
	return out
}

// randomPods builds up to 12 pods with small value ranges, so ties are
// common.
func randomPods(r *rand.Rand) ([]*v1.Pod, map[string]statsapi.PodStats) {
	n := r.Intn(12)
	pods := make([]*v1.Pod, 0, n)
	stats := map[string]statsapi.PodStats{}
	for i := 0; i < n; i++ {
		p := mkPod(fmt.Sprintf("p%d", i), int32(r.Intn(3)*1000))
		p.Spec.Containers = nil
		for c := 0; c < 1+r.Intn(2); c++ {
			ct := v1.Container{Name: fmt.Sprintf("c%d", c)}
			if r.Intn(2) == 0 {
				ct.Resources.Requests = v1.ResourceList{
					v1.ResourceMemory:           *resource.NewQuantity(int64(r.Intn(4)*100), resource.BinarySI),
					v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(r.Intn(4)*100), resource.BinarySI),
				}
			}
			p.Spec.Containers = append(p.Spec.Containers, ct)
		}
		if r.Intn(2) == 0 {
			p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		}
		pods = append(pods, p)
		if r.Intn(8) == 0 {
			continue // no stats for this one
		}
		s := podStats(p, uint64(r.Intn(5)*100))
		s.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr(uint64(r.Intn(5)))}
		for _, c := range p.Spec.Containers {
			s.Containers = append(s.Containers, statsapi.ContainerStats{Name: c.Name,
				Rootfs: &statsapi.FsStats{UsedBytes: ptr(uint64(r.Intn(3) * 100)), InodesUsed: ptr(uint64(1))},
				Logs:   &statsapi.FsStats{UsedBytes: ptr(uint64(r.Intn(3) * 100)), InodesUsed: ptr(uint64(1))}})
		}
		for _, v := range p.Spec.Volumes {
			s.VolumeStats = append(s.VolumeStats, statsapi.VolumeStats{Name: v.Name,
				FsStats: statsapi.FsStats{UsedBytes: ptr(uint64(r.Intn(3) * 100))}})
		}
		stats[p.Name] = s
	}
	return pods, stats
}

func TestRankMatchesNaive(t *testing.T) {
	for _, sig := range []Signal{SignalMemoryAvailable, SignalPIDAvailable, SignalNodeFsAvailable, SignalImageFsAvailable} {
		for _, dedicated := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dedicated=%v", sig, dedicated), func(t *testing.T) {
				f := func(seed int64) bool {
					pods, stats := randomPods(rand.New(rand.NewSource(seed)))
					want := naiveRank(sig, pods, stats, dedicated)
					got := append([]*v1.Pod{}, pods...)
					Rank(sig, got, func(p *v1.Pod) (statsapi.PodStats, bool) { s, ok := stats[string(p.UID)]; return s, ok }, dedicated)
					for i := range want {
						if got[i] != want[i] {
							t.Logf("seed %d: got %v, want %v", seed, names(got), names(want))
							return false
						}
					}
					return len(got) == len(want)
				}
				if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestRankMemoryTable(t *testing.T) {
	over := mkPod("over-request", 0, "100Mi")
	under := mkPod("under-request-big", 0, "2Gi")
	highPrio := mkPod("high-prio-over", 1000, "10Mi")
	best := mkPod("best-effort", 0)
	stats := StatsByUID([]statsapi.PodStats{
		podStats(over, 200<<20), podStats(under, 1<<30), podStats(highPrio, 500<<20), podStats(best, 50<<20),
	})
	pods := []*v1.Pod{under, highPrio, best, over}
	Rank(SignalMemoryAvailable, pods, stats, false)
	got := names(pods)
	want := []string{"over-request", "best-effort", "high-prio-over", "under-request-big"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rank = %v, want %v", got, want)
	}
}
