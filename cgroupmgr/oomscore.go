package cgroupmgr

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/internal/qos"
)

// OOM score adjustments, as upstream.
const (
	GuaranteedOOMScoreAdj = -997
	BestEffortOOMScoreAdj = 1000
)

// Upstream's markers of a critical pod.
const (
	systemCriticalPriority = 2 * 1000000000
	systemNodeCritical     = "system-node-critical"
)

// OOMScoreAdj is the oom_score_adj for container's processes, as upstream's
// GetContainerOOMScoreAdjust with pod-level resources on:
//   - node-critical pods (static, mirror or priority >= 2e9, and priority
//     class system-node-critical) and Guaranteed pods: -997;
//   - BestEffort: 1000;
//   - Burstable: 1000 - 1000*memoryRequest/memoryCapacity, clamped to
//     [3, 999], where a pod-level memory request not taken by the
//     containers is shared equally among them; a sidecar (restartable init
//     container) scores no higher than the regular container with the
//     smallest request.
//
// memoryCapacity is the node's memory in bytes; when it is not positive a
// Burstable container gets 999 (upstream would divide by zero).
func OOMScoreAdj(pod *v1.Pod, container *v1.Container, memoryCapacity int64) int {
	if isNodeCriticalPod(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch qos.Class(pod) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return BestEffortOOMScoreAdj - 1
	}
	var share int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		share = podMemoryRequestSharePerContainer(pod)
	}
	adj := 1000 - 1000*(container.Resources.Requests.Memory().Value()+share)/memoryCapacity
	if isSidecarOf(pod, container) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for i := 1; i < len(pod.Spec.Containers); i++ {
			least = min(least, pod.Spec.Containers[i].Resources.Requests.Memory().Value())
		}
		adj = min(adj, 1000-1000*(least+share)/memoryCapacity)
	}
	// Stay above a Guaranteed container using all memory (score 10 - 997 =
	// 3) and below BestEffort.
	if adj < 1000+GuaranteedOOMScoreAdj {
		return 1000 + GuaranteedOOMScoreAdj
	}
	if adj == BestEffortOOMScoreAdj {
		return BestEffortOOMScoreAdj - 1
	}
	return int(adj)
}

// podMemoryRequestSharePerContainer is the part of the pod-level memory
// request the containers do not request, divided among all of them.
func podMemoryRequestSharePerContainer(pod *v1.Pod) int64 {
	podReq := pod.Spec.Resources.Requests.Memory()
	n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	if podReq.IsZero() || n == 0 {
		return 0
	}
	agg := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	rest := max(podReq.Value()-agg.Memory().Value(), 0)
	return rest / n
}

// isSidecarOf reports whether c is one of pod's init containers and a sidecar.
func isSidecarOf(pod *v1.Pod, c *v1.Container) bool {
	if !podutil.IsSidecar(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

func isNodeCriticalPod(pod *v1.Pod) bool {
	return pod.Spec.PriorityClassName == systemNodeCritical && isCriticalPod(pod)
}

func isCriticalPod(pod *v1.Pod) bool {
	if podutil.IsStatic(pod) || podutil.IsMirror(pod) {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
