package eviction

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/internal/podutil"
)

// PodStatsFunc finds the stats of a pod; false when the summary has none.
type PodStatsFunc func(pod *v1.Pod) (statsapi.PodStats, bool)

// StatsByUID indexes the pod stats of a summary by pod UID.
func StatsByUID(pods []statsapi.PodStats) PodStatsFunc {
	m := make(map[string]statsapi.PodStats, len(pods))
	for _, p := range pods {
		m[p.PodRef.UID] = p
	}
	return func(pod *v1.Pod) (statsapi.PodStats, bool) {
		s, ok := m[string(pod.UID)]
		return s, ok
	}
}

// SystemCriticalPriority is the lowest priority of system-critical pods.
const SystemCriticalPriority = 2 * 1000000000

// IsCritical reports whether the pod may never be evicted and is admitted
// under pressure: a static pod (config source not "api"), a mirror pod, or
// a pod with priority of at least SystemCriticalPriority.
func IsCritical(pod *v1.Pod) bool {
	if podutil.IsStatic(pod) || podutil.IsMirror(pod) {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}

// isBestEffort reports whether no container (nor the pod) requests or
// limits cpu or memory.
func isBestEffort(pod *v1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == v1.PodQOSBestEffort
	}
	some := func(l v1.ResourceList) bool {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := l[r]; ok && !q.IsZero() {
				return true
			}
		}
		return false
	}
	if pod.Spec.Resources != nil && (some(pod.Spec.Resources.Requests) || some(pod.Spec.Resources.Limits)) {
		return false
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if some(c.Resources.Requests) || some(c.Resources.Limits) {
				return false
			}
		}
	}
	return true
}

// request returns the pod's effective request of r (init containers,
// sidecars and pod-level resources counted as the scheduler does).
func request(pod *v1.Pod, r v1.ResourceName) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	q, ok := reqs[r]
	if !ok {
		return 0
	}
	if r == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// fsParts says which parts of a pod's storage a disk signal measures.
type fsParts struct{ rootfs, logs, volumes bool }

// diskParts returns what the signal measures: with a dedicated imagefs,
// nodefs counts logs and local volumes and imagefs counts writable
// layers; otherwise both count everything.
func diskParts(s Signal, dedicatedImageFs bool) fsParts {
	if !dedicatedImageFs {
		return fsParts{true, true, true}
	}
	if s == SignalImageFsAvailable || s == SignalImageFsInodesFree {
		return fsParts{rootfs: true}
	}
	return fsParts{logs: true, volumes: true}
}

// localVolumes returns the names of the pod's volumes that live on the
// node's disk: hostPath, disk-backed emptyDir, configMap and gitRepo.
func localVolumes(pod *v1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
			(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault) {
			out[v.Name] = true
		}
	}
	return out
}

func u64(p *uint64) int64 {
	if p == nil {
		return 0
	}
	return int64(*p)
}

// diskUsage sums a pod's bytes (or, with inodes, inodes) on the parts.
func diskUsage(pod *v1.Pod, s statsapi.PodStats, parts fsParts, inodes bool) int64 {
	fs := func(f *statsapi.FsStats) int64 {
		if f == nil {
			return 0
		}
		if inodes {
			return u64(f.InodesUsed)
		}
		return u64(f.UsedBytes)
	}
	var total int64
	for _, c := range s.Containers {
		if parts.rootfs {
			total += fs(c.Rootfs)
		}
		if parts.logs {
			total += fs(c.Logs)
		}
	}
	if parts.volumes {
		local := localVolumes(pod)
		for _, v := range s.VolumeStats {
			if local[v.Name] {
				total += fs(&v.FsStats)
			}
		}
	}
	return total
}

// Usage is the amount of signal's resource the pod uses, as ranking sees
// it: memory working set, disk bytes or inodes on the signal's
// filesystem, or process count.
func Usage(sig Signal, pod *v1.Pod, s statsapi.PodStats, dedicatedImageFs bool) int64 {
	switch sig {
	case SignalMemoryAvailable:
		if s.Memory == nil {
			return 0
		}
		return u64(s.Memory.WorkingSetBytes)
	case SignalPIDAvailable:
		if s.ProcessStats == nil {
			return 0
		}
		return u64(s.ProcessStats.ProcessCount)
	case SignalNodeFsInodesFree, SignalImageFsInodesFree:
		return diskUsage(pod, s, diskParts(sig, dedicatedImageFs), true)
	default:
		return diskUsage(pod, s, diskParts(sig, dedicatedImageFs), false)
	}
}

// rankKey is what ranking compares, in order.
type rankKey struct {
	noStats   bool  // pods without stats go first
	exceeds   bool  // usage above request goes first
	priority  int32 // lower priority goes first
	overUsage int64 // larger usage above request goes first
}

func keyFor(sig Signal, pod *v1.Pod, stats PodStatsFunc, dedicatedImageFs bool) rankKey {
	s, ok := stats(pod)
	k := rankKey{noStats: !ok, priority: corev1helpers.PodPriority(pod)}
	if !ok {
		return k
	}
	use := Usage(sig, pod, s, dedicatedImageFs)
	if sig == SignalPIDAvailable {
		k.overUsage = use
		return k
	}
	req := request(pod, sig.Resource())
	k.exceeds = use > req
	k.overUsage = use - req
	return k
}

func boolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func compareKeys(sig Signal, a, b rankKey) int {
	if c := boolFirst(a.noStats, b.noStats); c != 0 || a.noStats {
		return c
	}
	if sig != SignalPIDAvailable {
		if c := boolFirst(a.exceeds, b.exceeds); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.priority, b.priority); c != 0 {
		return c
	}
	return cmp.Compare(b.overUsage, a.overUsage)
}

// Rank orders pods in place, first to evict first, as upstream ranks for
// the signal. Memory and disk signals: pods whose usage exceeds their
// request, then lower priority, then larger usage above the request. PID:
// lower priority, then more processes. Pods without stats rank first. The
// sort is stable, so equal pods keep their input order.
func Rank(sig Signal, pods []*v1.Pod, stats PodStatsFunc, dedicatedImageFs bool) {
	keys := make(map[*v1.Pod]rankKey, len(pods))
	for _, p := range pods {
		keys[p] = keyFor(sig, p, stats, dedicatedImageFs)
	}
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int { return compareKeys(sig, keys[a], keys[b]) })
}
