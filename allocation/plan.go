package allocation

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// amounts are the four numbers a resize compares, as upstream: milli-CPU
// and bytes of memory, requests and limits (0: unset).
type amounts struct {
	cpuReq, cpuLim, memReq, memLim int64
}

func amountsOf(r v1.ResourceRequirements) amounts {
	return amounts{
		cpuReq: r.Requests.Cpu().MilliValue(), cpuLim: r.Limits.Cpu().MilliValue(),
		memReq: r.Requests.Memory().Value(), memLim: r.Limits.Memory().Value(),
	}
}

// ContainerChange is one running container's resize in place.
type ContainerChange struct {
	Name string
	ID   nodekit.ContainerID
	// Current is what was last applied, Desired the allocation.
	Current, Desired v1.ResourceRequirements
}

// Plan is what brings a pod's running containers from their actuated
// resources to their allocation.
type Plan struct {
	// Memory and CPU list the containers to update in place for that
	// resource, decreases first then increases, as upstream orders them.
	Memory []ContainerChange
	CPU    []ContainerChange
	// Restart lists the containers whose resizePolicy for a changed
	// resource is RestartContainer: they are stopped and started again
	// with the allocation.
	Restart []ContainerChange
	// NotRunning lists containers whose allocation differs from what was
	// actuated but that do not run now: they start with the allocation.
	NotRunning []string
}

// Empty reports whether nothing needs to change.
func (p Plan) Empty() bool {
	return len(p.Memory) == 0 && len(p.CPU) == 0 && len(p.Restart) == 0 && len(p.NotRunning) == 0
}

// PlanResize compares each container of pod (as allocated) with its
// actuated resources. A container running in rs is resized in place or
// restarted, per its resizePolicy (NotRequired when a resource has none,
// as upstream); a container missing from actuated counts as actuated at
// zero, as upstream, so the update is sent again (it is idempotent).
func PlanResize(pod *v1.Pod, actuated PodResources, rs *nodekit.PodStatus) Plan {
	var p Plan
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			planContainer(&p, &list[i], actuated.ContainerResources[list[i].Name], rs)
		}
	}
	return p
}

func planContainer(p *Plan, c *v1.Container, cur v1.ResourceRequirements, rs *nodekit.PodStatus) {
	want, have := amountsOf(c.Resources), amountsOf(cur)
	if want == have {
		return
	}
	cs := rs.FindContainer(c.Name)
	if cs == nil || cs.State != nodekit.StateRunning {
		p.NotRunning = append(p.NotRunning, c.Name)
		return
	}
	ch := ContainerChange{Name: c.Name, ID: cs.ID, Current: cur, Desired: c.Resources}
	memChanged := want.memLim != have.memLim || want.memReq != have.memReq
	cpuChanged := want.cpuLim != have.cpuLim || want.cpuReq != have.cpuReq
	if (memChanged && restartFor(c, v1.ResourceMemory)) || (cpuChanged && restartFor(c, v1.ResourceCPU)) {
		p.Restart = append(p.Restart, ch)
		return
	}
	if memChanged {
		p.Memory = insertOrdered(p.Memory, ch, decreasing(want.memLim, have.memLim, want.memReq, have.memReq))
	}
	if cpuChanged {
		p.CPU = insertOrdered(p.CPU, ch, decreasing(want.cpuLim, have.cpuLim, want.cpuReq, have.cpuReq))
	}
}

// decreasing decides the order by the limit when it changes, else by the
// request, as upstream.
func decreasing(wantLim, haveLim, wantReq, haveReq int64) bool {
	if wantLim != haveLim {
		return wantLim < haveLim
	}
	return wantReq < haveReq
}

func insertOrdered(list []ContainerChange, ch ContainerChange, front bool) []ContainerChange {
	if front {
		return append([]ContainerChange{ch}, list...)
	}
	return append(list, ch)
}

// restartFor reports whether c's resizePolicy for name is RestartContainer.
func restartFor(c *v1.Container, name v1.ResourceName) bool {
	for _, rp := range c.ResizePolicy {
		if rp.ResourceName == name {
			return rp.RestartPolicy == v1.RestartContainer
		}
	}
	return false
}

// mix returns r with resource name's requests and limits taken from from:
// the state of a container after one resource's update and before the
// other's.
func mix(r, from v1.ResourceRequirements, name v1.ResourceName) v1.ResourceRequirements {
	out := *r.DeepCopy()
	set := func(dst *v1.ResourceList, src v1.ResourceList) {
		q, ok := src[name]
		if !ok {
			delete(*dst, name)
			return
		}
		if *dst == nil {
			*dst = v1.ResourceList{}
		}
		(*dst)[name] = q.DeepCopy()
	}
	set(&out.Requests, from.Requests)
	set(&out.Limits, from.Limits)
	return out
}

// memoryLimit is a container's memory limit in bytes, 0 when unset.
func memoryLimit(r v1.ResourceRequirements) int64 { return r.Limits.Memory().Value() }
