package allocation

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

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

// MemoryUsage reads a running container's memory usage in bytes (the
// cgroup's usage, as upstream compares). Nil: a memory-limit decrease is
// not checked against usage before it is sent, and the runtime decides.
type MemoryUsage interface {
	ContainerMemoryUsage(ctx context.Context, id nodekit.ContainerID) (uint64, error)
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
	Usage      MemoryUsage
	Actuated   *Store
}

// Run carries out plan for pod (as allocated). It returns the names of
// the containers to restart (their new resources are recorded as
// actuated: they start with the allocation) and an error naming what
// failed; the error's message becomes PodResizeInProgress's.
func (a *Actuator) Run(ctx context.Context, pod *v1.Pod, plan Plan) ([]string, error) {
	if err := a.checkMemoryDecrease(ctx, plan.Memory); err != nil {
		return nil, err
	}
	// The pod as it runs now: changed containers at their actuated
	// resources, the others at the allocation; and after the memory step:
	// memory at the allocation, CPU still as now.
	changed := append(append(append([]ContainerChange{}, plan.Memory...), plan.CPU...), plan.Restart...)
	now, afterMem := pod.DeepCopy(), pod.DeepCopy()
	setContainer(now, changed, func(ch ContainerChange) v1.ResourceRequirements { return ch.Current })
	setContainer(afterMem, changed, func(ch ContainerChange) v1.ResourceRequirements {
		return mix(ch.Desired, ch.Current, v1.ResourceCPU)
	})
	if err := a.step(ctx, now, afterMem, v1.ResourceMemory, plan.Memory); err != nil {
		return nil, err
	}
	if err := a.step(ctx, afterMem, pod, v1.ResourceCPU, plan.CPU); err != nil {
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

// step moves the pod from before to after for one resource.
func (a *Actuator) step(ctx context.Context, before, after *v1.Pod, name v1.ResourceName, changes []ContainerChange) error {
	grow, shrink := podDirection(before, after, name)
	if !grow && !shrink && len(changes) == 0 {
		return nil
	}
	if grow {
		if err := a.podCgroup(ctx, after, name); err != nil {
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
	if shrink && !grow {
		return a.podCgroup(ctx, after, name)
	}
	return nil
}

func (a *Actuator) podCgroup(ctx context.Context, pod *v1.Pod, name v1.ResourceName) error {
	if a.PodCgroup == nil {
		return nil
	}
	if _, err := a.PodCgroup.EnsurePod(ctx, pod); err != nil {
		return fmt.Errorf("update %s of the pod cgroup: %w", name, err)
	}
	return nil
}

// checkMemoryDecrease refuses, before anything is changed, a memory limit
// set at or below the container's current usage, with upstream's message.
func (a *Actuator) checkMemoryDecrease(ctx context.Context, changes []ContainerChange) error {
	if a.Usage == nil {
		return nil
	}
	var errs []error
	for _, ch := range changes {
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

// podDirection compares the pod's total of name between before and after:
// limits first (a total is unlimited when any container has none), then
// requests.
func podDirection(before, after *v1.Pod, name v1.ResourceName) (grow, shrink bool) {
	bl, bok := podLimit(before, name)
	al, aok := podLimit(after, name)
	switch {
	case bok && !aok:
		grow = true
	case !bok && aok:
		shrink = true
	case bok && aok && al > bl:
		grow = true
	case bok && aok && al < bl:
		shrink = true
	}
	br, ar := podRequest(before, name), podRequest(after, name)
	return grow || ar > br, shrink || ar < br
}

func podLimit(pod *v1.Pod, name v1.ResourceName) (int64, bool) {
	var sum int64
	for i := range pod.Spec.Containers {
		q, ok := pod.Spec.Containers[i].Resources.Limits[name]
		if !ok {
			return 0, false
		}
		sum += q.MilliValue()
	}
	return sum, true
}

func podRequest(pod *v1.Pod, name v1.ResourceName) int64 {
	var sum int64
	for i := range pod.Spec.Containers {
		q := pod.Spec.Containers[i].Resources.Requests[name]
		sum += q.MilliValue()
	}
	return sum
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
					out = append(out, ContainerChange{Name: n, Desired: list[i].Resources})
				}
			}
		}
	}
	return out
}
