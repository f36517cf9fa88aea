package allocation

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// ContainerUpdater changes a running container's CPU and memory in place
// (criruntime implements it over CRI UpdateContainerResources). r holds
// the container's full requests and limits to apply; a limit absent from
// r means unlimited.
type ContainerUpdater interface {
	ResizeContainer(ctx context.Context, id nodekit.ContainerID, r v1.ResourceRequirements) error
}

// PodCgroup applies a pod's cgroup limits, computed from the pod's
// containers' resources (cgroupmgr.Manager's EnsurePod). Nil: the agent
// keeps no pod cgroups.
type PodCgroup interface {
	EnsurePod(ctx context.Context, pod *v1.Pod) (string, error)
}

// SandboxUpdater tells the runtime a pod's resources before its pod cgroup
// changes, as upstream notifies the runtime (CRI
// UpdatePodSandboxResources; criruntime implements it): r holds the pod's
// totals without overhead (a limit absent means unlimited), overhead the
// pod's spec.overhead. A runtime without the call is not an error (the
// implementation decides); any other error rejects the resize step. Nil:
// the runtime is not told.
type SandboxUpdater interface {
	UpdatePodSandboxResources(ctx context.Context, sandboxID string, r v1.ResourceRequirements, overhead v1.ResourceList) error
}

// MemoryUsage reads a running container's memory usage in bytes (the
// cgroup's usage, as upstream compares). Nil: a memory-limit decrease is
// not checked against usage before it is sent, and the runtime decides.
type MemoryUsage interface {
	ContainerMemoryUsage(ctx context.Context, id nodekit.ContainerID) (uint64, error)
}

// PodMemoryUsage reads the memory usage of a pod's cgroup in bytes
// (cgroupmgr.Manager implements it). Nil: a decrease of the pod's memory
// limit is not checked against the pod's usage, and the kernel decides.
type PodMemoryUsage interface {
	PodMemoryUsage(ctx context.Context, pod *v1.Pod) (uint64, error)
}

// Actuator carries out a Plan in upstream's order: memory first, then CPU;
// for each, the pod cgroup before the containers when the pod's total
// grows and after them when it shrinks; among the containers, decreases
// before increases. It records each container's new resources as
// actuated as soon as the runtime accepts them, so a failure part way
// leaves a state the next sync finishes.
type Actuator struct {
	Containers ContainerUpdater
	PodCgroup  PodCgroup
	Sandbox    SandboxUpdater
	Usage      MemoryUsage
	PodUsage   PodMemoryUsage
	Actuated   *Store
}

// Run carries out plan for pod (as allocated). It returns the names of
// the containers to restart (their new resources are recorded as
// actuated: they start with the allocation) and an error naming what
// failed; the error's message becomes PodResizeInProgress's.
func (a *Actuator) Run(ctx context.Context, pod *v1.Pod, plan Plan) ([]string, error) {
	// The pod as it runs now: changed containers at their actuated
	// resources, the others at the allocation, the pod-level resources as
	// actuated; and after the memory step: memory at the allocation, CPU
	// still as now.
	changed := append(append(append(append([]ContainerChange{}, plan.Memory...), plan.CPU...), plan.Restart...), plan.Stopped...)
	now, afterMem := pod.DeepCopy(), pod.DeepCopy()
	setContainer(now, changed, func(ch ContainerChange) v1.ResourceRequirements { return ch.Current })
	setContainer(afterMem, changed, func(ch ContainerChange) v1.ResourceRequirements {
		return mix(ch.Desired, ch.Current, v1.ResourceCPU)
	})
	if plan.PodLevel {
		now.Spec.Resources = plan.PodCurrent.DeepCopy()
		afterMem.Spec.Resources = mixPodLevel(plan.PodDesired, plan.PodCurrent, v1.ResourceCPU)
	}
	if len(plan.Memory) > 0 || len(plan.Restart) > 0 || len(plan.Stopped) > 0 {
		if err := a.checkMemoryDecrease(ctx, now, pod, plan.Memory); err != nil {
			return nil, err
		}
	}
	if err := a.step(ctx, now, afterMem, v1.ResourceMemory, plan.Memory, plan.PodLevel, plan.SandboxID); err != nil {
		return nil, err
	}
	if err := a.step(ctx, afterMem, pod, v1.ResourceCPU, plan.CPU, plan.PodLevel, plan.SandboxID); err != nil {
		return nil, err
	}
	var restart []string
	for _, ch := range append(append([]ContainerChange{}, plan.Restart...), notRunning(pod, plan.NotRunning)...) {
		if err := a.Actuated.SetContainer(pod.UID, ch.Name, ch.Desired); err != nil {
			return nil, err
		}
		if !ch.ID.IsEmpty() {
			restart = append(restart, ch.Name)
		}
	}
	return restart, nil
}

// step moves the pod from before to after for one resource, as upstream:
// the pod cgroup's limit and request each grown before the containers and
// shrunk after them (a limit going down while the request goes up is
// written in two parts: cgroup v1 refuses a pod CPU quota below a running
// container's); then, with podLevel, the pod-level resources of after are
// recorded as actuated (as upstream, per resource).
func (a *Actuator) step(ctx context.Context, before, after *v1.Pod, name v1.ResourceName, changes []ContainerChange, podLevel bool, sandboxID string) error {
	d := podDirection(before, after, name)
	mid := before
	if d.limGrow || d.reqGrow {
		mid = mixTotals(before, after, name, d.limGrow, d.reqGrow)
		if err := a.podCgroup(ctx, before, mid, name, sandboxID); err != nil {
			return err
		}
	}
	for _, ch := range changes {
		r := ch.Desired
		if name == v1.ResourceMemory {
			r = mix(ch.Desired, ch.Current, v1.ResourceCPU) // CPU comes next
		}
		if err := a.Containers.ResizeContainer(ctx, ch.ID, r); err != nil {
			return fmt.Errorf("update %s of container %q: %w", name, ch.Name, err)
		}
		if err := a.Actuated.SetContainer(after.UID, ch.Name, r); err != nil {
			return err
		}
	}
	if d.limShrink || d.reqShrink {
		if err := a.podCgroup(ctx, mid, after, name, sandboxID); err != nil {
			return err
		}
	}
	if podLevel {
		return a.Actuated.SetPodLevel(after.UID, after.Spec.Resources)
	}
	return nil
}

// mixTotals is after with name's limits (unless limits) and requests
// (unless requests) taken back from before, in every container and the
// pod-level resources: the pod as its cgroup stands after the growing
// half of a step. before and after list the same containers.
func mixTotals(before, after *v1.Pod, name v1.ResourceName, limits, requests bool) *v1.Pod {
	out := after.DeepCopy()
	back := func(dst *v1.ResourceRequirements, src v1.ResourceRequirements) {
		keep := dst.DeepCopy()
		*dst = mix(*dst, src, name)
		if limits {
			setQuantity(&dst.Limits, keep.Limits, name)
		}
		if requests {
			setQuantity(&dst.Requests, keep.Requests, name)
		}
	}
	for li, list := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		src := [][]v1.Container{before.Spec.InitContainers, before.Spec.Containers}[li]
		for i := range list {
			if i < len(src) {
				back(&list[i].Resources, src[i].Resources)
			}
		}
	}
	if out.Spec.Resources != nil || before.Spec.Resources != nil {
		var d, b v1.ResourceRequirements
		if out.Spec.Resources != nil {
			d = *out.Spec.Resources
		}
		if before.Spec.Resources != nil {
			b = *before.Spec.Resources
		}
		back(&d, b)
		out.Spec.Resources = &d
	}
	return out
}

// setQuantity sets (*dst)[name] to src's, or deletes it when src has none.
func setQuantity(dst *v1.ResourceList, src v1.ResourceList, name v1.ResourceName) {
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

// podCgroup moves the pod cgroup from before to after for name. As
// upstream, the runtime is told first (SandboxUpdater; its refusal rejects
// the step), then the cgroup is written; if that fails the runtime is told
// the old resources again.
func (a *Actuator) podCgroup(ctx context.Context, before, after *v1.Pod, name v1.ResourceName, sandboxID string) error {
	if a.PodCgroup == nil {
		return nil
	}
	notify := a.Sandbox != nil && sandboxID != ""
	if notify {
		if err := a.Sandbox.UpdatePodSandboxResources(ctx, sandboxID, SandboxResources(after), after.Spec.Overhead); err != nil {
			return fmt.Errorf("failed to notify runtime for UpdatePodSandboxResources (resource=%s); resize rejected: %w", name, err)
		}
	}
	if _, err := a.PodCgroup.EnsurePod(ctx, after); err != nil {
		if notify {
			if rerr := a.Sandbox.UpdatePodSandboxResources(ctx, sandboxID, SandboxResources(before), before.Spec.Overhead); rerr != nil {
				klog.FromContext(ctx).Error(rerr, "Failed to notify runtime to rollback UpdatePodSandboxResources", "resource", name, "pod", klog.KObj(after))
			}
		}
		return fmt.Errorf("update %s of the pod cgroup: %w", name, err)
	}
	return nil
}

// SandboxResources are the pod's CPU and memory totals as its pod cgroup
// is sized, without overhead: the pod-level resources where set, else the
// containers' (init containers by the max rule, sidecars adding); a limit
// is left out when the pod is not limited in it.
func SandboxResources(pod *v1.Pod) v1.ResourceRequirements {
	opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true}
	reqs, limits := resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts)
	out := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if q, ok := reqs[name]; ok {
			out.Requests[name] = q
		}
		if _, limited, _ := podTotals(pod, name); limited {
			if q, ok := limits[name]; ok {
				out.Limits[name] = q
			}
		}
	}
	return out
}

// checkMemoryDecrease refuses, before anything is changed, a memory limit
// set at or below current usage, with upstream's messages: a container's
// (of changes), and the pod's when the pod cgroup's limit (from now to
// target) is lowered or set.
func (a *Actuator) checkMemoryDecrease(ctx context.Context, now, target *v1.Pod, changes []ContainerChange) error {
	var errs []error
	if want, ok := podMemoryLimitDecrease(now, target); ok && a.PodUsage != nil {
		used, err := a.PodUsage.PodMemoryUsage(ctx, now)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("missing pod memory usage: %w", err))
		case used >= uint64(want):
			errs = append(errs, fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", want, used))
		}
	}
	for _, ch := range changes {
		if a.Usage == nil {
			break
		}
		want, have := memoryLimit(ch.Desired), memoryLimit(ch.Current)
		if want == 0 || (have != 0 && want >= have) {
			continue // no limit, or not decreasing
		}
		used, err := a.Usage.ContainerMemoryUsage(ctx, ch.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("missing container %q memory usage: %w", ch.Name, err))
			continue
		}
		if used >= uint64(want) {
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", ch.Name, want, used))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cannot decrease memory limits: %w", utilerrors.NewAggregate(errs))
	}
	return nil
}

// podMemoryLimitDecrease returns the pod cgroup's memory limit for target
// when it is lower than now's, or now has none.
func podMemoryLimitDecrease(now, target *v1.Pod) (int64, bool) {
	want, wantOK, _ := podTotals(target, v1.ResourceMemory)
	have, haveOK, _ := podTotals(now, v1.ResourceMemory)
	if !wantOK || (haveOK && want >= have) {
		return 0, false
	}
	return want / 1000, true // podTotals counts in thousandths
}

// direction is how a pod cgroup's limit and request of one resource move.
type direction struct {
	limGrow, limShrink, reqGrow, reqShrink bool
}

// podDirection compares the pod cgroup's name between before and after:
// the limit (unlimited when a container has none and the pod-level
// resources set none) and the request.
func podDirection(before, after *v1.Pod, name v1.ResourceName) direction {
	bl, bok, br := podTotals(before, name)
	al, aok, ar := podTotals(after, name)
	var d direction
	switch {
	case bok && !aok:
		d.limGrow = true
	case !bok && aok:
		d.limShrink = true
	case bok && aok && al > bl:
		d.limGrow = true
	case bok && aok && al < bl:
		d.limShrink = true
	}
	d.reqGrow, d.reqShrink = ar > br, ar < br
	return d
}

// podTotals are the pod cgroup's limit of name (and whether it has one)
// and its request, in thousandths of the unit, as cgroupmgr sizes the
// pod cgroup: the pod-level resources where set, else the containers'
// (init containers by the max rule, sidecars adding), with overhead.
func podTotals(pod *v1.Pod, name v1.ResourceName) (lim int64, limited bool, req int64) {
	opts := resourcehelper.PodResourcesOptions{}
	limits, reqs := resourcehelper.PodLimits(pod, opts), resourcehelper.PodRequests(pod, opts)
	limited = true
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if q := list[i].Resources.Limits[name]; q.IsZero() {
				limited = false
			}
		}
	}
	if pod.Spec.Resources != nil {
		if q := pod.Spec.Resources.Limits[name]; !q.IsZero() {
			limited = true
		}
	}
	l, r := limits[name], reqs[name]
	return l.MilliValue(), limited, r.MilliValue()
}

func setContainer(pod *v1.Pod, changes []ContainerChange, r func(ContainerChange) v1.ResourceRequirements) {
	for _, ch := range changes {
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				if list[i].Name == ch.Name {
					list[i].Resources = r(ch)
				}
			}
		}
	}
}

func notRunning(pod *v1.Pod, names []string) []ContainerChange {
	var out []ContainerChange
	for _, n := range names {
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				if list[i].Name == n {
					out = append(out, ContainerChange{Name: n, Desired: Effective(pod.Spec.Resources, list[i].Resources)})
				}
			}
		}
	}
	return out
}
