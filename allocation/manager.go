package allocation

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Config is what a Manager needs.
type Config struct {
	// RootDir holds the checkpoints (allocated_pods_state,
	// actuated_pods_state); "" keeps them in memory.
	RootDir string
	// Fit decides whether a resized pod fits among the others (package
	// admission's ResourceFit). Nil: every resize fits.
	Fit nodekit.Admitter
	// Pods returns the pods admitted on the node (the sync loop's active
	// pods); the others' allocations are what a resize must fit beside.
	Pods func() []*v1.Pod
	Node NodeConfig
	// Containers applies a resize to a running container. Required.
	Containers ContainerUpdater
	// PodCgroup, Sandbox, Usage and PodUsage are optional (see their
	// types).
	PodCgroup PodCgroup
	Sandbox   SandboxUpdater
	Usage     MemoryUsage
	PodUsage  PodMemoryUsage
	// PodCgroupReader, if set, reads a running pod's cgroup back for its
	// status.resources (as upstream); without it, or when a read fails,
	// the status shows what was last applied.
	PodCgroupReader PodCgroupReader
	// Recorder, if set, receives the resize events upstream records:
	// ResizeStarted, ResizeCompleted, ResizeError, ResizeDeferred and
	// ResizeInfeasible, with upstream's messages.
	Recorder Recorder
	// Metrics, if set, receives kubelet's resize series (NewMetrics).
	Metrics *Metrics
	Clock   clock.PassiveClock
}

// Manager keeps allocations and actuations and the resize conditions of
// each pod. It is safe for concurrent use by the loop's pod workers.
type Manager struct {
	cfg       Config
	allocated *Store
	actuated  *Store
	act       *Actuator

	mu       sync.Mutex
	conds    map[types.UID]*podConditions
	deferred map[types.UID]bool
	// triggers holds, per deferred pod, what last queued a retry of it
	// (retry_trigger of kubelet_pod_deferred_accepted_resizes_total).
	triggers map[types.UID]string
	// restarting marks the pods whose containers Restarts named for this
	// sync's restart: their resize is complete only once a later sync
	// finds them running at the allocation, as upstream.
	restarting map[types.UID]bool
	retries    chan types.UID
}

// New opens (or creates) the checkpoints under cfg.RootDir.
func New(cfg Config) (*Manager, error) {
	if cfg.Containers == nil {
		return nil, fmt.Errorf("allocation: Config.Containers is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Pods == nil {
		cfg.Pods = func() []*v1.Pod { return nil }
	}
	alloc, err := OpenStore(cfg.RootDir, AllocatedFile)
	if err != nil {
		return nil, err
	}
	act, err := OpenStore(cfg.RootDir, ActuatedFile)
	if err != nil {
		return nil, err
	}
	return &Manager{
		cfg: cfg, allocated: alloc, actuated: act,
		act: &Actuator{Containers: cfg.Containers, PodCgroup: cfg.PodCgroup, Sandbox: cfg.Sandbox, Usage: cfg.Usage,
			PodUsage: cfg.PodUsage, Actuated: act},
		conds: map[types.UID]*podConditions{}, deferred: map[types.UID]bool{}, triggers: map[types.UID]string{},
		restarting: map[types.UID]bool{},
		retries:    make(chan types.UID, retryBuffer),
	}, nil
}

// retryBuffer bounds the retries waiting to be read; more are dropped
// (the loop's periodic sync decides those pods again).
const retryBuffer = 64

// Retries sends the UID of each pod whose resize is Deferred when room may
// have been made for it: another pod left, or another resize was
// allocated (it may have shrunk). The caller syncs that pod again (the
// sync loop's ProbeUpdates takes such UIDs), which decides the resize
// again, as upstream retries deferred resizes on those triggers. Sends
// never block: when the reader lags, retries are dropped and the
// periodic sync catches up.
func (m *Manager) Retries() <-chan types.UID { return m.retries }

// retryDeferred queues a retry of every deferred resize but skip's, for
// trigger.
func (m *Manager) retryDeferred(skip types.UID, trigger string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.deferred {
		if uid == skip {
			continue
		}
		m.triggers[uid] = trigger
		select {
		case m.retries <- uid:
		default:
		}
	}
}

// Allocated returns the pod's allocation.
func (m *Manager) Allocated(uid types.UID) (PodResources, bool) { return m.allocated.Get(uid) }

// Actuated returns what was last applied to the pod's containers.
func (m *Manager) Actuated(uid types.UID) (PodResources, bool) { return m.actuated.Get(uid) }

// Allocate returns pod as the node runs it: with the allocated resources
// in place of the spec's. A pod seen for the first time (it was just
// admitted) is allocated, and actuated, at its spec. When the spec asks
// for other resources than allocated, the resize is decided: allocated
// (PodResizeInProgress), or left pending (PodResizePending Infeasible or
// Deferred, decided again on the next call). pod is not modified.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod) (*v1.Pod, error) {
	alloc, ok := m.allocated.Get(pod.UID)
	if !ok {
		p := ForPod(pod)
		if err := m.allocated.Set(pod.UID, p); err != nil {
			return pod, err
		}
		if _, had := m.actuated.Get(pod.UID); !had {
			if err := m.actuated.Set(pod.UID, p); err != nil {
				return pod, err
			}
		}
		return pod, nil
	}
	allocatedPod, differs := WithResources(pod, alloc)
	if !differs {
		m.endDeferral(pod, resolutionReverted)
		m.setPending(pod, nil)
		return pod, nil
	}
	pending := Decide(ctx, pod, alloc, m.cfg.Node, m.cfg.Fit, m.others(pod.UID))
	if pending != nil {
		if m.setPending(pod, pending) {
			m.pendingEvent(pod, pending)
			if pending.Reason == v1.PodReasonInfeasible {
				m.cfg.Metrics.countInfeasible(pending.Detail)
			}
		}
		return allocatedPod, nil
	}
	if err := m.allocated.Set(pod.UID, ForPod(pod)); err != nil {
		return allocatedPod, err
	}
	klog.FromContext(ctx).V(2).Info("Pod resize allocated", "pod", klog.KObj(pod), "generation", pod.Generation)
	m.endDeferral(pod, resolutionAccepted)
	m.setPending(pod, nil)
	m.setInProgress(pod, "", "")
	m.event(pod, v1.EventTypeNormal, EventResizeStarted, resizeMessage("Pod resize started", pod, pod.Generation, ""))
	m.retryDeferred(pod.UID, TriggerPodResized)
	return pod, nil
}

// others are the node's other pods at their allocation.
func (m *Manager) others(uid types.UID) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range m.cfg.Pods() {
		if p.UID == uid {
			continue
		}
		if a, ok := m.allocated.Get(p.UID); ok {
			p, _ = WithResources(p, a)
		}
		out = append(out, p)
	}
	return out
}

// Restarts returns the containers running in rs that the pod's resize
// (pod as Allocate returned it) restarts: their resizePolicy says
// RestartContainer for a resource that changed. The caller stops them
// before Actuate, as upstream kills them before it resizes the pod cgroup
// (on cgroup v1 the kernel refuses a pod CPU quota below that of a
// container still running in it); Actuate then records them as starting
// at the allocation, and leaves the resize in progress until a later
// Actuate finds nothing left to do (the new containers run), as upstream
// clears PodResizeInProgress at the sync after the restart.
func (m *Manager) Restarts(pod *v1.Pod, rs *nodekit.PodStatus) []string {
	actuated, _ := m.actuated.Get(pod.UID)
	var names []string
	for _, ch := range PlanResize(pod, actuated, rs).Restart {
		names = append(names, ch.Name)
	}
	if len(names) > 0 {
		m.mu.Lock()
		m.restarting[pod.UID] = true
		m.mu.Unlock()
	}
	return names
}

// Actuate brings the running containers of pod (as Allocate returned it)
// to the allocation and returns the containers to restart for it (their
// resizePolicy says RestartContainer); the caller stops and starts them.
// rs nil means no container runs (a new sandbox is coming): everything
// starts at the allocation. changed reports whether anything was
// applied (the pod's status changes). A failure sets PodResizeInProgress
// with reason Error and the failure as its message; the next call
// retries.
func (m *Manager) Actuate(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (restart []string, changed bool, err error) {
	actuated, _ := m.actuated.Get(pod.UID)
	plan := PlanResize(pod, actuated, rs)
	if plan.Empty() {
		return nil, m.completed(pod), nil
	}
	start := m.cfg.Clock.Now()
	restart, err = m.act.Run(ctx, pod, plan)
	m.cfg.Metrics.observeActuation(float64(m.cfg.Clock.Since(start).Milliseconds()), err == nil)
	if err != nil {
		if gen, changed := m.setInProgress(pod, v1.PodReasonError, err.Error()); changed {
			m.event(pod, v1.EventTypeWarning, EventResizeError, resizeMessage("Pod resize error", pod, gen, err.Error()))
		}
		return nil, true, fmt.Errorf("resize pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	m.mu.Lock()
	restarted := m.restarting[pod.UID]
	delete(m.restarting, pod.UID)
	m.mu.Unlock()
	if len(restart) == 0 && !restarted {
		m.completed(pod)
	}
	return restart, true, nil
}

// completed clears PodResizeInProgress once the containers run at the
// allocation, with a ResizeCompleted event when there was a resize in
// progress (none for a pod just created). It reports whether it cleared.
func (m *Manager) completed(pod *v1.Pod) bool {
	gen, cleared := m.clearInProgress(pod.UID)
	if cleared {
		m.event(pod, v1.EventTypeNormal, EventResizeCompleted, resizeMessage("Pod resize completed", pod, gen, ""))
	}
	return cleared
}

// Forget drops everything kept for the pod (it has left the node).
func (m *Manager) Forget(uid types.UID) error {
	m.mu.Lock()
	if c := m.conds[uid]; c != nil && m.deferred[uid] && c.pending != nil {
		m.cfg.Metrics.deferralEnded(resolutionTerminate, c.bucket, m.cfg.Clock.Since(c.pending.LastTransitionTime.Time).Seconds())
	}
	delete(m.conds, uid)
	delete(m.deferred, uid)
	delete(m.triggers, uid)
	delete(m.restarting, uid)
	m.cfg.Metrics.setCounts(m.conds)
	m.mu.Unlock()
	m.retryDeferred(uid, TriggerPodsRemoved)
	err1 := m.allocated.Remove(uid)
	err2 := m.actuated.Remove(uid)
	if err1 != nil {
		return err1
	}
	return err2
}

// RemoveOrphans drops the pods not in keep (after a restart, pods that
// left while the agent was down).
func (m *Manager) RemoveOrphans(keep map[types.UID]bool) error {
	if err := m.allocated.RemoveOrphans(keep); err != nil {
		return err
	}
	return m.actuated.RemoveOrphans(keep)
}

// endDeferral records how a deferred resize of pod ended (accepted, or
// reverted: the spec went back to the allocation) before its
// PodResizePending condition is cleared. An acceptance is labelled with
// what made the node decide again: the pod's own update (a newer
// generation), the retry another pod's departure or resize queued, else
// the periodic sync.
func (m *Manager) endDeferral(pod *v1.Pod, resolution string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conds[pod.UID]
	if c == nil || c.pending == nil || !m.deferred[pod.UID] {
		return
	}
	seconds := m.cfg.Clock.Since(c.pending.LastTransitionTime.Time).Seconds()
	trigger := m.triggers[pod.UID]
	delete(m.triggers, pod.UID)
	if resolution != resolutionAccepted {
		m.cfg.Metrics.deferralEnded(resolution, c.bucket, seconds)
		return
	}
	switch {
	case pod.Generation != c.pending.ObservedGeneration:
		trigger = TriggerPodUpdated
	case trigger == "":
		trigger = TriggerPeriodic
	}
	m.cfg.Metrics.acceptedAfterDeferral(trigger, c.bucket, seconds)
}
