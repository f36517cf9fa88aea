package memorymanager

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// guaranteed reports whether pod's QoS class is Guaranteed, as upstream
// v1.37 computes it: every container (or the pod-level resources, when
// set) has cpu and memory requests equal to non-zero limits.
func guaranteed(pod *v1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == v1.PodQOSGuaranteed
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsGuaranteed(pod.Spec.Resources)
	}
	n := 0
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if !requirementsGuaranteed(&list[i].Resources) {
				return false
			}
			n++
		}
	}
	return n > 0
}

func requirementsGuaranteed(r *v1.ResourceRequirements) bool {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		if req.IsZero() || !req.Equal(lim) {
			return false
		}
	}
	return true
}
