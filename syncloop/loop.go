package syncloop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/poddir"
	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/pleg"
)

// Config wires a Loop. Runtime, Cache, Status and Updates are required.
type Config struct {
	Runtime nodekit.Runtime
	// Pods is the pod store the loop keeps: built first (NewPodStore) and
	// handed to its readers too (statusmgr's Pods and Mirrors) and to the
	// parts built before the loop that need its view of the pods
	// (PodStore.ActivePods, KillPod, ...). Nil means the loop makes its
	// own, readable through Loop.Store. A store serves one loop.
	Pods *PodStore
	// Cache is the PLEG's pod cache.
	Cache PodCache
	// Status receives the computed pod statuses.
	Status StatusManager
	// Updates is the merged pod stream (package podconfig).
	Updates <-chan nodekit.PodUpdate
	// SourcesReady reports whether every source has been seen once (the
	// merger's view). The loop counts the sources ready once it has
	// handled an update after that (podconfig sends one for every
	// source's first list, empty or not); until then nothing is removed.
	// Nil means always ready.
	SourcesReady func() bool
	// Events is the PLEG's event stream. Nil means none (sync tick only).
	Events <-chan *pleg.Event
	// ProbeUpdates wakes a pod's worker when a probe result changes.
	ProbeUpdates <-chan types.UID
	// Probes gives the last probe results (readiness, liveness, startup).
	Probes ProbeResults
	// ProbeWorkers starts and stops the probes of the pods the loop runs.
	ProbeWorkers ProbeWorkers
	// Hooks runs postStart and preStop handlers; nil skips them.
	Hooks HookRunner
	// Health reports whether the runtime and the PLEG are healthy; while it
	// returns an error the loop backs off instead of syncing.
	Health func(ctx context.Context) error
	// Admitters run in order on every new pod; the first rejection wins.
	Admitters []nodekit.Admitter

	Mirror  MirrorClient
	Volumes VolumeManager
	// DynamicResources prepares pods' DRA claims; nil prepares none.
	DynamicResources DynamicResources
	Secrets          SecretGetter
	Recorder         EventRecorder
	// Options resolves per-container settings (env, mounts).
	Options nodekit.ContainerOptionsFunc
	// Sandbox resolves per-pod sandbox settings (DNS, hostname, cgroup).
	Sandbox func(ctx context.Context, pod *v1.Pod) (nodekit.SandboxOptions, error)
	// ContainerHash detects spec changes that need a new container; nil
	// disables the check.
	ContainerHash func(*v1.Container) uint64

	// RootDir holds pod directories (RootDir/pods/UID). Required.
	RootDir string
	// Mounts lists the host's mount points; housekeeping leaves a pod
	// directory alone while anything is mounted below it. Nil reads
	// /proc/self/mountinfo (internal/fsutil.MountPaths); a main with a
	// volume manager hands its Mounter's listing (fullagent does).
	Mounts MountLister
	// Listing, when set, is what Housekeeping lists the running pods from
	// instead of Runtime: a lister that may answer from a listing a moment
	// old (runtimecache.Cache, which the PLEG refreshes at every relist).
	// Upstream's housekeeping reads its runtime cache too, but forces it
	// fresh first (package runtimecache says why that is not needed here).
	// A stale answer is safe: a pod started since is one the loop knows (it
	// is not killed and its directory stays), a pod stopped since only keeps
	// its volumes and directory until the next pass, and one stopped and
	// forgotten since gets a redundant kill. Nil means Runtime.
	Listing PodLister
	// NodeIPs are reported as hostIP(s) and as podIPs of hostNetwork pods.
	NodeIPs []string
	Clock   clock.WithTicker
	// SyncPeriod is how often running pods are resynced (default 1 min);
	// the sync tick (1 s) and housekeeping (2 s) periods are fixed as
	// upstream.
	SyncPeriod time.Duration
	// Metrics receives pod worker durations and pod start times
	// (server.AgentMetrics satisfies it). Nil discards them.
	Metrics Metrics
	// InlineWorkers runs the pod workers on the caller's goroutine instead
	// of one goroutine per pod: Drain runs every pending step, and Run
	// runs them after each event it handles. A pod's step then never waits
	// for a fresh runtime status; one that has none newer than its last
	// sync (a new pod: none at all) stays pending until the PLEG has
	// relisted at a later time. Tests drive such a
	// loop step by step with Drain, with no goroutines and no sleeps.
	InlineWorkers bool

	// Resizer carries out in-place resizes (package allocation). Nil: not
	// acted on.
	Resizer Resizer
	// Relister, if set, is asked to relist a pod right after a sync that
	// changed it (the PLEG: pleg.New's result). Nil: the periodic relist
	// brings the change.
	Relister Relister
	// ResourceHealth fills the regular containers' allocatedResourcesStatus,
	// each in turn (upstream: device plugins, then DRA). Empty: none is
	// reported. A health change should wake the pod through ProbeUpdates.
	ResourceHealth []ResourceHealth
	// RecursiveReadOnly tells whether a pod's runtime handler supports
	// recursive read-only mounts, for containerStatuses[].volumeMounts'
	// recursiveReadOnly (Enabled where a mount is made so); nil: none.
	// Give it what volumemgr.Config.RecursiveReadOnly is given.
	RecursiveReadOnly RecursiveReadOnlyChecker

	// UpdateObservers are told of each spec update of a known pod (not a
	// mirror), with the pod as the loop held it before, ahead of the
	// pod's worker: upstream's pod-update hooks (the declared-features
	// check of an update, package admission's DeclaredFeatures).
	UpdateObservers []UpdateObserver

	// TracerProvider, when set, traces each pod worker step in a span
	// named as upstream's (syncPod, syncTerminatingPod,
	// syncTerminatedPod) carrying the pod's UID, name and namespace; the
	// step's runtime calls run under it. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Loop is the main loop of a node agent.
type Loop struct {
	cfg     Config
	store   *PodStore
	workers *workers
	syncer  *syncer
	clock   clock.WithTicker

	// waiting holds static pods whose older version (same full name,
	// another UID) is still terminating; they start once it has finished,
	// as upstream, so two never run at once.
	waitMu  sync.Mutex
	waiting map[types.UID]*v1.Pod

	// sourcesHandled is set once the loop has handled an update after
	// every source had been seen: only then is a pod it does not know
	// really gone (as upstream marks a source seen after handling it).
	sourcesHandled atomic.Bool

	// updatesClosed is set once Drain has seen the update channel closed.
	updatesClosed bool

	healthMu     sync.Mutex
	lastIterate  time.Time
	runtimeErr   error
	healthBackup time.Duration
}

// New checks the configuration and returns a loop ready to Run.
func New(cfg Config) (*Loop, error) {
	var missing []string
	if cfg.Runtime == nil {
		missing = append(missing, "Runtime")
	}
	if cfg.Cache == nil {
		missing = append(missing, "Cache")
	}
	if cfg.Status == nil {
		missing = append(missing, "Status")
	}
	if cfg.Updates == nil {
		missing = append(missing, "Updates")
	}
	if cfg.RootDir == "" {
		missing = append(missing, "RootDir")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("syncloop: Config is missing %s", strings.Join(missing, ", "))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = time.Minute
	}
	if cfg.Listing == nil {
		cfg.Listing = cfg.Runtime
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.SourcesReady == nil {
		cfg.SourcesReady = func() bool { return true }
	}
	rec := cfg.Recorder
	if rec == nil {
		rec = discardEvents{}
	}
	s := &syncer{
		runtime: cfg.Runtime, status: cfg.Status, mirror: cfg.Mirror, volumes: cfg.Volumes, dra: cfg.DynamicResources,
		secrets: cfg.Secrets, events: rec, probes: cfg.Probes, workers: cfg.ProbeWorkers, hooks: cfg.Hooks, options: cfg.Options, sandbox: cfg.Sandbox,
		hash: cfg.ContainerHash, clock: cfg.Clock, rootDir: cfg.RootDir, nodeIPs: cfg.NodeIPs, metrics: cfg.Metrics, resize: cfg.Resizer,
		health: cfg.ResourceHealth, relist: cfg.Relister, rro: cfg.RecursiveReadOnly,
		crash:   newBackoff(cfg.Clock, backoffInitial, backoffMax),
		pull:    newBackoff(cfg.Clock, backoffInitial, backoffMax),
		reasons: map[types.UID]map[string]waitReason{},
	}
	if cfg.Pods == nil {
		cfg.Pods = NewPodStore()
	}
	w := newWorkers(s, cfg.Cache, cfg.Clock, cfg.SyncPeriod, cfg.Metrics, cfg.InlineWorkers)
	if cfg.TracerProvider != nil {
		w.tracer = cfg.TracerProvider.Tracer(instrumentationScope)
	}
	l := &Loop{
		cfg: cfg, store: cfg.Pods, syncer: s, clock: cfg.Clock, waiting: map[types.UID]*v1.Pod{},
		workers: w,
	}
	if !cfg.Pods.attach(l) {
		return nil, errors.New("syncloop: Config.Pods is the pod store of another Loop")
	}
	return l, nil
}

// Run runs the loop until ctx is done, then waits for the pod workers to
// return. Containers are left running: stopping the agent is not a reason
// to stop pods.
func (l *Loop) Run(ctx context.Context) error {
	syncTick := l.clock.NewTicker(time.Second)
	defer syncTick.Stop()
	houseTick := l.clock.NewTicker(2 * time.Second)
	defer houseTick.Stop()
	for l.iterate(ctx, syncTick.C(), houseTick.C()) {
		if l.workers.inline {
			l.workers.runPending(ctx)
		}
	}
	l.workers.Wait()
	return ctx.Err()
}

// Iterate handles one event from any of the loop's inputs (blocking until
// one arrives) and reports false when ctx is done or the update channel is
// closed. The sync and housekeeping ticks are driven by the caller through
// SyncDue and Housekeeping.
func (l *Loop) Iterate(ctx context.Context) bool {
	return l.iterate(ctx, nil, nil)
}

func (l *Loop) iterate(ctx context.Context, syncTick, houseTick <-chan time.Time) bool {
	logger := klog.FromContext(ctx)
	if err := l.checkHealth(ctx); err != nil {
		// Back off rather than spin while the runtime is down.
		select {
		case <-ctx.Done():
			return false
		case <-l.clock.After(l.nextHealthBackoff()):
		}
		return true
	}
	l.healthMu.Lock()
	l.healthBackup = 0
	l.lastIterate = l.clock.Now()
	l.healthMu.Unlock()

	select {
	case <-ctx.Done():
		return false
	case u, ok := <-l.cfg.Updates:
		if !ok {
			logger.Info("Pod update channel closed; stopping the sync loop")
			return false
		}
		l.HandleUpdate(ctx, u)
	case ev := <-l.cfg.Events:
		if ev != nil {
			l.syncUID(ctx, ev.PodID)
		}
	case uid := <-l.cfg.ProbeUpdates:
		l.syncUID(ctx, uid)
	case <-syncTick:
		l.SyncDue(ctx)
	case <-houseTick:
		l.Housekeeping(ctx)
	}
	return true
}

func (l *Loop) checkHealth(ctx context.Context) error {
	if l.cfg.Health == nil {
		return nil
	}
	err := l.cfg.Health(ctx)
	l.healthMu.Lock()
	changed := (err == nil) != (l.runtimeErr == nil)
	l.runtimeErr = err
	l.healthMu.Unlock()
	if err != nil && changed {
		klog.FromContext(ctx).Error(err, "Skipping pod synchronization: the container runtime is not healthy")
	}
	return err
}

func (l *Loop) nextHealthBackoff() time.Duration {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	if l.healthBackup == 0 {
		l.healthBackup = 100 * time.Millisecond
	} else {
		l.healthBackup = min(2*l.healthBackup, 5*time.Second)
	}
	return l.healthBackup
}

// Healthy reports an error when the loop is blocked on an unhealthy
// runtime, for /healthz.
func (l *Loop) Healthy() error {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	return l.runtimeErr
}

// HandleUpdate applies one pod update: admission for new pods, then work
// for their workers.
func (l *Loop) HandleUpdate(ctx context.Context, u nodekit.PodUpdate) {
	defer func() {
		if !l.sourcesHandled.Load() && l.cfg.SourcesReady() {
			l.sourcesHandled.Store(true)
		}
	}()
	switch u.Op {
	case nodekit.ADD:
		l.handleAdd(ctx, u.Pods)
	case nodekit.UPDATE, nodekit.DELETE:
		for _, p := range u.Pods {
			old, known := l.store.get(p.UID)
			l.store.set(p)
			if podutil.IsMirror(p) {
				if sp := l.store.staticFor(p); sp != nil {
					l.dispatch(ctx, sp, UpdateSpec)
				}
				continue
			}
			if known && u.Op == nodekit.UPDATE {
				for _, o := range l.cfg.UpdateObservers {
					o.ObservePodUpdate(ctx, old, p)
				}
			}
			l.dispatch(ctx, p, UpdateSpec)
		}
	case nodekit.REMOVE:
		for _, p := range u.Pods {
			l.store.remove(p)
			if podutil.IsMirror(p) {
				if sp := l.store.staticFor(p); sp != nil {
					l.dispatch(ctx, sp, UpdateSync) // recreate the mirror
				}
				continue
			}
			l.workers.Update(ctx, podUpdate{Type: UpdateKill, Pod: p})
		}
	case nodekit.RECONCILE:
		for _, p := range u.Pods {
			l.store.set(p)
			if !podutil.IsMirror(p) && (len(p.Spec.ReadinessGates) > 0 || p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded) {
				l.dispatch(ctx, p, UpdateSync)
			}
		}
	case nodekit.SET:
		klog.FromContext(ctx).Error(nil, "The sync loop takes incremental updates; SET must be merged by podconfig first", "source", u.Source)
	default:
		klog.FromContext(ctx).Error(nil, "Unknown pod update op; ignored", "op", u.Op, "source", u.Source)
	}
}

func (l *Loop) handleAdd(ctx context.Context, pods []*v1.Pod) {
	pods = append([]*v1.Pod(nil), pods...)
	sortByCreation(pods)
	// The whole batch is known before the first admission, so a resource
	// manager asked for the pods that may still run (an agent restart's
	// batch) does not release what a later pod of the batch holds.
	for _, p := range pods {
		l.store.set(p)
	}
	for _, p := range pods {
		if podutil.IsMirror(p) {
			if sp := l.store.staticFor(p); sp != nil {
				l.dispatch(ctx, sp, UpdateSync)
			}
			continue
		}
		l.addPod(ctx, p)
	}
}

// addPod admits a new pod and starts its worker, unless it is a static pod
// whose previous version is still terminating.
func (l *Loop) addPod(ctx context.Context, p *v1.Pod) {
	_, known := l.workers.Phase(p.UID)
	if !known && podutil.IsStatic(p) && l.workers.Busy(podutil.FullName(p), p.UID) {
		l.waitMu.Lock()
		l.waiting[p.UID] = p
		l.waitMu.Unlock()
		return
	}
	if !known && !isTerminal(p) && p.DeletionTimestamp == nil {
		if d := l.admit(ctx, p); !d.Admit {
			l.reject(ctx, p, d)
			return
		}
	}
	l.dispatch(ctx, p, UpdateCreate)
}

// startWaiting starts the static pods whose predecessors have finished.
func (l *Loop) startWaiting(ctx context.Context) {
	l.waitMu.Lock()
	var ready []*v1.Pod
	for uid, p := range l.waiting {
		if cur, ok := l.store.get(uid); !ok || cur != p {
			delete(l.waiting, uid) // removed or replaced meanwhile
			if ok {
				ready = append(ready, cur)
			}
			continue
		}
		if !l.workers.Busy(podutil.FullName(p), uid) {
			delete(l.waiting, uid)
			ready = append(ready, p)
		}
	}
	l.waitMu.Unlock()
	for _, p := range ready {
		l.addPod(ctx, p)
	}
}

// admit runs the admission chain against the pods already admitted and
// still active.
func (l *Loop) admit(ctx context.Context, pod *v1.Pod) nodekit.Decision {
	if len(l.cfg.Admitters) == 0 {
		return nodekit.Admitted
	}
	req := nodekit.AdmitRequest{Pod: pod, Pods: l.ActivePods()}
	for _, a := range l.cfg.Admitters {
		if d := a.Admit(ctx, req); !d.Admit {
			return d
		}
	}
	return nodekit.Admitted
}

// reject marks a pod Failed with the admission reason, as upstream.
func (l *Loop) reject(ctx context.Context, pod *v1.Pod, d nodekit.Decision) {
	l.syncer.events.Eventf(pod, v1.EventTypeWarning, d.Reason, "%s", d.Message)
	st := *pod.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = v1.PodFailed, d.Reason, "Pod was rejected: "+d.Message
	l.syncer.setStatus(ctx, pod, st)
	if err := l.cfg.Status.PodResourcesReclaimed(pod.UID); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to mark a rejected pod reclaimed", "pod", klog.KObj(pod))
	}
}

// ActivePods returns the admitted pods that may still run: not terminal,
// not finished terminating.
func (l *Loop) ActivePods() []*v1.Pod {
	var out []*v1.Pod
	for _, p := range l.store.all() {
		phase, known := l.workers.Phase(p.UID)
		if !known || phase != phaseSyncing {
			continue
		}
		if l.statusTerminal(p.UID) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// SourcesReady reports whether every source has been seen and the loop
// has handled their pods (admitted the initial batch of each). Until then
// nothing the loop does not know is removed, and resource managers keep
// what running containers hold.
func (l *Loop) SourcesReady() bool { return l.sourcesHandled.Load() }

// NotTerminatedPods returns the pods that may still run: admitted and
// still syncing, or waiting for admission (the rest of a batch being
// admitted, a static pod waiting for its predecessor), unless terminal.
// Resource managers (devices) keep what these pods hold.
func (l *Loop) NotTerminatedPods() []*v1.Pod {
	var out []*v1.Pod
	for _, p := range l.store.all() {
		if isTerminal(p) || p.DeletionTimestamp != nil && !l.known(p.UID) {
			continue
		}
		if phase, known := l.workers.Phase(p.UID); known && phase != phaseSyncing {
			continue
		}
		if l.statusTerminal(p.UID) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// statusTerminal reports whether the newest status the agent holds for
// the pod has a terminal phase.
func (l *Loop) statusTerminal(uid types.UID) bool {
	var phase v1.PodPhase
	if pg, ok := l.cfg.Status.(PhaseGetter); ok {
		phase, _ = pg.GetPodPhase(uid)
	} else if st, ok := l.cfg.Status.GetPodStatus(uid); ok {
		phase = st.Phase
	}
	return phase == v1.PodFailed || phase == v1.PodSucceeded
}

func (l *Loop) known(uid types.UID) bool {
	_, ok := l.workers.Phase(uid)
	return ok
}

func isTerminal(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded
}

func (l *Loop) dispatch(ctx context.Context, pod *v1.Pod, t UpdateType) {
	if phase, known := l.workers.Phase(pod.UID); !known && t != UpdateCreate {
		// Never admitted (rejected): it never ran, so once deleted its
		// object may go at once.
		if pod.DeletionTimestamp != nil {
			_ = l.cfg.Status.PodResourcesReclaimed(pod.UID)
		}
		return
	} else if known && phase == phaseFinished && t != UpdateCreate {
		return
	}
	l.workers.Update(ctx, podUpdate{Type: t, Pod: pod, Mirror: l.store.mirrorOf(pod)})
}

func (l *Loop) syncUID(ctx context.Context, uid types.UID) {
	if p, ok := l.store.get(uid); ok {
		l.dispatch(ctx, p, UpdateSync)
	}
}

// Store returns the loop's pod store (Config.Pods, or the one it made).
func (l *Loop) Store() *PodStore { return l.store }

// Pods returns every pod the agent was told to run (terminated ones
// included until they are removed; mirror pods excluded), oldest first.
func (l *Loop) Pods() []*v1.Pod { return l.store.all() }

// GetPodByUID returns a pod the loop was told to run (not a mirror pod).
func (l *Loop) GetPodByUID(uid types.UID) (*v1.Pod, bool) { return l.store.get(uid) }

// GetMirrorPod returns the mirror pod with the full name NAME_NAMESPACE.
func (l *Loop) GetMirrorPod(fullName string) (*v1.Pod, bool) {
	return l.store.mirrorByFullName(fullName)
}

// SyncDue wakes the workers of pods whose next sync time has passed.
func (l *Loop) SyncDue(ctx context.Context) {
	l.startWaiting(ctx)
	for _, uid := range l.workers.Due(l.clock.Now()) {
		if p, ok := l.store.get(uid); ok {
			l.dispatch(ctx, p, UpdateSync)
			continue
		}
		l.workers.Update(ctx, podUpdate{Type: UpdateSync, UID: uid})
	}
}

// Housekeeping cleans up after pods that are gone: it kills runtime pods
// nobody asked for, forgets finished workers, deletes orphaned mirror pods
// and removes pod directories no longer used. It does nothing until every
// source has been seen, so a restarting agent never kills what it has not
// yet been told about.
func (l *Loop) Housekeeping(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !l.SourcesReady() {
		return
	}
	desired := map[types.UID]bool{}
	for _, p := range l.store.all() {
		desired[p.UID] = true
	}
	known := l.workers.Forget(desired)

	running, err := l.cfg.Listing.ListPods(ctx, false)
	if err != nil {
		logger.Error(err, "Housekeeping: unable to list running pods")
	} else {
		for _, rp := range running {
			if _, ok := known[rp.ID]; ok || desired[rp.ID] {
				continue
			}
			logger.Info("Killing a pod the agent does not know", "podUID", rp.ID, "pod", klog.KRef(rp.Namespace, rp.Name))
			l.workers.Update(ctx, podUpdate{Type: UpdateKill, Running: rp})
		}
	}
	if l.cfg.Mirror != nil {
		for _, m := range l.store.orphanMirrors() {
			uid := m.UID
			if _, err := l.cfg.Mirror.DeleteMirrorPod(ctx, podutil.FullName(m), &uid); err != nil {
				logger.Error(err, "Housekeeping: unable to delete an orphaned mirror pod", "pod", klog.KObj(m))
			}
		}
	}
	if l.cfg.ProbeWorkers != nil {
		l.cfg.ProbeWorkers.CleanupPods(desired)
	}
	// Statuses of pods that are gone and whose workers are done.
	if r, ok := l.cfg.Status.(OrphanStatusRemover); ok {
		keep := map[types.UID]bool{}
		for uid := range known {
			keep[uid] = true
		}
		for uid := range desired {
			keep[uid] = true
		}
		r.RemoveOrphanedStatuses(keep)
	}
	l.syncer.crash.GC()
	l.syncer.pull.GC()
	// Volumes of pods that are gone (found on disk after a restart, or of
	// orphans killed without a spec) are torn down before their dirs go.
	if v, ok := l.cfg.Volumes.(VolumeCleaner); ok {
		keep := map[types.UID]bool{}
		for uid := range known {
			keep[uid] = true
		}
		for uid := range desired {
			keep[uid] = true
		}
		for _, rp := range running {
			keep[rp.ID] = true
		}
		v.CleanupPods(keep)
	}
	if err := l.cleanupPodDirs(ctx, known, running); err != nil {
		logger.Error(err, "Housekeeping: unable to clean up pod directories")
	}
}

// cleanupPodDirs removes ROOT/pods/UID of pods that are neither desired nor
// running, unless something is still mounted below them.
func (l *Loop) cleanupPodDirs(ctx context.Context, known map[types.UID]workerPhase, running []*nodekit.Pod) error {
	entries, err := os.ReadDir(poddir.Pods(l.cfg.RootDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for _, rp := range running {
		live[rp.ID] = true
	}
	var mounts []string
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if _, ok := known[uid]; ok || live[uid] {
			continue
		}
		dir := poddir.Pod(l.cfg.RootDir, uid)
		if mounts == nil {
			if mounts, err = l.mountPaths(ctx); err != nil {
				return err
			}
		}
		if hasMountBelow(mounts, dir) {
			continue // the volume manager still has work here
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountPaths lists the mount points, through Config.Mounts if set.
func (l *Loop) mountPaths(ctx context.Context) ([]string, error) {
	if l.cfg.Mounts != nil {
		return l.cfg.Mounts.MountPaths(ctx)
	}
	return fsutil.MountPaths()
}

func hasMountBelow(mounts []string, dir string) bool {
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			return true
		}
	}
	return false
}
