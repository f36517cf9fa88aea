package shutdown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Reasons and messages, worded as upstream kubelet words them.
const (
	// ReasonNotAdmitted is the admission rejection reason while shutting down.
	ReasonNotAdmitted = "NodeShutdown"
	// MessageNotAdmitted is the admission rejection message.
	MessageNotAdmitted = "Pod was rejected as the node is shutting down."
	// ReasonTerminated is the status reason of a pod stopped by a shutdown.
	ReasonTerminated = "Terminated"
	// MessageTerminated is the status message of a pod stopped by a
	// shutdown, and of its DisruptionTarget condition.
	MessageTerminated = "Pod was terminated in response to imminent node shutdown."
	// MessageShuttingDown is what Ready returns while shutting down; it
	// becomes part of the node's Ready condition message.
	MessageShuttingDown = "node is shutting down"
	// EventReason is the reason of the node events about a shutdown.
	EventReason = "NodeShutdown"
)

// PodKiller stops a pod. syncloop.Loop.KillPod fits.
type PodKiller interface {
	// KillPod stops pod's containers with at most gracePeriodSeconds,
	// records its status after applying status to it, and blocks until
	// the pod has terminated, ctx is done or the killer gives up.
	KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error
}

// PodKillerFunc adapts a function to PodKiller.
type PodKillerFunc func(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error

// KillPod calls f.
func (f PodKillerFunc) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error {
	return f(ctx, pod, gracePeriodSeconds, status)
}

// CleanupChecker reports whether a killed pod is entirely gone from the
// node: containers stopped and volumes unmounted. syncloop.Loop's
// PodCleanedUp fits.
type CleanupChecker interface {
	PodCleanedUp(ctx context.Context, pod *v1.Pod) bool
}

// CleanupFunc adapts a function to CleanupChecker.
type CleanupFunc func(ctx context.Context, pod *v1.Pod) bool

// PodCleanedUp calls f.
func (f CleanupFunc) PodCleanedUp(ctx context.Context, pod *v1.Pod) bool { return f(ctx, pod) }

// EventRecorder records events; client-go's record.EventRecorder fits.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

var (
	_ PodKiller        = PodKillerFunc(nil)
	_ CleanupChecker   = CleanupFunc(nil)
	_ nodekit.Admitter = (*Manager)(nil)
)

// Config configures a Manager. ActivePods and Killer are required.
type Config struct {
	// Groups are the shutdown steps (see Groups). None disables graceful
	// shutdown: Run then ignores its trigger.
	Groups []Group
	// ActivePods returns the admitted pods not yet terminated, from local
	// state; the manager does not modify them.
	ActivePods func() []*v1.Pod
	// Killer stops the pods.
	Killer PodKiller
	// Cleanup, when set, is asked once a second after a group's kills have
	// returned, until every pod of the group is cleaned up (volumes
	// unmounted, as upstream waits for) or the group's period is over.
	Cleanup CleanupChecker
	// SyncNodeStatus, when set, is called (in a goroutine) as soon as the
	// node is marked shutting down, to publish the Ready condition at once.
	SyncNodeStatus func(ctx context.Context) error
	// Events receives the NodeShutdown events on NodeRef; nil discards them.
	Events  EventRecorder
	NodeRef *v1.ObjectReference
	// StateFile, when set, is where each Shutdown records when it began
	// and ended (State; upstream's ROOTDIR/graceful_node_shutdown_state).
	StateFile string
	// Times, when set, is given each State recorded, and the stored one
	// when Run starts: the kubelet_graceful_shutdown_start_time_seconds /
	// _end_time_seconds gauges (Unix seconds, 0 for a zero time).
	Times func(State)
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Manager stops the node's pods gracefully before the node shuts down.
// Shutdown is the step, Run waits for a Trigger and calls it. While
// shutting down, Admit rejects every pod and Ready reports the node not
// ready. Its methods are safe for concurrent use.
type Manager struct {
	cfg    Config
	groups []Group

	mu           sync.Mutex
	shuttingDown bool
}

// New checks cfg and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.ActivePods == nil {
		return nil, errors.New("shutdown: Config.ActivePods is required")
	}
	if cfg.Killer == nil {
		return nil, errors.New("shutdown: Config.Killer is required")
	}
	groups, err := sortGroups(cfg.Groups, "Groups")
	if err != nil {
		return nil, fmt.Errorf("shutdown: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Manager{cfg: cfg, groups: groups}, nil
}

// ShuttingDown reports whether a shutdown has begun (and was not
// cancelled).
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

func (m *Manager) setShuttingDown(v bool) {
	m.mu.Lock()
	m.shuttingDown = v
	m.mu.Unlock()
}

// Ready returns an error saying "node is shutting down" while shutting
// down, nil otherwise: a readiness check for the node's Ready condition
// (statusmgr.ReadyCondition takes it).
func (m *Manager) Ready(context.Context) error {
	if m.ShuttingDown() {
		return errors.New(MessageShuttingDown)
	}
	return nil
}

// Admit rejects every pod while the node is shutting down.
func (m *Manager) Admit(_ context.Context, _ nodekit.AdmitRequest) nodekit.Decision {
	if m.ShuttingDown() {
		return nodekit.Decision{Reason: ReasonNotAdmitted, Message: MessageNotAdmitted}
	}
	return nodekit.Admitted
}

// Shutdown marks the node shutting down and stops the active pods group
// by group, lowest priority first. The pods of a group are killed in
// parallel, each with the smaller of its own terminationGracePeriodSeconds
// and the group's period; the next group starts when every kill of the
// group has returned (and, with Cleanup, every pod is cleaned up) or when
// the group's period is over, whichever comes first. Kills still running
// then go on in the background until the killer returns. Failed kills are
// logged, as upstream. Shutdown returns ctx's error if ctx ends first.
func (m *Manager) Shutdown(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	m.setShuttingDown(true)
	if m.cfg.SyncNodeStatus != nil {
		go func() {
			if err := m.cfg.SyncNodeStatus(ctx); err != nil {
				logger.Error(err, "Shutdown manager: failed to publish the node status")
			}
		}()
	}
	pods := m.cfg.ActivePods()
	start := m.cfg.Clock.Now()
	m.record(ctx, State{StartTime: start})
	defer func() { m.record(ctx, State{StartTime: start, EndTime: m.cfg.Clock.Now()}) }()
	logger.Info("Shutdown manager: stopping pods", "pods", len(pods), "groups", m.groups)
	for i, pods := range assign(m.groups, pods) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(pods) == 0 {
			continue
		}
		m.stopGroup(ctx, m.groups[i], pods)
	}
	logger.Info("Shutdown manager: done stopping pods")
	return nil
}

// stopGroup kills pods in parallel and waits at most the group's period.
func (m *Manager) stopGroup(ctx context.Context, g Group, pods []*v1.Pod) {
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	for _, pod := range pods {
		wg.Go(func() { m.kill(ctx, pod, podGracePeriod(pod, g.GracePeriodSeconds)) })
	}
	if g.GracePeriodSeconds <= 0 {
		return // the kills are under way; there is no time to wait
	}
	period := time.Duration(g.GracePeriodSeconds) * time.Second
	timer := m.cfg.Clock.NewTimer(period)
	defer timer.Stop()
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wg.Wait()
		m.waitCleanup(waitCtx, pods)
	}()
	select {
	case <-done:
		logger.V(1).Info("Shutdown manager: group stopped", "priority", g.Priority, "gracePeriod", g.GracePeriodSeconds)
	case <-timer.C():
		logger.V(1).Info("Shutdown manager: group's period is over; moving on", "priority", g.Priority, "gracePeriod", g.GracePeriodSeconds)
	case <-ctx.Done():
	}
}

// kill stops one pod with the upstream status.
func (m *Manager) kill(ctx context.Context, pod *v1.Pod, grace int64) {
	logger := klog.FromContext(ctx)
	logger.V(1).Info("Shutdown manager: killing pod", "pod", klog.KObj(pod), "gracePeriod", grace)
	err := m.cfg.Killer.KillPod(ctx, pod, grace, func(st *v1.PodStatus) { terminatedStatus(st, pod, m.cfg.Clock.Now()) })
	if err != nil {
		logger.V(1).Info("Shutdown manager: failed to kill pod", "pod", klog.KObj(pod), "err", err)
		return
	}
	logger.V(1).Info("Shutdown manager: pod killed", "pod", klog.KObj(pod))
}

// waitCleanup polls Cleanup once a second until every pod is cleaned up or
// ctx is done. Without a CleanupChecker it returns at once.
func (m *Manager) waitCleanup(ctx context.Context, pods []*v1.Pod) {
	if m.cfg.Cleanup == nil {
		return
	}
	tick := m.cfg.Clock.NewTicker(time.Second)
	defer tick.Stop()
	for slices.ContainsFunc(pods, func(p *v1.Pod) bool { return !m.cfg.Cleanup.PodCleanedUp(ctx, p) }) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
	}
}

// terminatedStatus edits a killed pod's status as upstream: phase Failed
// (unless it already Succeeded), reason Terminated, and a DisruptionTarget
// condition with reason TerminationByKubelet.
func terminatedStatus(st *v1.PodStatus, pod *v1.Pod, now time.Time) {
	if st.Phase != v1.PodSucceeded {
		st.Phase = v1.PodFailed
	}
	st.Reason = ReasonTerminated
	st.Message = MessageTerminated
	c := v1.PodCondition{
		Type:               v1.DisruptionTarget,
		Status:             v1.ConditionTrue,
		ObservedGeneration: pod.Generation,
		Reason:             v1.PodReasonTerminationByKubelet,
		Message:            MessageTerminated,
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		if st.Conditions[i].Status == c.Status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		} else {
			c.LastTransitionTime.Time = now
		}
		st.Conditions[i] = c
		return
	}
	c.LastTransitionTime.Time = now
	st.Conditions = append(st.Conditions, c)
}
