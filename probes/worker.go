package probes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// adoptionGrace is how long before the manager started a container must
// have started to count as adopted from a previous agent (upstream's
// kubelet-restart grace period).
const adoptionGrace = 10 * time.Second

// worker probes one container with one probe, as upstream's: it follows the
// container through restarts (results are per container ID), waits for the
// initial delay, lets the startup probe gate the others, and reports a
// result only after the threshold of consecutive equal results.
type worker struct {
	m         *Manager
	key       workerKey
	container v1.Container
	spec      v1.Probe // with defaults filled in
	sidecar   bool
	initial   Result
	pod       atomic.Pointer[v1.Pod]
	pokeCh    chan struct{}
	cancel    context.CancelFunc
	stopped   bool // guarded by m.mu

	// Owned by whoever calls step (the worker's goroutine, or a test).
	id     nodekit.ContainerID
	last   Result
	streak int
	onHold bool
}

func newWorker(m *Manager, key workerKey, pod *v1.Pod, c *v1.Container) *worker {
	w := &worker{m: m, key: key, container: *c, pokeCh: make(chan struct{}, 1)}
	w.pod.Store(pod)
	w.spec = withDefaults(*kindSpec(key.kind, c), key.kind)
	w.sidecar = podutil.IsSidecar(c) &&
		!slices.ContainsFunc(pod.Spec.Containers, func(x v1.Container) bool { return x.Name == c.Name })
	switch key.kind {
	case Readiness:
		w.initial = Failure
	case Liveness:
		w.initial = Success
	default:
		w.initial = Unknown
	}
	return w
}

// withDefaults fills the fields the API server defaults, for pods that did
// not come through it (static pods): period 10 s, timeout 1 s, success
// threshold 1 (always 1 for liveness and startup), failure threshold 3.
func withDefaults(p v1.Probe, kind Kind) v1.Probe {
	if p.PeriodSeconds <= 0 {
		p.PeriodSeconds = 10
	}
	if p.TimeoutSeconds <= 0 {
		p.TimeoutSeconds = 1
	}
	if p.SuccessThreshold <= 0 || kind != Readiness {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = 3
	}
	if p.InitialDelaySeconds < 0 {
		p.InitialDelaySeconds = 0
	}
	return p
}

func (w *worker) period() time.Duration { return time.Duration(w.spec.PeriodSeconds) * time.Second }

// poke asks the worker to probe now; it never blocks.
func (w *worker) poke() {
	select {
	case w.pokeCh <- struct{}{}:
	default:
	}
}

// run probes every period until step says stop or ctx is done. A poke
// probes at once and restarts the period from there.
func (w *worker) run(ctx context.Context) {
	defer w.m.exited(w)
	clk := w.m.clock
	period := w.period()
	if w.m.jitter != nil && period > clk.Since(w.m.start) {
		t := clk.NewTimer(time.Duration(w.m.jitter() * float64(period)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
	ticker := clk.NewTicker(period)
	defer func() { ticker.Stop() }()
	for w.step(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-w.pokeCh:
			ticker.Stop()
			ticker = clk.NewTicker(period)
		}
	}
}

// step is one round: read the pod's status, follow the container, probe
// when due and record the result. It reports whether the worker should go
// on. A panic in a handler is logged and the round counts for nothing.
func (w *worker) step(ctx context.Context) (keep bool) {
	log := logger(ctx, w)
	defer func() {
		if r := recover(); r != nil {
			log.Error(fmt.Errorf("panic: %v", r), "Probe panicked")
			keep = true
		}
	}()
	st, ok := w.m.status.GetPodStatus(w.key.uid)
	if !ok {
		return true // not created yet, or already gone
	}
	if st.Phase == v1.PodFailed || st.Phase == v1.PodSucceeded {
		log.V(3).Info("Pod is terminated, stopping its probe worker", "phase", st.Phase)
		return false
	}
	cs := w.follow(log, &st)
	if cs == nil || w.onHold {
		return true // not created yet, or on hold until a new container
	}
	if cs.State.Running == nil {
		return w.notRunning(cs)
	}

	pod := w.pod.Load()
	if pod.DeletionTimestamp != nil && (w.key.kind == Liveness || w.key.kind == Startup) {
		// The pod is being deleted: leave the container alone.
		log.V(3).Info("Pod deletion requested, setting the probe result to success")
		w.m.set(w, Success)
		return false
	}
	if w.due(cs) {
		w.probe(ctx, pod, &st)
	}
	return true
}

// follow finds the worker's container in the pod status st and binds the
// worker to it when its ID is new. It returns nil while the container has
// no status or no ID that parses.
func (w *worker) follow(log klog.Logger, st *v1.PodStatus) *v1.ContainerStatus {
	cs := findStatus(st, w.key.container)
	if cs == nil {
		return nil // not created yet
	}
	id, ok := parseContainerID(cs.ContainerID)
	if !ok {
		log.V(3).Info("Unparseable container ID in the pod status", "containerID", cs.ContainerID)
		return nil
	}
	if id != w.id {
		w.bind(id, cs)
	}
	return cs
}

// notRunning handles a container that is not running: a bound container's
// result becomes Failure, and a terminated one decides by its exit code
// whether it will run again and so whether the worker goes on.
func (w *worker) notRunning(cs *v1.ContainerStatus) (keep bool) {
	if !w.id.IsEmpty() {
		w.m.set(w, Failure)
	}
	if cs.State.Terminated == nil {
		return true
	}
	return w.restarts(cs.State.Terminated.ExitCode)
}

// due reports whether the running container cs is to be probed this
// round: past the initial delay, and for the startup probe not yet
// started, for the others started.
func (w *worker) due(cs *v1.ContainerStatus) bool {
	if int32(w.m.clock.Since(cs.State.Running.StartedAt.Time).Seconds()) < w.spec.InitialDelaySeconds {
		return false
	}
	if w.started(cs) {
		// The startup probe is done; a new container brings it back.
		return w.key.kind != Startup
	}
	return w.key.kind == Startup // the others wait for the startup probe
}

// probe runs the probe once and counts its result; a result reaching its
// threshold of consecutive rounds is recorded. After a liveness failure
// or a startup verdict the worker holds until a new container.
func (w *worker) probe(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) {
	began := w.m.clock.Now()
	r, err := w.m.prober.probe(ctx, w.key.kind, pod, &w.container, &w.spec, st, w.id)
	if err != nil {
		return // the handler could not run: no result this round
	}
	w.m.metrics.ObserveProbe(kindTitle(w.key.kind), metricLabel(r), pod.Namespace, pod.Name, string(pod.UID), w.key.container, w.m.clock.Since(began))
	if r == w.last {
		w.streak++
	} else {
		w.last, w.streak = r, 1
	}
	if (r == Failure && w.streak < int(w.spec.FailureThreshold)) || (r == Success && w.streak < int(w.spec.SuccessThreshold)) {
		return
	}
	w.m.set(w, r)
	if (w.key.kind == Liveness && r == Failure) || w.key.kind == Startup {
		// The verdict is in: a failed container is about to be killed, and a
		// started one needs no more startup probes. Wait for a new container.
		w.onHold = true
		w.streak = 0
	}
}

// bind follows the worker to a new container: the old container's result
// is forgotten, the counts start over, and the new container gets the
// initial result (or, when adopted from a previous agent, the one it had).
func (w *worker) bind(id nodekit.ContainerID, cs *v1.ContainerStatus) {
	if !w.id.IsEmpty() {
		w.m.remove(w, w.id)
	}
	w.id, w.last, w.streak, w.onHold = id, Unknown, 0, false
	w.m.set(w, w.seed(cs))
}

// seed is the first result of a container. A container that was running
// before this manager started (the agent restarted and adopted it) keeps
// the readiness and started state the pod's API status gave it, so a
// restart of the agent does not flap Ready; others get the kind's initial
// value.
func (w *worker) seed(cs *v1.ContainerStatus) Result {
	run := cs.State.Running
	if run == nil || run.StartedAt.IsZero() || !run.StartedAt.Time.Before(w.m.start.Add(-adoptionGrace)) {
		return w.initial
	}
	prev := findByID(&w.pod.Load().Status, cs.ContainerID)
	if prev == nil {
		return w.initial
	}
	switch {
	case w.key.kind == Readiness && prev.Ready:
		return Success
	case w.key.kind == Startup && prev.Started != nil && *prev.Started:
		return Success
	}
	return w.initial
}

// started is whether the container's startup probe (if any) succeeded:
// from the status, or from this manager's own result, which the status may
// not show yet.
func (w *worker) started(cs *v1.ContainerStatus) bool {
	if w.container.StartupProbe == nil || (cs.Started != nil && *cs.Started) {
		return true
	}
	r, ok := w.m.get(Startup, w.id)
	return ok && r == Success
}

// restarts is whether an exited container will run again (so the worker
// should wait for it): sidecars always; others by the rule the sync loop
// and the status manager follow too (restartrules).
func (w *worker) restarts(exitCode int32) bool {
	if w.sidecar {
		return true
	}
	return restartrules.Restarts(&w.container, w.pod.Load().Spec.RestartPolicy, exitCode)
}

// findStatus returns the named container's status that has a container ID,
// looking at regular containers first, then init containers.
func findStatus(st *v1.PodStatus, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name && list[i].ContainerID != "" {
				return &list[i]
			}
		}
	}
	return nil
}

func findByID(st *v1.PodStatus, id string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				return &list[i]
			}
		}
	}
	return nil
}

// parseContainerID parses "type://id" as the status shows it.
func parseContainerID(s string) (nodekit.ContainerID, bool) {
	typ, id, ok := strings.Cut(s, "://")
	if !ok || typ == "" || id == "" {
		return nodekit.ContainerID{}, false
	}
	return nodekit.ContainerID{Type: typ, ID: id}, true
}
