// Package qos computes a pod's quality-of-service class the way upstream
// does, for the packages that need it (the sync loop reports it; the CPU
// and memory managers act only on Guaranteed pods).
package qos

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Class is BestEffort when nothing asks for cpu or memory; Guaranteed when
// cpu and memory limits are set and equal to the requests — per pod when
// pod-level resources are set, else summed over every container, each of
// which must set both limits; Burstable otherwise. A class the API server
// already set is kept: it is immutable.
func Class(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return classOf([]*v1.ResourceRequirements{pod.Spec.Resources})
	}
	var reqs []*v1.ResourceRequirements
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			reqs = append(reqs, &list[i].Resources)
		}
	}
	return classOf(reqs)
}

func classOf(all []*v1.ResourceRequirements) v1.PodQOSClass {
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	guaranteed := len(all) > 0
	for _, r := range all {
		for name, q := range r.Requests {
			if (name == v1.ResourceCPU || name == v1.ResourceMemory) && !q.IsZero() {
				add(requests, name, q)
			}
		}
		found := 0
		for name, q := range r.Limits {
			if (name == v1.ResourceCPU || name == v1.ResourceMemory) && !q.IsZero() {
				found++
				add(limits, name, q)
			}
		}
		if found < 2 {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

func add(list v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
	if cur, ok := list[name]; ok {
		cur.Add(q)
		list[name] = cur
		return
	}
	list[name] = q.DeepCopy()
}
