package allocation

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/qos"
)

// Messages of the infeasible resizes nodekit refuses: the CPU and memory
// manager ones are kubelet's; the pod-level ones are the API server's
// validation messages (a pod from the API never reaches the node with
// them; a pod from a file or URL can).
const (
	msgStaticCPU      = `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`
	msgStaticMemory   = `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`
	msgPodLevelOther  = "only cpu and memory resources are mutable at pod-level"
	msgPodLevelRemove = "pod-level resources cannot be removed"
)

// NodeConfig is what the resize decision needs to know of the node's
// resource managers.
type NodeConfig struct {
	// CPUManagerStatic: the CPU manager's policy is static, so a
	// Guaranteed pod's CPU cannot be resized (upstream, with
	// InPlacePodVerticalScalingExclusiveCPUs off as in v1.37).
	CPUManagerStatic bool
	// MemoryManagerStatic: likewise for the memory manager's Static policy.
	MemoryManagerStatic bool
}

// Pending is a resize the node does not allocate now: Reason is
// v1.PodReasonInfeasible (it never will as asked) or v1.PodReasonDeferred
// (not now; retried). A resize that does not fit the node is Deferred even
// when it exceeds the node's allocatable, as kubelet v1.37 does: the API
// server refuses such a resize of an API pod before the node sees it.
type Pending struct {
	Reason  string
	Message string
	// Detail is the reason_detail of an Infeasible resize
	// (kubelet_pod_infeasible_resizes_total).
	Detail string
}

// ForPod returns what pod's spec asks for: every init and regular
// container's resources (all are resizable in v1.37) and the pod-level
// resources.
func ForPod(pod *v1.Pod) PodResources {
	p := PodResources{ContainerResources: map[string]v1.ResourceRequirements{}}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			p.ContainerResources[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	if pod.Spec.Resources != nil {
		p.PodLevelResources = pod.Spec.Resources.DeepCopy()
	}
	return p
}

// WithResources returns pod with its containers' resources (and the
// pod-level ones) replaced by p's, and whether anything differed. pod is
// not modified; it is copied only when something differs. Containers p
// does not name keep their spec.
func WithResources(pod *v1.Pod, p PodResources) (*v1.Pod, bool) {
	var out *v1.Pod
	copyOnce := func() {
		if out == nil {
			out = pod.DeepCopy()
		}
	}
	lists := func(q *v1.Pod) [][]v1.Container { return [][]v1.Container{q.Spec.InitContainers, q.Spec.Containers} }
	for li, list := range lists(pod) {
		for i := range list {
			r, ok := p.ContainerResources[list[i].Name]
			if !ok || apiequality.Semantic.DeepEqual(r, list[i].Resources) {
				continue
			}
			copyOnce()
			lists(out)[li][i].Resources = *r.DeepCopy()
		}
	}
	if !apiequality.Semantic.DeepEqual(p.PodLevelResources, pod.Spec.Resources) {
		copyOnce()
		out.Spec.Resources = p.PodLevelResources.DeepCopy()
	}
	if out == nil {
		return pod, false
	}
	return out, true
}

// Decide says whether desired (the pod as its spec now asks) may be
// allocated, given allocated (what the node holds for it now) and the
// other pods as allocated. fit is the node's resource fit (package
// admission's ResourceFit), asked with the other pods, decides whether the
// resize fits now. It returns nil when the resize may be allocated.
func Decide(ctx context.Context, desired *v1.Pod, allocated PodResources, node NodeConfig, fit nodekit.Admitter, others []*v1.Pod) *Pending {
	if p := podLevelRefusal(desired.Spec.Resources, allocated.PodLevelResources); p != nil {
		return p
	}
	if qos.Class(desired) == v1.PodQOSGuaranteed {
		if node.CPUManagerStatic && requestChanged(desired, allocated, v1.ResourceCPU) {
			return &Pending{Reason: v1.PodReasonInfeasible, Message: msgStaticCPU, Detail: InfeasibleStaticCPU}
		}
		if node.MemoryManagerStatic && requestChanged(desired, allocated, v1.ResourceMemory) {
			return &Pending{Reason: v1.PodReasonInfeasible, Message: msgStaticMemory, Detail: InfeasibleStaticMemory}
		}
	}
	if fit == nil {
		return nil
	}
	d := fit.Admit(ctx, nodekit.AdmitRequest{Pod: desired, Pods: others})
	if d.Admit {
		return nil
	}
	msg := d.Message
	if msg == "" {
		msg = fmt.Sprintf("Pod admission denied: %s", d.Reason)
	}
	return &Pending{Reason: v1.PodReasonDeferred, Message: msg}
}

// podLevelRefusal refuses a change of the pod-level resources that
// InPlacePodLevelResourcesVerticalScaling does not allow: their removal,
// and a change of anything but CPU and memory. A CPU or memory change is
// decided as the containers' (the fit, the resource managers).
func podLevelRefusal(desired, allocated *v1.ResourceRequirements) *Pending {
	if apiequality.Semantic.DeepEqual(desired, allocated) {
		return nil
	}
	if desired == nil && allocated != nil {
		return &Pending{Reason: v1.PodReasonInfeasible, Message: msgPodLevelRemove, Detail: InfeasiblePodLevelRemoved}
	}
	var d, a v1.ResourceRequirements
	if desired != nil {
		d = *desired
	}
	if allocated != nil {
		a = *allocated
	}
	if !sameBeyondCPUMemory(d.Requests, a.Requests) || !sameBeyondCPUMemory(d.Limits, a.Limits) ||
		!apiequality.Semantic.DeepEqual(d.Claims, a.Claims) {
		return &Pending{Reason: v1.PodReasonInfeasible, Message: msgPodLevelOther, Detail: InfeasiblePodLevelOther}
	}
	return nil
}

// sameBeyondCPUMemory reports whether x and y agree on every resource but
// CPU and memory.
func sameBeyondCPUMemory(x, y v1.ResourceList) bool {
	strip := func(l v1.ResourceList) v1.ResourceList {
		out := v1.ResourceList{}
		for k, v := range l {
			if k != v1.ResourceCPU && k != v1.ResourceMemory {
				out[k] = v
			}
		}
		return out
	}
	return apiequality.Semantic.DeepEqual(strip(x), strip(y))
}

// requestChanged reports whether any container's request of name differs
// between desired and allocated (for Guaranteed pods requests equal
// limits, so requests suffice, as upstream).
func requestChanged(desired *v1.Pod, allocated PodResources, name v1.ResourceName) bool {
	for _, list := range [][]v1.Container{desired.Spec.InitContainers, desired.Spec.Containers} {
		for i := range list {
			a := allocated.ContainerResources[list[i].Name]
			if !list[i].Resources.Requests[name].Equal(a.Requests[name]) {
				return true
			}
		}
	}
	return false
}
