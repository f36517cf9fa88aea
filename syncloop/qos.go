package syncloop

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QOSClass computes a pod's quality-of-service class as upstream: BestEffort
// when no container asks for cpu or memory; Guaranteed when every container
// has cpu and memory limits equal to its requests; Burstable otherwise.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass // immutable once set by the API server
	}
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	guaranteed := true
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for name, q := range c.Resources.Requests {
			if name != v1.ResourceCPU && name != v1.ResourceMemory || q.IsZero() {
				continue
			}
			add(requests, name, q)
		}
		found := map[v1.ResourceName]bool{}
		for name, q := range c.Resources.Limits {
			if name != v1.ResourceCPU && name != v1.ResourceMemory || q.IsZero() {
				continue
			}
			found[name] = true
			add(limits, name, q)
		}
		if !found[v1.ResourceCPU] || !found[v1.ResourceMemory] {
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
