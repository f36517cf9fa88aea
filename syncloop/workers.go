package syncloop

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// UpdateType says why a pod worker is asked to run.
type UpdateType int

// Update types.
const (
	// UpdateSync is a periodic or event-driven sync of a known pod.
	UpdateSync UpdateType = iota
	// UpdateCreate is the first sync of a newly admitted pod.
	UpdateCreate
	// UpdateSpec is a sync after the pod's spec or metadata changed.
	UpdateSpec
	// UpdateKill asks the worker to terminate the pod.
	UpdateKill
)

// A pod worker moves each pod through four phases, never backwards:
//
//	syncing --(deleted, removed, terminal, killed)--> terminating --> terminated --> finished
//
// SyncPod runs repeatedly while syncing; SyncTerminatingPod until it
// succeeds; SyncTerminatedPod until it succeeds; then the worker has
// finished and is forgotten once the pod is gone from the configuration.
type workerPhase int

const (
	phaseSyncing workerPhase = iota
	phaseTerminating
	phaseTerminated
	phaseFinished
)

// podUpdate is one request to a worker.
type podUpdate struct {
	Type UpdateType
	// UID names the pod when neither Pod nor Running is set.
	UID    types.UID
	Pod    *v1.Pod
	Mirror *v1.Pod
	// Running is set for pods known only to the runtime (orphans).
	Running *nodekit.Pod
	// GracePeriod, when set on a kill, shortens (never lengthens) the
	// termination grace period.
	GracePeriod *int64
	// Status, on a kill, edits the status recorded before the containers
	// are stopped (an eviction's phase, reason and conditions).
	Status func(*v1.PodStatus)
	// Evict marks the pod evicted: its content may be removed once it has
	// terminated even though its API object stays.
	Evict bool
	// Done, on a kill, is closed once the pod has terminated.
	Done chan struct{}
}

// podSyncer does the work of each phase. Errors are retried with back-off;
// errRetryAfter asks for a retry at a specific time.
type podSyncer interface {
	SyncPod(ctx context.Context, t UpdateType, pod, mirror *v1.Pod, status *nodekit.PodStatus) (terminal bool, err error)
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, status *nodekit.PodStatus, running *nodekit.Pod, grace *int64, edit func(*v1.PodStatus)) error
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod, status *nodekit.PodStatus) error
}

// PodCache is the part of the pod cache workers read. GetNewerThan blocks
// until the cache holds a status of the pod read after min; when ctx is
// already done it must still return such a status if it has one (inline
// workers ask that way, without waiting). pleg.Cache does.
type PodCache interface {
	GetNewerThan(ctx context.Context, uid types.UID, min time.Time) (*nodekit.PodStatus, error)
}

// errRetryAfter asks the worker to run again after a delay without it
// counting as a failure (crash-loop and image-pull back-off).
type errRetryAfter struct {
	after time.Duration
	err   error
}

func (e *errRetryAfter) Error() string { return e.err.Error() }
func (e *errRetryAfter) Unwrap() error { return e.err }

// worker is the state of one pod's worker.
type worker struct {
	uid     types.UID
	phase   workerPhase
	pending *podUpdate // newest request not yet handled; coalesced
	pod     *v1.Pod    // newest spec seen
	mirror  *v1.Pod
	running *nodekit.Pod
	grace   *int64
	// edit is the status edit of the kill that started termination.
	edit func(*v1.PodStatus)
	// evicted is set by a kill with Evict; terminated once the
	// terminating step has succeeded.
	evicted, terminated bool
	// waiters are closed once the pod has terminated.
	waiters []chan struct{}
	// removed is set when the pod left the configuration.
	removed bool
	// busy is true while a goroutine works for this pod or, with inline
	// workers, while a step runs.
	busy bool
	// cancel stops an in-flight SyncPod when a kill arrives.
	cancel   context.CancelFunc
	lastSync time.Time
	// due is when the pod should be synced again (sync tick).
	due time.Time
	// failures counts consecutive errors, for back-off.
	failures int
}

// workers runs one goroutine per pod with pending work (or, inline, runs
// the pending work when asked). Updates to one pod
// are serialized and coalesced: a worker busy with an update picks up only
// the newest pending one afterwards.
type workers struct {
	syncer podSyncer
	cache  PodCache
	clock  clock.Clock
	resync time.Duration
	// backoffBase and backoffMax bound the retry delay after errors.
	backoffBase, backoffMax time.Duration
	metrics                 Metrics
	// inline workers start no goroutines: runPending runs their steps on
	// the caller's goroutine (Config.InlineWorkers).
	inline bool
	// tracer opens a span per step (tracing.go); nil traces nothing.
	tracer trace.Tracer

	mu   sync.Mutex
	pods map[types.UID]*worker
	wg   sync.WaitGroup
}

func newWorkers(s podSyncer, cache PodCache, clk clock.Clock, resync time.Duration, m Metrics, inline bool) *workers {
	return &workers{
		syncer: s, cache: cache, clock: clk, resync: resync, inline: inline,
		backoffBase: time.Second, backoffMax: 2 * time.Minute, metrics: m,
		pods: map[types.UID]*worker{},
	}
}

// Update hands a request to the pod's worker, starting one if needed. It
// never blocks on the work itself.
func (w *workers) Update(ctx context.Context, u podUpdate) {
	uid := updateUID(u)
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.pods[uid]
	if !ok {
		if u.Pod == nil && u.Running == nil {
			if u.Done != nil {
				close(u.Done) // nothing runs under that UID
			}
			return
		}
		wk = &worker{uid: uid}
		w.pods[uid] = wk
	}
	if wk.phase == phaseFinished {
		// A finished pod comes back only as a new create with the same UID
		// (a static pod whose manifest returned); start it afresh.
		if u.Type != UpdateCreate || wk.busy || u.Pod == nil || u.Pod.DeletionTimestamp != nil {
			if u.Done != nil {
				close(u.Done) // it has terminated already
			}
			return
		}
		*wk = worker{uid: uid}
	}
	if u.Pod != nil {
		wk.pod = u.Pod
	}
	if u.Mirror != nil {
		wk.mirror = u.Mirror
	}
	if u.Running != nil {
		wk.running = u.Running
	}
	if wk.pod == nil && wk.running != nil {
		wk.pod = podFromRunning(wk.running)
	}
	// Deciding to terminate happens here, so it is never lost to coalescing.
	kill := u.Type == UpdateKill || (wk.pod != nil && wk.pod.DeletionTimestamp != nil)
	if kill {
		g := u.GracePeriod
		if g == nil && wk.pod != nil && wk.pod.DeletionGracePeriodSeconds != nil {
			g = wk.pod.DeletionGracePeriodSeconds
		}
		if g != nil && (wk.grace == nil || *g < *wk.grace) {
			v := *g
			wk.grace = &v
		}
		if wk.phase == phaseSyncing {
			wk.phase = phaseTerminating
			wk.edit = u.Status
			if wk.cancel != nil {
				wk.cancel() // stop an in-flight sync; termination comes next
			}
		}
		wk.evicted = wk.evicted || u.Evict
		if u.Done != nil {
			if wk.terminated {
				close(u.Done)
			} else {
				wk.waiters = append(wk.waiters, u.Done)
			}
		}
	}
	t := u.Type
	if wk.pending != nil && wk.pending.Type == UpdateCreate {
		t = UpdateCreate // a create not yet handled stays a create
	}
	wk.pending = &podUpdate{Type: t}
	w.startLocked(ctx, wk)
}

// startLocked starts the worker goroutine if none runs. Inline workers
// start nothing: the pending update waits for runPending.
func (w *workers) startLocked(ctx context.Context, wk *worker) {
	if wk.busy || w.inline {
		return
	}
	wk.busy = true
	w.wg.Add(1)
	go w.run(ctx, wk)
}

func (w *workers) run(ctx context.Context, wk *worker) {
	defer w.wg.Done()
	logger := klog.FromContext(ctx).WithValues("podUID", wk.uid)
	for {
		w.mu.Lock()
		if wk.pending == nil || ctx.Err() != nil {
			wk.busy = false
			w.mu.Unlock()
			return
		}
		w.stepLocked(ctx, wk, logger)
		w.mu.Unlock()
	}
}

// stepLocked takes the worker's pending update and runs one step of its
// phase, unlocking w.mu for the step itself. It reports whether a step
// ran: an inline worker whose pod has no status newer than its last sync
// keeps its update pending instead.
func (w *workers) stepLocked(ctx context.Context, wk *worker, logger klog.Logger) bool {
	u := *wk.pending
	wk.pending = nil
	phase, pod, mirror, running, grace, since := wk.phase, wk.pod, wk.mirror, wk.running, wk.grace, wk.lastSync
	u.Status = wk.edit
	syncCtx, cancel := context.WithCancel(ctx)
	wk.cancel = cancel
	w.mu.Unlock()

	began := w.clock.Now()
	err := w.step(syncCtx, phase, u, pod, mirror, running, grace, since, logger)
	if !errors.Is(err, errNotFresh) {
		w.metrics.ObservePodWorker(operationType(phase, u.Type), w.clock.Since(began))
	}
	// Whether a kill or the agent stopping interrupted the step; asked
	// before cancel, after which syncCtx.Err() is always set.
	interrupted := syncCtx.Err() != nil
	cancel()

	w.mu.Lock()
	wk.cancel = nil
	if errors.Is(err, errNotFresh) {
		w.repend(wk, u.Type)
		return false
	}
	wk.lastSync = w.clock.Now()
	var retry *errRetryAfter
	switch {
	case err == nil:
		w.succeededLocked(wk, phase, u.Type)
	case errors.As(err, &retry):
		wk.due = wk.lastSync.Add(retry.after)
	case interrupted:
		// Cancelled by a kill (the pending update carries on) or by
		// the agent stopping.
	default:
		wk.failures++
		wk.due = wk.lastSync.Add(w.retryDelay(wk.failures))
		logger.Error(err, "Pod worker sync failed; will retry", "phase", phaseName(phase), "retryIn", wk.due.Sub(wk.lastSync))
	}
	return true
}

// succeededLocked moves a worker on after a step without error.
func (w *workers) succeededLocked(wk *worker, phase workerPhase, t UpdateType) {
	wk.failures = 0
	wk.due = wk.lastSync.Add(w.resync)
	if next, advanced := advance(phase, wk.phase, t); advanced {
		wk.phase = next
	}
	if phase == phaseTerminating && !wk.terminated {
		wk.terminated = true
		for _, ch := range wk.waiters {
			close(ch)
		}
		wk.waiters = nil
	}
	if wk.phase != phase && wk.phase != phaseFinished {
		wk.pending = &podUpdate{Type: UpdateSync} // go on to the next phase now
	}
}

// repend puts back an update that could not run yet, merged with one that
// arrived meanwhile (a create stays a create).
func (w *workers) repend(wk *worker, t UpdateType) {
	switch {
	case wk.pending == nil:
		wk.pending = &podUpdate{Type: t}
	case t == UpdateCreate:
		wk.pending.Type = UpdateCreate
	}
}

// advance returns the phase after a successful step. A kill that arrived
// during the step already moved the phase; it is kept.
func advance(ran, now workerPhase, _ UpdateType) (workerPhase, bool) {
	if now != ran {
		return now, false
	}
	switch ran {
	case phaseTerminating:
		return phaseTerminated, true
	case phaseTerminated:
		return phaseFinished, true
	}
	return ran, false
}

func (w *workers) step(ctx context.Context, phase workerPhase, u podUpdate, pod, mirror *v1.Pod, running *nodekit.Pod, grace *int64, since time.Time, logger klog.Logger) (err error) {
	ctx = klog.NewContext(ctx, logger)
	status, err := w.cachedStatus(ctx, pod.UID, since)
	if err != nil {
		return err
	}
	if w.tracer != nil {
		var span trace.Span
		ctx, span = startStepSpan(ctx, w.tracer, phase, u.Type, pod)
		defer func() { endStepSpan(span, err) }()
	}
	switch phase {
	case phaseSyncing:
		terminal, err := w.syncer.SyncPod(ctx, u.Type, pod, mirror, status)
		if err == nil && terminal {
			w.mu.Lock()
			if wk := w.pods[pod.UID]; wk != nil && wk.phase == phaseSyncing {
				wk.phase = phaseTerminating
				wk.pending = &podUpdate{Type: UpdateSync}
			}
			w.mu.Unlock()
		}
		return err
	case phaseTerminating:
		return w.syncer.SyncTerminatingPod(ctx, pod, status, running, grace, u.Status)
	case phaseTerminated:
		return w.syncer.SyncTerminatedPod(ctx, pod, status)
	}
	return nil
}

func (w *workers) retryDelay(failures int) time.Duration {
	d := w.backoffBase
	for i := 1; i < failures && d < w.backoffMax; i++ {
		d *= 2
	}
	return min(d, w.backoffMax)
}

// Terminated reports whether the pod's worker has finished terminating it
// and whether the pod was evicted. known is false for a pod without a
// worker.
func (w *workers) Terminated(uid types.UID) (terminated, evicted, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.pods[uid]
	if !ok {
		return false, false, false
	}
	return wk.terminated, wk.evicted, true
}

// Due returns the pods whose next sync time has passed and that are not
// busy, for the sync tick.
func (w *workers) Due(now time.Time) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []types.UID
	for uid, wk := range w.pods {
		if wk.phase != phaseFinished && !wk.busy && !wk.due.IsZero() && !now.Before(wk.due) {
			out = append(out, uid)
		}
	}
	return out
}

// Phase reports a pod's worker phase and whether it has a worker.
func (w *workers) Phase(uid types.UID) (workerPhase, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.pods[uid]
	if !ok {
		return 0, false
	}
	return wk.phase, true
}

// Busy reports whether a pod with this full name other than uid still has
// a worker that has not finished (a static pod's older version).
func (w *workers) Busy(name string, uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, wk := range w.pods {
		if id != uid && wk.pod != nil && podutil.FullName(wk.pod) == name && wk.phase != phaseFinished {
			return true
		}
	}
	return false
}

// Forget drops the workers of pods that are not desired any more and have
// finished. It returns the UIDs it still knows.
func (w *workers) Forget(desired map[types.UID]bool) map[types.UID]workerPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[types.UID]workerPhase{}
	for uid, wk := range w.pods {
		if !desired[uid] {
			wk.removed = true
			if wk.phase == phaseFinished && !wk.busy {
				delete(w.pods, uid)
				continue
			}
		}
		out[uid] = wk.phase
	}
	return out
}

// Wait blocks until every worker goroutine has returned (after ctx ends).
func (w *workers) Wait() { w.wg.Wait() }

func updateUID(u podUpdate) types.UID {
	if u.Pod != nil {
		return u.Pod.UID
	}
	if u.Running != nil {
		return u.Running.ID
	}
	return u.UID
}

// podFromRunning makes a minimal pod for a runtime pod with no spec.
func podFromRunning(r *nodekit.Pod) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = r.ID, r.Name, r.Namespace
	return p
}

func phaseName(p workerPhase) string {
	switch p {
	case phaseSyncing:
		return "sync"
	case phaseTerminating:
		return "terminating"
	case phaseTerminated:
		return "terminated"
	}
	return "finished"
}

// operationType is upstream's operation_type label of a pod worker step:
// the update's type, or "terminated" for the last phase.
func operationType(phase workerPhase, t UpdateType) string {
	if phase == phaseTerminated {
		return "terminated"
	}
	switch t {
	case UpdateCreate:
		return "create"
	case UpdateSpec:
		return "update"
	case UpdateKill:
		return "kill"
	}
	return "sync"
}
