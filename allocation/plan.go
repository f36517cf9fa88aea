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

// podAmountsOf is amountsOf for pod-level resources (nil: all zero).
func podAmountsOf(r *v1.ResourceRequirements) amounts {
	if r == nil {
		return amounts{}
	}
	return amountsOf(*r)
}

// Effective returns a container's resources as the runtime applies them
// beside pod-level resources podLevel, as upstream: a CPU or memory limit
// the container lacks is the pod-level one. Requests stay the
// container's. r is not modified.
func Effective(podLevel *v1.ResourceRequirements, r v1.ResourceRequirements) v1.ResourceRequirements {
	if podLevel == nil || len(podLevel.Limits) == 0 {
		return r
	}
	out := *r.DeepCopy()
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		q, ok := podLevel.Limits[name]
		if !ok || q.IsZero() {
			continue
		}
		if own := out.Limits[name]; !own.IsZero() {
			continue
		}
		if out.Limits == nil {
			out.Limits = v1.ResourceList{}
		}
		out.Limits[name] = q.DeepCopy()
	}
	return out
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
	// PodLevel reports that the pod-level resources (spec.resources)
	// differ from the actuated ones; PodCurrent and PodDesired are those
	// two (nil: none).
	PodLevel               bool
	PodCurrent, PodDesired *v1.ResourceRequirements
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
	// Stopped lists those of NotRunning that ran with actuated resources
	// in a pod that still runs (a container stopped to be restarted for
	// the resize, or waiting to restart): no update is sent to them, but
	// the pod cgroup, sized with what they had, moves from that (Current)
	// to the allocation.
	Stopped []ContainerChange
	// SandboxID is the pod's ready sandbox ("" when none), for the
	// runtime's UpdatePodSandboxResources.
	SandboxID string
}

// Empty reports whether nothing needs to change.
func (p Plan) Empty() bool {
	return !p.PodLevel && len(p.Memory) == 0 && len(p.CPU) == 0 && len(p.Restart) == 0 && len(p.NotRunning) == 0
}

// PlanResize compares each container of pod (as allocated) with its
// actuated resources, both as the runtime applies them (a limit the
// container lacks is the pod-level one, so a pod-level limit's change
// resizes the containers without their own, as upstream). A container
// running in rs is resized in place or restarted, per its resizePolicy
// (NotRequired when a resource has none, as upstream); a container
// missing from actuated counts as actuated at zero, as upstream, so the
// update is sent again (it is idempotent). The pod-level resources are
// compared too (PodLevel).
func PlanResize(pod *v1.Pod, actuated PodResources, rs *nodekit.PodStatus) Plan {
	p := Plan{PodCurrent: actuated.PodLevelResources, PodDesired: pod.Spec.Resources}
	p.PodLevel = podAmountsOf(p.PodCurrent) != podAmountsOf(p.PodDesired)
	if rs != nil {
		for _, sb := range rs.Sandboxes { // newest first
			if sb.State == nodekit.SandboxReady {
				p.SandboxID = sb.ID
				break
			}
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			cur := Effective(actuated.PodLevelResources, actuated.ContainerResources[list[i].Name])
			planContainer(&p, &list[i], Effective(pod.Spec.Resources, list[i].Resources), cur, rs)
		}
	}
	return p
}

// planContainer plans c's change from cur to desired (both effective).
func planContainer(p *Plan, c *v1.Container, desired, cur v1.ResourceRequirements, rs *nodekit.PodStatus) {
	want, have := amountsOf(desired), amountsOf(cur)
	if want == have {
		return
	}
	cs := rs.FindContainer(c.Name)
	if cs == nil || cs.State != nodekit.StateRunning {
		p.NotRunning = append(p.NotRunning, c.Name)
		if rs != nil && have != (amounts{}) {
			p.Stopped = append(p.Stopped, ContainerChange{Name: c.Name, Current: cur, Desired: desired})
		}
		return
	}
	ch := ContainerChange{Name: c.Name, ID: cs.ID, Current: cur, Desired: desired}
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

// mixPodLevel is mix for pod-level resources: desired with name's
// requests and limits taken from from (nil when both are nil).
func mixPodLevel(desired, from *v1.ResourceRequirements, name v1.ResourceName) *v1.ResourceRequirements {
	if desired == nil && from == nil {
		return nil
	}
	var d, f v1.ResourceRequirements
	if desired != nil {
		d = *desired
	}
	if from != nil {
		f = *from
	}
	out := mix(d, f, name)
	return &out
}

// memoryLimit is a container's memory limit in bytes, 0 when unset.
func memoryLimit(r v1.ResourceRequirements) int64 { return r.Limits.Memory().Value() }
