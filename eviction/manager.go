package eviction

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// SummaryProvider supplies the stats the manager decides on (package
// stats implements it; it is the same shape as server.StatsProvider).
type SummaryProvider interface {
	// Summary may block on the machine and the runtime. The manager never
	// modifies the result.
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
}

// NodeSummaryProvider is what a SummaryProvider may also offer: the
// node-level part of the summary alone (Pods empty), read without asking
// the runtime for any pod's stats. The manager uses it for a step in which
// no pod's stats can change the outcome: no active pod has a local-storage
// limit (or LocalStorageCapacityIsolation is off). It reads the whole
// summary once a threshold calls for ranking pods. Upstream reads every
// pod's stats on every step; on a node with many pods that is the largest
// allocation of the step, and it decides nothing.
type NodeSummaryProvider interface {
	NodeSummary(ctx context.Context) (*statsapi.Summary, error)
}

// PodLister lists the pods the node runs and might evict.
type PodLister interface {
	// ActivePods returns the admitted pods not yet terminated. It answers
	// from local state. The manager reorders the returned slice but never
	// modifies the pods.
	ActivePods(ctx context.Context) []*v1.Pod
}

// PodListerFunc adapts a function to PodLister.
type PodListerFunc func(ctx context.Context) []*v1.Pod

// ActivePods calls f.
func (f PodListerFunc) ActivePods(ctx context.Context) []*v1.Pod { return f(ctx) }

// PodKiller stops a pod being evicted.
type PodKiller interface {
	// KillPod stops every container of pod with the grace period given (in
	// seconds) and records the pod status after applying status to it
	// (phase Failed, reason Evicted and the message). It blocks until the
	// containers are stopped or ctx is done.
	KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error
}

// PodKillerFunc adapts a function to PodKiller.
type PodKillerFunc func(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error

// KillPod calls f.
func (f PodKillerFunc) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error {
	return f(ctx, pod, gracePeriodSeconds, status)
}

// Reclaimer frees node-level resources without evicting a pod: the image
// garbage collector (delete unused images) or the container garbage
// collector (delete all dead containers). Package gc implements both.
type Reclaimer interface {
	// Reclaim blocks until it has freed what it can.
	Reclaim(ctx context.Context) error
}

// ReclaimFunc adapts a function to Reclaimer.
type ReclaimFunc func(ctx context.Context) error

// Reclaim calls f.
func (f ReclaimFunc) Reclaim(ctx context.Context) error { return f(ctx) }

// CleanupChecker says whether an evicted pod's resources are gone.
type CleanupChecker interface {
	// PodCleanedUp reports whether the pod's containers, volumes and
	// directories are gone. It answers from local state.
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
	_ PodLister        = PodListerFunc(nil)
	_ PodKiller        = PodKillerFunc(nil)
	_ Reclaimer        = ReclaimFunc(nil)
	_ CleanupChecker   = CleanupFunc(nil)
	_ nodekit.Admitter = (*Manager)(nil)
)

// Config configures a Manager. Stats, Pods and Killer are required.
type Config struct {
	// Thresholds are the parsed eviction thresholds (ParseThresholds).
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a pressure condition stays
	// after it was last observed. Default 5m.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds caps the grace period of pods evicted for a
	// soft threshold (evictionMaxPodGracePeriod); 0 means the pods' own.
	MaxPodGracePeriodSeconds int64
	// LocalStorageCapacityIsolation enables eviction of pods over their
	// emptyDir sizeLimit or ephemeral-storage limits.
	LocalStorageCapacityIsolation bool
	// DedicatedImageFs says images live on a filesystem of their own
	// (imagefs differs from nodefs); it selects ranking and reclaim.
	DedicatedImageFs bool
	// Interval is the pause between Synchronize calls in Run. Default 10s.
	Interval time.Duration
	// CleanupTimeout bounds the wait for an evicted pod's cleanup. Default 30s.
	CleanupTimeout time.Duration

	Stats  SummaryProvider
	Pods   PodLister
	Killer PodKiller
	// ImageGC and ContainerGC reclaim disk before pods are evicted; nil
	// skips that step.
	ImageGC, ContainerGC Reclaimer
	// Cleanup is asked after an eviction; nil means Run does not wait.
	Cleanup CleanupChecker
	// Events receives EvictionThresholdMet (on NodeRef) and Evicted (on the
	// pod). Nil discards them.
	Events  EventRecorder
	NodeRef *v1.ObjectReference
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Metrics counts evictions by signal (kubelet_evictions;
	// server.AgentMetrics satisfies it). Nil discards them.
	Metrics Metrics
}

// Metrics counts the pods the manager evicted, by eviction signal
// (memory.available, nodefs.available, emptydirfs.limit, ...).
type Metrics interface {
	IncEviction(signal string)
}

type noMetrics struct{}

func (noMetrics) IncEviction(string) {}

// Manager is the node-pressure eviction manager: Synchronize observes the
// node, updates the pressure conditions and evicts at most one pod;
// Admit refuses pods the node cannot take under pressure. Its methods
// are safe for concurrent use.
type Manager struct {
	cfg Config

	mu         sync.RWMutex
	state      State
	conditions []v1.NodeConditionType
}

// New checks cfg and returns a manager with no pressure observed yet.
func New(cfg Config) (*Manager, error) {
	var missing []string
	if cfg.Stats == nil {
		missing = append(missing, "Stats")
	}
	if cfg.Pods == nil {
		missing = append(missing, "Pods")
	}
	if cfg.Killer == nil {
		missing = append(missing, "Killer")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("eviction: Config.%v must be set", missing)
	}
	for _, t := range cfg.Thresholds {
		if !t.Signal.valid() {
			return nil, fmt.Errorf("eviction: Config.Thresholds: unsupported eviction signal %q", t.Signal)
		}
	}
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = 5 * time.Minute
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.CleanupTimeout == 0 {
		cfg.CleanupTimeout = 30 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Manager{cfg: cfg}, nil
}

// Conditions returns the pressure conditions now in force, in the order
// MemoryPressure, DiskPressure, PIDPressure. The slice is the caller's.
func (m *Manager) Conditions() []v1.NodeConditionType {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.conditions)
}

// UnderPressure reports whether condition t is in force. Its method value
// composed with a ctx-taking closure feeds statusmgr.PressureCondition.
func (m *Manager) UnderPressure(t v1.NodeConditionType) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Contains(m.conditions, t)
}

// PressureFunc returns a func(ctx) bool for condition t, the shape
// statusmgr.PressureCondition takes.
func (m *Manager) PressureFunc(t v1.NodeConditionType) func(context.Context) bool {
	return func(context.Context) bool { return m.UnderPressure(t) }
}

// Admit implements nodekit.Admitter with AdmitUnderPressure over the
// conditions of the last Synchronize. It does not block.
func (m *Manager) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	return AdmitUnderPressure(req.Pod, m.Conditions())
}

// Synchronize is one step: read the stats, update the pressure
// conditions, evict pods over their local-storage limits, and, if a
// threshold calls for it, reclaim node-level resources and, when that is
// not enough, evict the first-ranked pod that is not critical. It returns
// the pods evicted (at most one for a threshold). It blocks on the stats,
// the reclaimers and the killer; it does not wait for cleanup.
func (m *Manager) Synchronize(ctx context.Context) ([]*v1.Pod, error) {
	logger := klog.FromContext(ctx)
	if len(m.cfg.Thresholds) == 0 && !m.cfg.LocalStorageCapacityIsolation {
		return nil, nil
	}
	pods := m.cfg.Pods.ActivePods(ctx)
	withPods := m.cfg.LocalStorageCapacityIsolation && slices.ContainsFunc(pods, storageLimited)
	sum, withPods, err := m.summary(ctx, withPods)
	if err != nil {
		return nil, fmt.Errorf("eviction: read stats summary: %w", err)
	}
	obs := Observe(sum)
	stats := StatsByUID(sum.Pods)

	m.mu.Lock()
	next, ev := Evaluate(m.state, m.cfg.Thresholds, obs, m.cfg.Clock.Now(), m.cfg.PressureTransitionPeriod)
	m.state, m.conditions = next, ev.Conditions
	m.mu.Unlock()

	if m.cfg.LocalStorageCapacityIsolation {
		var evicted []*v1.Pod
		for _, pod := range pods {
			s, ok := stats(pod)
			if !ok {
				continue
			}
			if msg, signal, bad := localStorageViolation(pod, s, m.cfg.DedicatedImageFs); bad && m.evict(ctx, pod, 1, msg, false) {
				m.cfg.Metrics.IncEviction(signal)
				evicted = append(evicted, pod)
			}
		}
		if len(evicted) > 0 {
			return evicted, nil
		}
	}
	if len(ev.Act) == 0 {
		return nil, nil
	}
	t := pickThreshold(ev.Act)
	res := t.Signal.Resource()
	logger.Info("Eviction manager: attempting to reclaim", "resourceName", res)
	if m.cfg.Events != nil && m.cfg.NodeRef != nil {
		m.cfg.Events.Eventf(m.cfg.NodeRef, v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)
	}
	if m.reclaimNode(ctx, t.Signal) {
		logger.Info("Eviction manager: able to reduce resource pressure without evicting pods", "resourceName", res)
		return nil, nil
	}
	if len(pods) == 0 {
		logger.Info("Eviction manager: thresholds met, but no pods are active to evict")
		return nil, nil
	}
	if !withPods {
		// The pods' stats were not read for this step; ranking needs them.
		if sum, _, err = m.summary(ctx, true); err != nil {
			return nil, fmt.Errorf("eviction: read stats summary to rank pods: %w", err)
		}
		stats = StatsByUID(sum.Pods)
	}
	ranked := slices.Clone(pods)
	Rank(t.Signal, ranked, stats, m.cfg.DedicatedImageFs)
	for _, pod := range ranked {
		msg := EvictionMessage(t, obs, pod, stats)
		if m.evict(ctx, pod, GracePeriodFor(&t, pod, m.maxGrace()), msg, true) {
			m.cfg.Metrics.IncEviction(string(t.Signal))
			return []*v1.Pod{pod}, nil
		}
	}
	logger.Info("Eviction manager: unable to evict any pods from the node")
	return nil, nil
}

// summary reads the stats: the whole summary when withPods, else the
// node's alone if the provider can give that (NodeSummaryProvider). It
// reports whether the result carries the pods' stats.
func (m *Manager) summary(ctx context.Context, withPods bool) (*statsapi.Summary, bool, error) {
	if ns, ok := m.cfg.Stats.(NodeSummaryProvider); ok && !withPods {
		sum, err := ns.NodeSummary(ctx)
		return sum, false, err
	}
	sum, err := m.cfg.Stats.Summary(ctx, false)
	return sum, true, err
}

func (m *Manager) maxGrace() int64 {
	if m.cfg.MaxPodGracePeriodSeconds > 0 {
		return m.cfg.MaxPodGracePeriodSeconds
	}
	return 1<<62 - 1
}

// pickThreshold picks the threshold to act on: memory first, then the
// others in configuration order.
func pickThreshold(ts []Threshold) Threshold {
	for _, t := range ts {
		if t.Signal == SignalMemoryAvailable {
			return t
		}
	}
	return ts[0]
}

// reclaimers returns the node-level reclaim steps for a signal: disk
// signals on the filesystem holding images and writable layers delete
// dead containers, then unused images; nodefs with a dedicated imagefs and
// memory/PID have none.
func (m *Manager) reclaimers(s Signal) []Reclaimer {
	disk := s.Condition() == v1.NodeDiskPressure
	if !disk {
		return nil
	}
	if m.cfg.DedicatedImageFs && (s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree) {
		return nil
	}
	var out []Reclaimer
	for _, r := range []Reclaimer{m.cfg.ContainerGC, m.cfg.ImageGC} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// reclaimNode runs the reclaim steps for s and reports whether, afterwards,
// no threshold is met any more (minimum reclaim included).
func (m *Manager) reclaimNode(ctx context.Context, s Signal) bool {
	logger := klog.FromContext(ctx)
	rs := m.reclaimers(s)
	if len(rs) == 0 {
		return false
	}
	for _, r := range rs {
		if err := r.Reclaim(ctx); err != nil {
			logger.Info("Eviction manager: error reclaiming node-level resources", "signal", s, "err", err)
		}
	}
	sum, _, err := m.summary(ctx, false)
	if err != nil {
		logger.Error(err, "Eviction manager: failed to read stats after reclaim")
		return false
	}
	return len(ThresholdsMet(m.cfg.Thresholds, Observe(sum), true)) == 0
}

// evict kills pod unless it is critical; it reports whether it tried (a
// kill error is logged, as upstream, and still counts).
func (m *Manager) evict(ctx context.Context, pod *v1.Pod, grace int64, msg string, disruption bool) bool {
	logger := klog.FromContext(ctx)
	if IsCritical(pod) {
		logger.Info("Eviction manager: cannot evict a critical pod", "pod", klog.KObj(pod))
		return false
	}
	if m.cfg.Events != nil {
		m.cfg.Events.Eventf(pod, v1.EventTypeWarning, Reason, "%s", msg)
	}
	now := m.cfg.Clock.Now()
	err := m.cfg.Killer.KillPod(ctx, pod, grace, func(st *v1.PodStatus) {
		st.Phase = v1.PodFailed
		st.Reason = Reason
		st.Message = msg
		if disruption {
			setCondition(st, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
				ObservedGeneration: pod.Generation, Reason: v1.PodReasonTerminationByKubelet, Message: msg}, now)
		}
	})
	if err != nil {
		logger.Error(err, "Eviction manager: pod failed to evict", "pod", klog.KObj(pod))
	} else {
		logger.Info("Eviction manager: pod is evicted successfully", "pod", klog.KObj(pod))
	}
	return true
}

func setCondition(st *v1.PodStatus, c v1.PodCondition, now time.Time) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status != c.Status {
				c.LastTransitionTime.Time = now
			} else {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	c.LastTransitionTime.Time = now
	st.Conditions = append(st.Conditions, c)
}

// WaitForCleanup polls Cleanup every second until every pod is cleaned up,
// CleanupTimeout passes or ctx is done. Without a CleanupChecker it
// returns at once.
func (m *Manager) WaitForCleanup(ctx context.Context, pods []*v1.Pod) {
	if m.cfg.Cleanup == nil || len(pods) == 0 {
		return
	}
	timeout := m.cfg.Clock.NewTimer(m.cfg.CleanupTimeout)
	defer timeout.Stop()
	tick := m.cfg.Clock.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C():
			klog.FromContext(ctx).Info("Eviction manager: timed out waiting for pods to be cleaned up", "pods", klog.KObjSlice(pods))
			return
		case <-tick.C():
			if !slices.ContainsFunc(pods, func(p *v1.Pod) bool { return !m.cfg.Cleanup.PodCleanedUp(ctx, p) }) {
				return
			}
		}
	}
}

// Run calls Synchronize every Interval until ctx is done, waiting for
// the cleanup of evicted pods before the next step. It returns ctx's error.
func (m *Manager) Run(ctx context.Context) error {
	for {
		evicted, err := m.Synchronize(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Eviction manager: synchronize failed")
		}
		if len(evicted) > 0 {
			m.WaitForCleanup(ctx, evicted)
		} else {
			select {
			case <-ctx.Done():
			case <-m.cfg.Clock.After(m.cfg.Interval):
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
