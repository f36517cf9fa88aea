package statusmgr

import (
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/podutil"
)

// Errors the Manager's setters return. Test with errors.Is.
var (
	// ErrUnknownPod: the manager has no status for the pod (it never got
	// one, or it was removed as an orphan). Readiness and startup updates
	// that race with a pod's first status or its removal return it; callers
	// may ignore it.
	ErrUnknownPod = errors.New("statusmgr: unknown pod")
	// ErrUnknownContainer: the pod's status has no container with that ID.
	ErrUnknownContainer = errors.New("statusmgr: unknown container")
	// ErrIllegalTransition: the new status would move a container that has
	// terminated for good back to running or waiting. The update is refused
	// as a whole; the cached status is unchanged.
	ErrIllegalTransition = errors.New("statusmgr: illegal container state transition")
	// ErrInvalid: the arguments are unusable (nil pod, pod without UID).
	ErrInvalid = errors.New("statusmgr: invalid argument")
)

// DefaultResyncInterval is how often Run republishes every status.
const DefaultResyncInterval = 10 * time.Second

// MirrorPodGetter finds the mirror pod of a static pod: the API server's
// copy, which carries the static pod's status. The pod config's store is the
// usual implementation.
type MirrorPodGetter interface {
	// GetMirrorPod returns the mirror pod with the given full name
	// (name_namespace), or false when there is none. It must not block on
	// I/O or call back into the Manager. The pod is read-only.
	GetMirrorPod(fullName string) (*v1.Pod, bool)
}

// MirrorPodGetterFunc adapts a function to MirrorPodGetter.
type MirrorPodGetterFunc func(fullName string) (*v1.Pod, bool)

// GetMirrorPod implements MirrorPodGetter.
func (f MirrorPodGetterFunc) GetMirrorPod(fullName string) (*v1.Pod, bool) { return f(fullName) }

// PodGetter returns the newest known version of a pod, as the API server
// (or another source) last reported it.
type PodGetter interface {
	// GetPodByUID returns the pod, or false when unknown. It must not block
	// on I/O or call back into the Manager. The pod is read-only.
	GetPodByUID(uid types.UID) (*v1.Pod, bool)
}

// PodGetterFunc adapts a function to PodGetter.
type PodGetterFunc func(uid types.UID) (*v1.Pod, bool)

// GetPodByUID implements PodGetter.
func (f PodGetterFunc) GetPodByUID(uid types.UID) (*v1.Pod, bool) { return f(uid) }

var (
	_ MirrorPodGetter = MirrorPodGetterFunc(nil)
	_ PodGetter       = PodGetterFunc(nil)
)

// Config configures a Manager. Only Sink is required.
type Config struct {
	// Sink receives the statuses to publish and the final deletes.
	Sink nodekit.StatusSink
	// Mirrors finds the mirror pod of a static pod (source other than
	// "api"); a static pod's status is published to its mirror pod of the
	// same version (config.mirror == config.hash), and waits while there is
	// none. Nil (no API server): static pods are published as themselves.
	Mirrors MirrorPodGetter
	// Pods returns the newest version of a pod the node knows from the API
	// server. When set, the manager reads deletion timestamps from it (so a
	// finished pod deleted later is still removed), and a resync republishes
	// only the statuses that differ from the pod's. Nil: the pod last given
	// to SetPodStatus or TerminatePod is used, and a resync republishes every
	// status.
	Pods PodGetter
	// SharePods says the pods given to SetPodStatus and TerminatePod are
	// never modified afterwards, by the caller or anyone else, so the
	// manager keeps each as given instead of a deep copy (one copy of
	// every pod fewer, and none made per status). The sync loop's pods
	// qualify: it replaces a pod on update and never changes one, and the
	// pod store's readers treat them as read-only. False: every pod is
	// copied and the caller keeps ownership.
	SharePods bool
	// ResyncInterval is how often Run republishes statuses. Default 10s.
	ResyncInterval time.Duration
	// Parallel is how many pods a sync publishes to at once: 0 or 1, one
	// after the other (upstream's status manager writes one pod at a
	// time); more needs a Sink safe for concurrent use, as APISink is. A
	// pod's own writes never overlap: a sync has at most one job per pod,
	// and syncs run one at a time.
	Parallel int
	// Clock stamps start and transition times and drives Run. Default: the
	// real clock.
	Clock clock.Clock
}

// Manager is the single owner of pod status on the node. Workers hand it the
// statuses they compute; it keeps a versioned copy per pod that never moves
// backwards, and publishes new versions to a nodekit.StatusSink. Its methods
// are safe for concurrent use.
type Manager struct {
	sink    nodekit.StatusSink
	mirrors MirrorPodGetter
	pods    PodGetter
	share   bool
	resync  time.Duration
	clock   clock.Clock
	// parallel is Config.Parallel, at least 1.
	parallel int

	mu      sync.Mutex
	entries map[types.UID]*podEntry
	notify  chan struct{}
	// dirty holds the pods SyncOnce must look at: a new version, a change
	// of deletion or reclaim, a failed write, or a static pod (whose mirror
	// may come and go). A sync that leaves a pod settled takes it out, so
	// SyncOnce costs O(changed pods), not O(pods).
	dirty map[types.UID]struct{}

	// syncMu serializes publication; sent is only touched under it (and,
	// while a sync's jobs run at once, under sentMu as well).
	syncMu sync.Mutex
	sentMu sync.Mutex
	// sent maps the UID of the API object a status went to (the pod, or a
	// static pod's mirror pod) to the last version the sink accepted.
	sent map[types.UID]uint64
}

// podEntry is the manager's record of one pod. status is copy-on-write: it
// is replaced, never modified in place, so a snapshot of it may be read
// without the lock.
type podEntry struct {
	pod     *v1.Pod
	status  v1.PodStatus
	version uint64
	// reclaimed: the caller said the pod's resources are released.
	reclaimed bool
	// deleted: the sink's DeletePod succeeded; nothing more is published.
	deleted bool
}

// NewManager returns a Manager publishing to cfg.Sink. Call Run (or the
// SyncOnce and Resync steps) to publish.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Sink == nil {
		return nil, fmt.Errorf("%w: Config.Sink is nil", ErrInvalid)
	}
	if cfg.ResyncInterval < 0 {
		return nil, fmt.Errorf("%w: Config.ResyncInterval %v is negative", ErrInvalid, cfg.ResyncInterval)
	}
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Parallel < 0 {
		return nil, fmt.Errorf("%w: Config.Parallel %d is negative", ErrInvalid, cfg.Parallel)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Manager{
		parallel: max(cfg.Parallel, 1),
		sink:     cfg.Sink,
		mirrors:  cfg.Mirrors,
		pods:     cfg.Pods,
		share:    cfg.SharePods,
		resync:   cfg.ResyncInterval,
		clock:    cfg.Clock,
		entries:  map[types.UID]*podEntry{},
		notify:   make(chan struct{}, 1),
		dirty:    map[types.UID]struct{}{},
		sent:     map[types.UID]uint64{},
	}, nil
}

func checkPod(op string, pod *v1.Pod) error {
	if pod == nil {
		return fmt.Errorf("%w: %s: pod is nil", ErrInvalid, op)
	}
	if pod.UID == "" {
		return fmt.Errorf("%w: %s: pod %s/%s has no metadata.uid", ErrInvalid, op, pod.Namespace, pod.Name)
	}
	return nil
}

// SetPodStatus records status as the pod's newest status. It does not
// block: publication happens in Run. The manager keeps the start time, the
// conditions' transition times and (when status has none) the qosClass and
// volume health, keeps a terminal phase terminal, forces Ready and
// ContainersReady false in a terminal phase, sets status.observedGeneration
// from the pod, and refuses (ErrIllegalTransition)
// a status that restarts a container its restart policy does not allow to
// restart. A status equal to the cached one is a no-op. status is copied,
// and pod too unless Config.SharePods; the caller keeps ownership of both
// (with SharePods, of a pod nobody modifies).
func (m *Manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) error {
	if err := checkPod("SetPodStatus", pod); err != nil {
		return err
	}
	st := *status.DeepCopy()
	st.ObservedGeneration = pod.Generation
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updateLocked(pod, st)
}

// SetContainerReadiness records a readiness probe result for the container
// with the given ID and recomputes the pod's Ready and ContainersReady
// conditions. It returns ErrUnknownPod or ErrUnknownContainer when there is
// nothing to update (probe results may race with a pod's first status).
func (m *Manager) SetContainerReadiness(podUID types.UID, id nodekit.ContainerID, ready bool) error {
	return m.setContainer(podUID, id, func(pod *v1.Pod, st *v1.PodStatus, cs *v1.ContainerStatus) bool {
		if cs.Ready == ready {
			return false
		}
		cs.Ready = ready
		recomputeReadiness(pod, st)
		return true
	})
}

// SetContainerStartup records a startup probe result (status.started) for
// the container with the given ID. Errors as SetContainerReadiness.
func (m *Manager) SetContainerStartup(podUID types.UID, id nodekit.ContainerID, started bool) error {
	return m.setContainer(podUID, id, func(_ *v1.Pod, _ *v1.PodStatus, cs *v1.ContainerStatus) bool {
		if cs.Started != nil && *cs.Started == started {
			return false
		}
		cs.Started = &started
		return true
	})
}

func (m *Manager) setContainer(podUID types.UID, id nodekit.ContainerID, change func(*v1.Pod, *v1.PodStatus, *v1.ContainerStatus) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[podUID]
	if e == nil || e.deleted {
		return fmt.Errorf("%w: %s", ErrUnknownPod, podUID)
	}
	if findContainerStatus(&e.status, id.String()) == nil {
		return fmt.Errorf("%w: %q in pod %s/%s", ErrUnknownContainer, id.String(), e.pod.Namespace, e.pod.Name)
	}
	st := e.status.DeepCopy()
	if !change(e.pod, st, findContainerStatus(st, id.String())) {
		return nil
	}
	return m.updateLocked(e.pod, *st)
}

// TerminatePod records that the pod's containers are all stopped: every
// container that is not terminated in the cached status (or, with none
// cached, in pod.Status) is marked terminated with reason
// ContainerStatusUnknown and exit code 137 — regular containers only if the
// pod ever initialized, init containers up to the last one that tried to
// start — and a pod that is not static and not yet terminal becomes Failed.
// It does not release anything: see PodResourcesReclaimed.
func (m *Manager) TerminatePod(pod *v1.Pod) error {
	if err := checkPod("TerminatePod", pod); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	base := &pod.Status
	if e := m.entries[pod.UID]; e != nil {
		base = &e.status
	}
	st := base.DeepCopy()
	if hasInitialized(pod, st) {
		for i := range st.ContainerStatuses {
			markTerminated(&st.ContainerStatuses[i])
		}
	}
	for i := range triedPrefix(st.InitContainerStatuses) {
		markTerminated(&st.InitContainerStatuses[i])
	}
	if !podutil.IsStatic(pod) && !podstatus.IsTerminal(st.Phase) {
		st.Phase = v1.PodFailed
	}
	return m.updateLocked(pod, *st)
}

// PodResourcesReclaimed records that the pod's resources (containers,
// volumes, cgroups) are released. Once the pod is also deleted in the API
// (deletionTimestamp set) and its terminal status is published, the next
// sync calls the sink's DeletePod, exactly once unless it fails. Static and
// mirror pods are never deleted this way. Idempotent.
func (m *Manager) PodResourcesReclaimed(uid types.UID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[uid]
	if e == nil {
		return fmt.Errorf("%w: %s", ErrUnknownPod, uid)
	}
	if !e.reclaimed {
		e.reclaimed = true
		m.dirty[uid] = struct{}{}
		m.signal()
	}
	return nil
}

// GetPodStatus returns a copy of the pod's cached status. Static pods are
// keyed by their own UID, not their mirror pod's.
func (m *Manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[uid]
	if e == nil {
		return v1.PodStatus{}, false
	}
	return *e.status.DeepCopy(), true
}

// GetPodPhase returns the phase of the pod's cached status, without
// copying the status (syncloop.PhaseGetter).
func (m *Manager) GetPodPhase(uid types.UID) (v1.PodPhase, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[uid]
	if e == nil {
		return "", false
	}
	return e.status.Phase, true
}

// podForgetter is a sink that keeps something per pod (APISink: its last
// write's response) and is told which pods the manager still knows.
type podForgetter interface {
	ForgetPods(keep map[types.UID]bool)
}

// catchUp is a sink that keeps something per pod until the caller's copy
// of the pod has caught up with it (APISink: its last write's response).
type catchUp interface {
	CaughtUp(pod *v1.Pod)
}

// RemoveOrphanedStatuses forgets every pod whose UID is not in keep. The
// caller passes the pods it still knows (running or not), typically from
// housekeeping. A sink with a ForgetPods(keep) method (APISink) is passed
// keep too.
func (m *Manager) RemoveOrphanedStatuses(keep map[types.UID]bool) {
	if f, ok := m.sink.(podForgetter); ok {
		f.ForgetPods(keep)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.entries {
		if !keep[uid] {
			delete(m.entries, uid)
			delete(m.dirty, uid)
		}
	}
}

// updateLocked folds status into the pod's entry: checks, carries times,
// normalizes, and bumps the version if anything the node agent owns changed.
func (m *Manager) updateLocked(pod *v1.Pod, status v1.PodStatus) error {
	e := m.entries[pod.UID]
	if e != nil && e.deleted {
		return nil
	}
	old := &pod.Status
	switch {
	case e != nil:
		old = &e.status
	case podutil.IsStatic(pod):
		// A static pod's first status builds on its mirror pod's, if that
		// mirror is of this very version of the static pod (a stale mirror
		// of an earlier version says nothing about this one).
		old = &v1.PodStatus{}
		if m.mirrors != nil {
			mp, ok := m.mirrors.GetMirrorPod(podutil.FullName(pod))
			if ok && mp.Annotations[v1.MirrorPodAnnotationKey] == pod.Annotations[annotationConfigHash] {
				old = &mp.Status
			}
		}
	}
	if err := checkContainerTransitions(old, &status, &pod.Spec); err != nil {
		return fmt.Errorf("pod %s/%s (%s): %w", pod.Namespace, pod.Name, pod.UID, err)
	}
	keepTerminalPhase(old, &status)
	podstatus.ForceTerminalReadiness(pod, &status)
	now := metav1.NewTime(m.clock.Now())
	podstatus.CarryTransitionTimes(old, &status, now.Time)
	switch {
	case old.StartTime != nil && !old.StartTime.IsZero():
		status.StartTime = old.StartTime.DeepCopy()
	case status.StartTime == nil || status.StartTime.IsZero():
		status.StartTime = &now
	}
	if len(status.VolumeHealth) == 0 && len(old.VolumeHealth) > 0 {
		status.VolumeHealth = old.VolumeHealth
	}
	// The API server sets qosClass at creation and never changes it.
	if status.QOSClass == "" {
		status.QOSClass = old.QOSClass
	}
	status.ObservedGeneration = max(status.ObservedGeneration, old.ObservedGeneration)
	normalize(pod, &status)

	kept := pod
	if !m.share {
		kept = pod.DeepCopy()
	}
	if e != nil && sameKubeletStatus(&e.status, &status) {
		hadDeletion := e.pod.DeletionTimestamp != nil
		e.pod = kept
		if kept.DeletionTimestamp != nil && !hadDeletion {
			m.dirty[pod.UID] = struct{}{}
			m.signal()
		}
		return nil
	}
	if e == nil {
		e = &podEntry{}
		m.entries[pod.UID] = e
	}
	e.pod = kept
	e.status = status
	e.version++
	m.dirty[pod.UID] = struct{}{}
	m.signal()
	return nil
}

// signal wakes Run without blocking; one pending wake-up is enough.
func (m *Manager) signal() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}
