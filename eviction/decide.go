package eviction

import (
	"fmt"

	"github.com/go-logr/logr"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// Reason is the pod status reason of an evicted pod and of a pod refused
// under pressure, as upstream.
const Reason = "Evicted"

// Message formats, worded as upstream.
const (
	nodeLowMessageFmt          = "The node was low on resource: %v. "
	thresholdMetMessageFmt     = "Threshold quantity: %v, available: %v. "
	nodeConditionMessageFmt    = "The node had condition: %v. "
	containerMessageFmt        = "Container %s was using %s, request is %s, has larger consumption of %v. "
	containerStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
	podStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	emptyDirMessageFmt         = "Usage of EmptyDir volume %q exceeds the limit %q. "
)

// AdmitUnderPressure is the admit rule: with no pressure every pod is
// admitted; critical pods are always admitted; under memory pressure alone
// only BestEffort pods are refused (unless they tolerate the
// node.kubernetes.io/memory-pressure NoSchedule taint); under any other
// pressure every non-critical pod is refused. Refusals carry reason
// Evicted and upstream's "The node had condition: [...]" message.
func AdmitUnderPressure(pod *v1.Pod, conditions []v1.NodeConditionType) nodekit.Decision {
	if len(conditions) == 0 || IsCritical(pod) {
		return nodekit.Admitted
	}
	if len(conditions) == 1 && conditions[0] == v1.NodeMemoryPressure {
		if !isBestEffort(pod) {
			return nodekit.Admitted
		}
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if tolerates(pod.Spec.Tolerations, taint) {
			return nodekit.Admitted
		}
	}
	return nodekit.Decision{Reason: Reason, Message: fmt.Sprintf(nodeConditionMessageFmt, conditions)}
}

func tolerates(tols []v1.Toleration, taint *v1.Taint) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(logr.Discard(), taint, false) {
			return true
		}
	}
	return false
}

// LocalStorageViolation checks the pod's local-storage limits, as
// upstream and in its order: a disk-backed emptyDir above its sizeLimit,
// the pod's total ephemeral storage above the sum of its limits, a
// container's logs (plus writable layer without a dedicated imagefs) above
// its ephemeral-storage limit. It returns the eviction message of the
// first violation.
func LocalStorageViolation(pod *v1.Pod, s statsapi.PodStats, dedicatedImageFs bool) (string, bool) {
	msg, _, bad := localStorageViolation(pod, s, dedicatedImageFs)
	return msg, bad
}

// The kubelet_evictions signals of local-storage evictions, as upstream.
const (
	signalEmptyDirFsLimit           = "emptydirfs.limit"
	signalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	signalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// storageLimited reports whether pod has a limit localStorageViolation
// checks: a disk-backed emptyDir with a size limit, or an ephemeral-storage
// limit of the pod (its own, or its containers' summed as the scheduler
// does) or of a container or sidecar. A pod without one is never evicted
// for its local storage, whatever its stats say.
func storageLimited(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if ed := v.EmptyDir; ed != nil && ed.Medium != v1.StorageMediumMemory && ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0 {
			return true
		}
	}
	_, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	return ok
}

// localStorageViolation is LocalStorageViolation with the violation's
// eviction signal.
func localStorageViolation(pod *v1.Pod, s statsapi.PodStats, dedicatedImageFs bool) (string, string, bool) {
	used := map[string]int64{}
	for _, v := range s.VolumeStats {
		used[v.Name] = u64(v.UsedBytes)
	}
	for _, v := range pod.Spec.Volumes {
		ed := v.EmptyDir
		if ed == nil || ed.Medium == v1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Sign() <= 0 {
			continue
		}
		if u, ok := used[v.Name]; ok && u > ed.SizeLimit.Value() {
			return fmt.Sprintf(emptyDirMessageFmt, v.Name, ed.SizeLimit.String()), signalEmptyDirFsLimit, true
		}
	}
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	if lim, ok := limits[v1.ResourceEphemeralStorage]; ok {
		var total int64
		if s.EphemeralStorage != nil {
			total = u64(s.EphemeralStorage.UsedBytes)
		}
		if total > lim.Value() {
			return fmt.Sprintf(podStorageMessageFmt, lim.String()), signalEphemeralPodFsLimit, true
		}
	}
	containerLimit := map[string]resource.Quantity{}
	add := func(c v1.Container) {
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && !q.IsZero() {
			containerLimit[c.Name] = q
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if podutil.IsSidecar(&c) {
			add(c)
		}
	}
	for _, c := range s.Containers {
		lim, ok := containerLimit[c.Name]
		if !ok {
			continue
		}
		var use int64
		if c.Logs != nil {
			use += u64(c.Logs.UsedBytes)
		}
		if !dedicatedImageFs && c.Rootfs != nil {
			use += u64(c.Rootfs.UsedBytes)
		}
		if use > lim.Value() {
			return fmt.Sprintf(containerStorageMessageFmt, c.Name, lim.String()), signalEphemeralContainerFsLimit, true
		}
	}
	return "", "", false
}

// EvictionMessage words why pod is evicted for threshold t, as upstream:
// the starved resource, the threshold and what was available, and each
// container using more than it requested.
func EvictionMessage(t Threshold, obs Observations, pod *v1.Pod, stats PodStatsFunc) string {
	res := t.Signal.Resource()
	msg := fmt.Sprintf(nodeLowMessageFmt, res)
	if o, ok := obs[t.Signal]; ok {
		msg += fmt.Sprintf(thresholdMetMessageFmt, quantity(res, t.Value.Amount(o.Capacity)), quantity(res, o.Available))
	}
	s, ok := stats(pod)
	if !ok || (res != v1.ResourceMemory && res != v1.ResourceEphemeralStorage) {
		return msg
	}
	containers := append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, cs := range s.Containers {
		for _, c := range containers {
			if c.Name != cs.Name {
				continue
			}
			req := c.Resources.Requests[res]
			var use *resource.Quantity
			switch res {
			case v1.ResourceMemory:
				if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
					use = resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
				}
			case v1.ResourceEphemeralStorage:
				if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
					use = resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
				}
			}
			if use != nil && use.Cmp(req) > 0 {
				msg += fmt.Sprintf(containerMessageFmt, c.Name, use.String(), req.String(), res)
			}
			break
		}
	}
	return msg
}

func quantity(res v1.ResourceName, v int64) *resource.Quantity {
	if res == ResourceInodes || res == ResourcePIDs {
		return resource.NewQuantity(v, resource.DecimalSI)
	}
	return resource.NewQuantity(v, resource.BinarySI)
}

// GracePeriodFor is the grace period an evicted pod gets: 1 s for a hard
// threshold (and local-storage violations); for a soft one the pod's own
// terminationGracePeriodSeconds capped at maxPodGracePeriod.
func GracePeriodFor(t *Threshold, pod *v1.Pod, maxPodGracePeriod int64) int64 {
	if t == nil || t.Hard() {
		return 1
	}
	g := maxPodGracePeriod
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		g = min(g, *pod.Spec.TerminationGracePeriodSeconds)
	}
	return g
}
