package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekit/nodekit"
)

// ResourceFit rejects a pod that does not fit in what the node has left: the
// node's status.allocatable minus the requests of the pods already admitted
// (AdmitRequest.Pods, without terminal pods and without the pod itself).
//
// What counts, as upstream (the scheduler's NodeResourcesFit, which kubelet
// reuses):
//
//   - pods: one more pod must fit in allocatable "pods" (a node that lists
//     no "pods" allocatable admits none);
//   - cpu (in millicores), memory, ephemeral-storage, hugepages-*, extended
//     resources (example.com/gpu) and other kubernetes.io/-prefixed names;
//     a resource the pod requests none of is never checked;
//   - a pod's request is max(sum of its regular containers and sidecars
//     (restartable init containers), each init container plus the sidecars
//     started before it) + spec.overhead, with pod-level requests
//     (spec.resources) taking precedence where set. For already admitted
//     pods the larger of spec, allocated and actuated container resources
//     counts, so an in-place resize in progress is accounted for;
//   - an extended resource the node does not list in allocatable at all, or
//     one backed by DRA (status.extendedResourceClaimStatus), is dropped from
//     the pod's request, so it does not block admission (upstream's rule for
//     cluster-level and DRA-backed resources).
//
// The reason is OutOfpods, OutOfcpu, OutOfmemory, OutOfephemeral-storage or
// OutOf<resource name>, and the message upstream's "Node didn't have enough
// resource: cpu, requested: 2000, used: 100, capacity: 1000". When several
// resources are short the first of pods, cpu, memory, ephemeral-storage,
// then the other resources by name, is reported (upstream takes the others
// in map order).
//
// Critical pods are not special here. Upstream kubelet admits a critical pod
// that is short of resources by evicting lower-priority pods first
// (preemption in its admission failure handler); nodekit does not preempt,
// so such a pod is rejected like any other. An agent that needs preemption
// can wrap ResourceFit in its own Admitter.
//
// Feature gates are fixed at their v1.37 defaults: PodLevelResources,
// InPlacePodVerticalScaling, InPlacePodLevelResourcesVerticalScaling and
// DRAExtendedResource on, DRANodeAllocatableResources off.
type ResourceFit struct {
	node NodeGetter
}

// NewResourceFit returns the resource fit admitter for the node node
// returns.
func NewResourceFit(node NodeGetter) *ResourceFit { return &ResourceFit{node: node} }

// Admit implements nodekit.Admitter. It reads only req and the node; its
// cost grows with len(req.Pods).
func (a *ResourceFit) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	alloc := node.Status.Allocatable

	var used amounts
	count := 0
	otherActivePods(req, func(p *v1.Pod) {
		count++
		used.add(admittedRequests(p))
	})

	allowedPods := alloc.Pods().Value()
	if int64(count)+1 > allowedPods {
		return outOf(v1.ResourcePods, 1, int64(count), allowedPods)
	}

	var want amounts
	want.add(resourcehelper.PodRequests(withoutUnavailableExtended(req.Pod, alloc), resourcehelper.PodResourcesOptions{}))
	if want.isZero() {
		return nodekit.Admitted
	}
	capacity := amountsOf(alloc)
	if want.milliCPU > 0 && want.milliCPU > capacity.milliCPU-used.milliCPU {
		return outOf(v1.ResourceCPU, want.milliCPU, used.milliCPU, capacity.milliCPU)
	}
	if want.memory > 0 && want.memory > capacity.memory-used.memory {
		return outOf(v1.ResourceMemory, want.memory, used.memory, capacity.memory)
	}
	if want.ephemeral > 0 && want.ephemeral > capacity.ephemeral-used.ephemeral {
		return outOf(v1.ResourceEphemeralStorage, want.ephemeral, used.ephemeral, capacity.ephemeral)
	}
	if len(want.scalar) == 0 {
		return nodekit.Admitted
	}
	names := make([]v1.ResourceName, 0, len(want.scalar))
	for name := range want.scalar {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		q := want.scalar[name]
		if q > 0 && q > capacity.scalar[name]-used.scalar[name] {
			return outOf(name, q, used.scalar[name], capacity.scalar[name])
		}
	}
	return nodekit.Admitted
}

// admittedRequests is what an admitted pod holds: per container the larger
// of spec, allocated and actuated requests, and likewise at pod level. When
// the status carries no resources (and no infeasible resize) all three are
// the spec, and the cheaper spec-only computation gives the same answer.
func admittedRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{
		UseStatusResources: statusHasResources(p),
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	})
}

// statusHasResources reports whether p's status may change its requests:
// allocated or actuated resources at pod or container level, or a resize
// marked infeasible.
func statusHasResources(p *v1.Pod) bool {
	st := &p.Status
	if st.AllocatedResources != nil || st.Resources != nil || resourcehelper.IsPodResizeInfeasible(p) {
		return true
	}
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			if list[i].AllocatedResources != nil || (list[i].Resources != nil && list[i].Resources.Requests != nil) {
				return true
			}
		}
	}
	return false
}

// outOf is upstream's insufficient-resource rejection.
func outOf(name v1.ResourceName, requested, used, capacity int64) nodekit.Decision {
	var reason string
	switch name {
	case v1.ResourceCPU:
		reason = ReasonOutOfCPU
	case v1.ResourceMemory:
		reason = ReasonOutOfMemory
	case v1.ResourceEphemeralStorage:
		reason = ReasonOutOfEphemeralStorage
	case v1.ResourcePods:
		reason = ReasonOutOfPods
	default:
		reason = ReasonOutOfPrefix + string(name)
	}
	return nodekit.Decision{
		Reason: reason,
		Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
			name, requested, used, capacity),
	}
}

// amounts is a resource list reduced to the integers the fit check compares:
// cpu in millicores, everything else in units (rounded up).
type amounts struct {
	milliCPU, memory, ephemeral int64
	scalar                      map[v1.ResourceName]int64
}

func amountsOf(rl v1.ResourceList) amounts {
	var a amounts
	a.add(rl)
	return a
}

// add sums rl into a. Names that are neither cpu, memory, ephemeral-storage
// nor a scalar resource (pods, unknown unprefixed names) are ignored.
func (a *amounts) add(rl v1.ResourceList) {
	for name, q := range rl {
		switch name {
		case v1.ResourceCPU:
			a.milliCPU += q.MilliValue()
		case v1.ResourceMemory:
			a.memory += q.Value()
		case v1.ResourceEphemeralStorage:
			a.ephemeral += q.Value()
		case v1.ResourcePods:
		default:
			if isScalarResourceName(name) {
				if a.scalar == nil {
					a.scalar = make(map[v1.ResourceName]int64, 2)
				}
				a.scalar[name] += q.Value()
			}
		}
	}
}

func (a *amounts) isZero() bool {
	return a.milliCPU == 0 && a.memory == 0 && a.ephemeral == 0 && len(a.scalar) == 0
}

// isScalarResourceName reports whether the fit check counts name besides
// cpu, memory and ephemeral-storage: hugepages, extended resources,
// kubernetes.io/-prefixed names and attachable volume counts.
func isScalarResourceName(name v1.ResourceName) bool {
	s := string(name)
	return strings.HasPrefix(s, v1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(s, v1.ResourceAttachableVolumesPrefix) ||
		strings.Contains(s, v1.ResourceDefaultNamespacePrefix) ||
		isExtendedResourceName(name)
}

// isExtendedResourceName reports whether name is an extended resource: a
// domain-prefixed name outside kubernetes.io/ that is valid in a quota as
// requests.<name>.
func isExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}

// withoutUnavailableExtended returns pod, or a copy of it whose container
// requests leave out the extended resources that do not block admission:
// those the node does not list in allocatable, and those backed by DRA.
// Pod-level requests and overhead are kept, as upstream.
func withoutUnavailableExtended(pod *v1.Pod, alloc v1.ResourceList) *v1.Pod {
	drop := func(c *v1.Container, name v1.ResourceName) bool {
		if backedByDRA(pod, c.Name, name) {
			return true
		}
		if isExtendedResourceName(name) {
			_, found := alloc[name]
			return !found
		}
		return false
	}
	needCopy := false
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for name := range cs[i].Resources.Requests {
				if !needCopy && drop(&cs[i], name) {
					needCopy = true
				}
			}
		}
	}
	if !needCopy {
		return pod
	}
	out := pod.DeepCopy()
	for _, cs := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range cs {
			for name := range cs[i].Resources.Requests {
				if drop(&cs[i], name) {
					delete(cs[i].Resources.Requests, name)
				}
			}
		}
	}
	return out
}

// backedByDRA reports whether the scheduler mapped container's request for
// name to a DRA device request (status.extendedResourceClaimStatus).
func backedByDRA(pod *v1.Pod, container string, name v1.ResourceName) bool {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return false
	}
	s := string(name)
	if !isExtendedResourceName(name) && !strings.HasPrefix(s, resourceapi.ResourceDeviceClassPrefix) {
		return false
	}
	for _, m := range st.RequestMappings {
		if m.ResourceName == s && m.ContainerName == container {
			return true
		}
	}
	return false
}

// noPod rejects a request without a pod instead of panicking.
func noPod() nodekit.Decision {
	return nodekit.Decision{Reason: "UnexpectedAdmissionError", Message: "Admission request has no pod."}
}
