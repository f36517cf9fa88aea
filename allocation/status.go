package allocation

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodekit/nodekit/internal/cpushares"
)

// podConditions are a pod's resize conditions, nil when absent.
type podConditions struct {
	pending, inProgress *v1.PodCondition
	bucket              string // the pod's priority_bucket label (metrics)
}

// resizeCondition returns the condition of type t with reason and message,
// keeping old's times when nothing changed, as upstream keeps the
// transition time while the reason stays.
func (m *Manager) resizeCondition(t v1.PodConditionType, old *v1.PodCondition, reason, message string, gen int64) *v1.PodCondition {
	if old != nil && old.Reason == reason && old.Message == message && old.ObservedGeneration == gen {
		return old
	}
	now := metav1.NewTime(m.cfg.Clock.Now())
	c := &v1.PodCondition{
		Type: t, Status: v1.ConditionTrue, ObservedGeneration: gen,
		LastProbeTime: now, LastTransitionTime: now, Reason: reason, Message: message,
	}
	if old != nil && old.Reason == reason {
		c.LastTransitionTime = old.LastTransitionTime
	}
	return c
}

func (m *Manager) condsLocked(uid types.UID) *podConditions {
	c := m.conds[uid]
	if c == nil {
		c = &podConditions{}
		m.conds[uid] = c
	}
	return c
}

// setPending sets PodResizePending from p, or clears it when p is nil. It
// reports whether the condition is new or changed its reason or
// generation (upstream then records an event).
func (m *Manager) setPending(pod *v1.Pod, p *Pending) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.condsLocked(pod.UID)
	c.bucket = priorityBucket(pod)
	defer m.cfg.Metrics.setCounts(m.conds)
	m.deferred[pod.UID] = p != nil && p.Reason == v1.PodReasonDeferred
	if !m.deferred[pod.UID] {
		delete(m.deferred, pod.UID)
	}
	if p == nil {
		c.pending = nil
		return false
	}
	old := c.pending
	c.pending = m.resizeCondition(v1.PodResizePending, old, p.Reason, p.Message, pod.Generation)
	return old == nil || old.Reason != p.Reason || old.ObservedGeneration != pod.Generation
}

// setInProgress sets PodResizeInProgress; reason Error with the failure
// as message, or "" while the resize is being applied. It returns the
// condition's generation and whether the condition is new or changed.
func (m *Manager) setInProgress(pod *v1.Pod, reason, message string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.condsLocked(pod.UID)
	c.bucket = priorityBucket(pod)
	defer m.cfg.Metrics.setCounts(m.conds)
	old := c.inProgress
	c.inProgress = m.resizeCondition(v1.PodResizeInProgress, old, reason, message, pod.Generation)
	return c.inProgress.ObservedGeneration, old != c.inProgress
}

// clearInProgress drops PodResizeInProgress and reports whether there was
// one, and its generation.
func (m *Manager) clearInProgress(uid types.UID) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conds[uid]; c != nil && c.inProgress != nil {
		gen := c.inProgress.ObservedGeneration
		c.inProgress = nil
		m.cfg.Metrics.setCounts(m.conds)
		return gen, true
	}
	return 0, false
}

// Pending returns the pod's PodResizePending condition, nil when none.
func (m *Manager) Pending(uid types.UID) *v1.PodCondition {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conds[uid]; c != nil && c.pending != nil {
		return c.pending.DeepCopy()
	}
	return nil
}

// placeConditions replaces the resize conditions of list by conds, where
// upstream puts them: after the conditions others own, before the ones
// the agent generates (PodReadyToStartContainers, Initialized, Ready,
// ContainersReady, PodScheduled).
func placeConditions(list, conds []v1.PodCondition) []v1.PodCondition {
	out := make([]v1.PodCondition, 0, len(list)+len(conds))
	placed := false
	for _, c := range list {
		switch c.Type {
		case v1.PodResizePending, v1.PodResizeInProgress:
			continue
		case v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled:
			if !placed {
				out, placed = append(out, conds...), true
			}
		}
		out = append(out, c)
	}
	if !placed {
		out = append(out, conds...)
	}
	return out
}

// SetStatus writes the resize part of st, the status computed for pod:
// the PodResizePending and PodResizeInProgress conditions (replacing any
// st holds, placed as upstream orders them); per container (init and
// regular) allocatedResources (the allocated requests) and resources
// (the allocation, with the CPU and memory values applied to a running
// container where the allocation names them); and the pod's
// allocatedResources and resources (PodLevelStatus; a running pod's read
// back from its cgroup through Config.PodCgroupReader, else derived from
// what was applied), as upstream reports them with
// InPlacePodLevelResourcesVerticalScaling on. old is the pod's previous
// status (nil: none), read only: a running pod's status.resources keeps
// a value the cgroup lacks from it. With a PodCgroupReader it reads the
// pod cgroup's files.
func (m *Manager) SetStatus(ctx context.Context, pod *v1.Pod, old, st *v1.PodStatus) {
	m.mu.Lock()
	var conds []v1.PodCondition
	if c := m.conds[pod.UID]; c != nil {
		for _, x := range []*v1.PodCondition{c.pending, c.inProgress} {
			if x != nil {
				conds = append(conds, *x.DeepCopy())
			}
		}
	}
	m.mu.Unlock()
	st.Conditions = placeConditions(st.Conditions, conds)

	alloc, ok := m.allocated.Get(pod.UID)
	if !ok {
		alloc = ForPod(pod)
	}
	actuated, hasActuated := m.actuated.Get(pod.UID)
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range list {
			cs := &list[i]
			a, ok := alloc.ContainerResources[cs.Name]
			if !ok {
				continue // an ephemeral container, or one the spec lacks
			}
			cs.AllocatedResources = a.Requests.DeepCopy()
			r := a.DeepCopy()
			if cur, ok := actuated.ContainerResources[cs.Name]; ok && cs.State.Running != nil {
				applied(r, cur)
			}
			cs.Resources = r
		}
	}
	allocatedPod, _ := WithResources(pod, alloc)
	// As upstream, "running" is the pod's phase as the API server has it
	// (the pod as the agent holds it), not the phase being generated: the
	// first Running status still shows the allocation.
	var running *PodCgroupResources
	if pod.Status.Phase == v1.PodRunning {
		var applied *v1.Pod
		if hasActuated {
			applied, _ = WithResources(pod, actuated)
		}
		running = m.runningResources(ctx, allocatedPod, applied)
	}
	st.AllocatedResources, st.Resources = PodLevelStatus(allocatedPod, running, old)
}

// applied overwrites r's CPU and memory values by cur's (what was applied
// to the running container), for the lists r has, as upstream reports a
// running container's resources: a list the allocation lacks stays
// absent, so a limit the container inherits from the pod-level resources
// is not reported as its own.
func applied(r *v1.ResourceRequirements, cur v1.ResourceRequirements) {
	set := func(dst, src v1.ResourceList) {
		if dst == nil {
			return
		}
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := src[name]; ok && !q.IsZero() {
				dst[name] = q.DeepCopy()
			}
		}
	}
	set(r.Limits, cur.Limits)
	set(r.Requests, cur.Requests)
}

// Upstream's floors below which a running pod's status keeps the
// allocated CPU value rather than the one read back (cm.MinShares and
// cm.MinMilliCPULimit, in milli-CPU).
const (
	minStatusMilliCPURequest = 2
	minStatusMilliCPULimit   = 10
)

// PodLevelStatus returns a pod's status.allocatedResources (the pod's
// total requests as allocated: the pod-level ones where set) and
// status.resources, as upstream's convertToAPIPodLevelResourcesStatus.
// allocated is the pod at its allocation; running, what its pod cgroup
// holds, is nil when the pod does not run; old is the pod's previous
// status (nil: none).
//
// A pod that does not run reports its allocated pod-level resources with
// the requests and limits totalled as the pod cgroup would be sized. A
// running pod reports its spec.resources with the pod cgroup's CPU
// request, CPU limit and memory limit in place, except that a CPU value
// stays as allocated when both it and the cgroup's are at or below
// upstream's floors (2m request, 10m limit), and a CPU request stays as
// allocated when the cgroup's shares are what the allocation's become
// through cgroup v2's weight (running.CPUShares); a memory request comes
// from the pod's total requests when spec.resources has none; and a value
// the cgroup lacks is kept from old when old was Running too.
func PodLevelStatus(allocated *v1.Pod, running *PodCgroupResources, old *v1.PodStatus) (v1.ResourceList, *v1.ResourceRequirements) {
	opts := resourcehelper.PodResourcesOptions{}
	requests := nilIfEmpty(resourcehelper.PodRequests(allocated, opts))
	out := allocated.Spec.Resources.DeepCopy()
	if out == nil {
		out = &v1.ResourceRequirements{}
	}
	if running == nil {
		out.Requests = requests.DeepCopy()
		out.Limits = nilIfEmpty(resourcehelper.PodLimits(allocated, opts))
		return requests, out
	}
	if out.Requests == nil {
		out.Requests = v1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = v1.ResourceList{}
	}
	var prev v1.ResourceRequirements
	if old != nil && old.Phase == v1.PodRunning && old.Resources != nil {
		prev = *old.Resources
	}
	keep := func(name v1.ResourceName, from, to v1.ResourceList) {
		if q, ok := from[name]; ok {
			to[name] = q.DeepCopy()
		}
	}
	if r := running.CPURequest; r != nil {
		allocMilli := out.Requests.Cpu().MilliValue()
		roundTrip := running.CPUShares != nil && sharesEqualAfterV2RoundTrip(cpushares.FromMilliCPU(allocMilli), *running.CPUShares)
		if (r.MilliValue() > minStatusMilliCPURequest || allocMilli > minStatusMilliCPURequest) && !roundTrip {
			out.Requests[v1.ResourceCPU] = r.DeepCopy()
		}
	} else {
		keep(v1.ResourceCPU, prev.Requests, out.Requests)
	}
	if _, ok := out.Requests[v1.ResourceMemory]; !ok {
		keep(v1.ResourceMemory, requests, out.Requests)
	}
	if l := running.CPULimit; l != nil {
		if l.MilliValue() > minStatusMilliCPULimit || out.Limits.Cpu().MilliValue() > minStatusMilliCPULimit {
			out.Limits[v1.ResourceCPU] = l.DeepCopy()
		}
	} else {
		keep(v1.ResourceCPU, prev.Limits, out.Limits)
	}
	if l := running.MemoryLimit; l != nil {
		out.Limits[v1.ResourceMemory] = l.DeepCopy()
	} else {
		keep(v1.ResourceMemory, prev.Limits, out.Limits)
	}
	out.Requests, out.Limits = nilIfEmpty(out.Requests), nilIfEmpty(out.Limits)
	return requests, out
}

func nilIfEmpty(l v1.ResourceList) v1.ResourceList {
	if len(l) == 0 {
		return nil
	}
	return l
}
