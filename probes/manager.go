package probes

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// updatesCapacity is the buffer of the Updates channel.
const updatesCapacity = 20

// Config wires a Manager. Status is required.
type Config struct {
	// Status gives each pod's current API status (container IDs, states,
	// start times, pod IP).
	Status StatusGetter
	// Execer runs exec probes. Nil makes every exec probe error (recorded
	// as an Unhealthy event), which counts as no result.
	Execer Execer
	// Recorder receives Unhealthy and ProbeWarning events. Nil drops them.
	Recorder EventRecorder
	// Dialer opens the connections of httpGet, tcpSocket and grpc probes.
	// Nil means a net.Dialer with a one-second SO_LINGER, as upstream.
	Dialer Dialer
	// Clock drives the probe periods and initial delays. Nil means the real
	// clock.
	Clock clock.WithTicker
	// Jitter, when not nil, returns a random number in [0, 1). While the
	// manager is younger than a probe's period, a new worker first waits
	// that fraction of the period, so that the probes of containers adopted
	// after an agent restart do not all fire at once (as upstream). Nil
	// means no wait; rand.Float64 from math/rand/v2 is a fine value.
	Jitter func() float64
	// Metrics receives each probe's result and duration
	// (prober_probe_total, prober_probe_duration_seconds;
	// server.ProbeMetrics satisfies it). Nil discards them.
	Metrics Metrics
}

// Metrics receives what upstream's prober reports. probeType is
// Liveness, Readiness or Startup; result successful, failed or unknown.
type Metrics interface {
	ObserveProbe(probeType, result, namespace, pod, podUID, container string, d time.Duration)
	// ForgetProbe drops the series of a probe whose worker stopped.
	ForgetProbe(probeType, namespace, pod, podUID, container string)
}

type noMetrics struct{}

func (noMetrics) ObserveProbe(string, string, string, string, string, string, time.Duration) {}
func (noMetrics) ForgetProbe(string, string, string, string, string)                         {}

// Manager runs one worker per (pod, container, probe kind) and keeps the
// last reported result of each, keyed by container ID. It does not act on
// results: the sync loop reads them with Result when it syncs a pod, and
// Updates tells it which pod to sync.
//
// All methods are safe for concurrent use and do not block on probes.
type Manager struct {
	status  StatusGetter
	clock   clock.WithTicker
	jitter  func() float64
	metrics Metrics
	prober  *prober
	start   time.Time

	updates chan types.UID
	wake    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	workers map[workerKey]*worker
	results map[resultKey]entry
	pending []types.UID
	queued  map[types.UID]bool
	closed  bool
}

type workerKey struct {
	uid       types.UID
	container string
	kind      Kind
}

type resultKey struct {
	kind Kind
	id   nodekit.ContainerID
}

type entry struct {
	result Result
	// w is the worker that reported it.
	w *worker
}

// NewManager checks cfg and returns a Manager with no workers.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Status == nil {
		return nil, errors.New("probes: Config.Status is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	var rec EventRecorder = discardEvents{}
	if cfg.Recorder != nil {
		rec = cfg.Recorder
	}
	var metrics Metrics = noMetrics{}
	if cfg.Metrics != nil {
		metrics = cfg.Metrics
	}
	var d Dialer = defaultDialer()
	if cfg.Dialer != nil {
		d = cfg.Dialer
	}
	return &Manager{
		status:  cfg.Status,
		clock:   cfg.Clock,
		jitter:  cfg.Jitter,
		metrics: metrics,
		prober:  &prober{exec: cfg.Execer, dialer: d, transport: newTransport(d), events: rec},
		start:   cfg.Clock.Now(),

		updates: make(chan types.UID, updatesCapacity),
		wake:    make(chan struct{}, 1),
		workers: map[workerKey]*worker{},
		results: map[resultKey]entry{},
		queued:  map[types.UID]bool{},
	}, nil
}

// probed lists the containers of pod that may have probes: the regular
// containers and the restartable (sidecar) init containers.
func probed(pod *v1.Pod) []*v1.Container {
	var cs []*v1.Container
	for i := range pod.Spec.Containers {
		cs = append(cs, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podutil.IsSidecar(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// AddPod starts a worker for every probe of the pod's regular and sidecar
// containers that has none yet; for existing workers it only records the
// newer pod (its deletion timestamp matters). It is idempotent and meant to
// be called on every sync of a running pod. Workers outlive ctx (a pod's
// sync context ends when the pod starts terminating, and readiness must go
// on): they stop on RemovePod, CleanupPods, StopLivenessAndStartup, when
// the pod reaches a terminal phase, or when Run returns. ctx provides the
// logger. After Run has returned, AddPod does nothing.
func (m *Manager) AddPod(ctx context.Context, pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, c := range probed(pod) {
		for _, kind := range []Kind{Startup, Readiness, Liveness} {
			if kindSpec(kind, c) == nil {
				continue
			}
			key := workerKey{uid: pod.UID, container: c.Name, kind: kind}
			if w := m.workers[key]; w != nil {
				w.pod.Store(pod)
				continue
			}
			w := newWorker(m, key, pod, c)
			m.workers[key] = w
			wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			w.cancel = cancel
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				w.run(wctx)
			}()
		}
	}
}

// RemovePod stops the pod's workers, cancelling probes in flight, and
// forgets their results. It is idempotent and does not wait for the workers
// to return.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(func(uid types.UID) bool { return uid == pod.UID })
}

// CleanupPods does RemovePod for every pod whose UID is not in desired.
func (m *Manager) CleanupPods(desired map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(func(uid types.UID) bool { return !desired[uid] })
}

func (m *Manager) forgetLocked(match func(types.UID) bool) {
	for key, w := range m.workers {
		if match(key.uid) {
			m.stopLocked(w, false)
		}
	}
	for key, e := range m.results {
		if match(e.w.key.uid) {
			delete(m.results, key)
		}
	}
}

// StopLivenessAndStartup stops the pod's liveness and startup workers, as
// upstream does when a pod starts terminating: a failing liveness probe must
// not restart a container that is being stopped. Liveness results are
// forgotten (no result means no kill); a startup Success is kept, so a
// started container stays started and its readiness, which keeps running,
// still counts. A later AddPod starts them again.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.workers {
		if key.uid == pod.UID && (key.kind == Liveness || key.kind == Startup) {
			m.stopLocked(w, key.kind == Startup)
		}
	}
}

// stopLocked cancels w and forgets its results (a startup Success is kept
// when keepStarted is set). It is idempotent.
func (m *Manager) stopLocked(w *worker, keepStarted bool) {
	if w.stopped {
		return
	}
	w.stopped = true
	if w.cancel != nil {
		w.cancel()
	}
	if pod := w.pod.Load(); pod != nil {
		m.metrics.ForgetProbe(kindTitle(w.key.kind), pod.Namespace, pod.Name, string(pod.UID), w.key.container)
	}
	if m.workers[w.key] == w {
		delete(m.workers, w.key)
	}
	for key, e := range m.results {
		if e.w == w && (!keepStarted || e.result != Success) {
			delete(m.results, key)
		}
	}
}

// exited is called by a worker that returned on its own (pod terminal,
// container not restarting): as upstream, its results go with it.
func (m *Manager) exited(w *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked(w, false)
}

// Result returns the last reported result of the container's probe of the
// given kind, and whether there is one. Readiness starts at Failure,
// liveness at Success and startup at Unknown when a worker first sees a
// container; a container without that probe has no result.
//
// As upstream, asking for a readiness result other than Success also asks
// that container's readiness worker to probe now rather than at its next
// period (it never blocks). It is how a container becomes ready promptly
// once the loop sees it running.
func (m *Manager) Result(kind Kind, id nodekit.ContainerID) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.results[resultKey{kind: kind, id: id}]
	if !ok {
		return Unknown, false
	}
	if kind == Readiness && e.result != Success {
		e.w.poke()
	}
	return e.result, true
}

// Updates delivers the UID of a pod whenever one of its results changes
// (including the first result of a new container), so the loop can sync
// it. Changes for a pod not yet delivered are coalesced into one UID, so a
// slow reader never blocks a worker and loses nothing but duplicates. Run
// must be running for anything to be delivered. The channel is never
// closed.
func (m *Manager) Updates() <-chan types.UID { return m.updates }

// Run delivers Updates until ctx is done, then stops every worker, waits
// for them to return and returns ctx.Err(). Call it once.
func (m *Manager) Run(ctx context.Context) error {
	defer m.shutdown()
	for {
		if uid, ok := m.nextUpdate(); ok {
			select {
			case m.updates <- uid:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		select {
		case <-m.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *Manager) shutdown() {
	m.mu.Lock()
	m.closed = true
	for _, w := range m.workers {
		m.stopLocked(w, false)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Manager) nextUpdate() (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 {
		return "", false
	}
	uid := m.pending[0]
	m.pending = m.pending[1:]
	delete(m.queued, uid)
	return uid, true
}

// set records a result of w for its current container and queues an
// update when it changed. Results of a stopped worker are dropped.
func (m *Manager) set(w *worker, r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.stopped {
		return
	}
	key := resultKey{kind: w.key.kind, id: w.id}
	prev, ok := m.results[key]
	m.results[key] = entry{result: r, w: w}
	if ok && prev.result == r {
		return
	}
	if !m.queued[w.key.uid] {
		m.queued[w.key.uid] = true
		m.pending = append(m.pending, w.key.uid)
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	if w.key.kind == Startup && r == Success {
		// The container just started: let its readiness probe run now
		// rather than up to a period later.
		if rw := m.workers[workerKey{uid: w.key.uid, container: w.key.container, kind: Readiness}]; rw != nil {
			rw.poke()
		}
	}
}

// remove forgets w's result for container id.
func (m *Manager) remove(w *worker, id nodekit.ContainerID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := resultKey{kind: w.key.kind, id: id}
	if e, ok := m.results[key]; ok && e.w == w {
		delete(m.results, key)
	}
}

// get returns the result of kind for container id, for a worker's gating.
func (m *Manager) get(kind Kind, id nodekit.ContainerID) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.results[resultKey{kind: kind, id: id}]
	return e.result, ok
}

func logger(ctx context.Context, w *worker) klog.Logger {
	return klog.FromContext(ctx).WithValues("probeType", w.key.kind, "pod", klog.KObj(w.pod.Load()), "containerName", w.key.container)
}
