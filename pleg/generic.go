package pleg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Runtime is the part of nodekit.Runtime the PLEG uses.
type Runtime interface {
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*nodekit.PodStatus, error)
}

// EventType is what happened to a container.
type EventType string

// The event types, as upstream.
const (
	ContainerStarted EventType = "ContainerStarted"
	ContainerDied    EventType = "ContainerDied"
	ContainerRemoved EventType = "ContainerRemoved"
	// ContainerChanged means the container's state is unknown; it is
	// computed but not sent, as upstream, because nothing can act on it.
	ContainerChanged EventType = "ContainerChanged"
	// PodSync asks for the pod to be synced (sent by the evented PLEG).
	PodSync EventType = "PodSync"
)

// Event is one lifecycle event of one pod.
type Event struct {
	PodID types.UID
	Type  EventType
	// Container is the container or sandbox the event is about.
	Container nodekit.ContainerID
}

// Defaults of the generic PLEG, as upstream.
const (
	DefaultRelistPeriod    = time.Second
	DefaultRelistThreshold = 3 * time.Minute
	eventChannelCapacity   = 1000
)

// Options configures a Generic PLEG. Zero values take the defaults.
type Options struct {
	Clock clock.WithTicker
	// RelistPeriod is how often Run relists (1 s).
	RelistPeriod time.Duration
	// RelistThreshold is how long relisting may stall before Healthy
	// reports an error (3 min).
	RelistThreshold time.Duration
	// Metrics receives each relist's numbers (server.AgentMetrics
	// satisfies it). Nil discards them.
	Metrics Metrics
	// RelistOnly makes New choose the relist PLEG even for a runtime that
	// streams container events (fullagent sets it while the EventedPLEG
	// feature gate is off, as kubelet). NewGeneric ignores it.
	RelistOnly bool
	// OnList, if set, receives each successful listing (every sandbox and
	// container) and the time it started, so readers that can take a
	// listing a moment old share it (runtimecache.Cache.Observe). The
	// PLEG never changes a listing after it is handed over, and the
	// receiver must not change it either.
	OnList func(pods []*nodekit.Pod, at time.Time)
}

// Metrics receives what upstream's PLEG reports: relist durations and
// intervals, when it was last active, and the running pod and container
// counts of each successful listing.
type Metrics interface {
	// ObserveRelist records a relist's duration and the time since the
	// previous successful one started (zero for the first).
	ObserveRelist(duration, interval time.Duration)
	// SetPLEGLastSeen records the start of the last successful relist.
	SetPLEGLastSeen(t time.Time)
	// SetRunning sets the pods with a running sandbox and the containers
	// by state (created, running, exited, unknown).
	SetRunning(pods int, containers map[string]int)
}

type noMetrics struct{}

func (noMetrics) ObserveRelist(time.Duration, time.Duration) {}
func (noMetrics) SetPLEGLastSeen(time.Time)                  {}
func (noMetrics) SetRunning(int, map[string]int)             {}

// Generic is the relist PLEG.
type Generic struct {
	rt     Runtime
	cache  *Cache
	opts   Options
	events chan *Event

	// relistMu serializes Relist; the fields below it are owned by Relist.
	relistMu  sync.Mutex
	old, cur  map[types.UID]*nodekit.Pod
	reinspect map[types.UID]*nodekit.Pod

	requests chan relistRequest // RequestRelist's

	healthMu   sync.Mutex
	lastRelist time.Time
}

// NewGeneric returns a relist PLEG that writes statuses to cache.
func NewGeneric(rt Runtime, cache *Cache, opts Options) *Generic {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RelistPeriod <= 0 {
		opts.RelistPeriod = DefaultRelistPeriod
	}
	if opts.RelistThreshold <= 0 {
		opts.RelistThreshold = DefaultRelistThreshold
	}
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	return &Generic{
		rt: rt, cache: cache, opts: opts,
		events:    make(chan *Event, eventChannelCapacity),
		old:       map[types.UID]*nodekit.Pod{},
		reinspect: map[types.UID]*nodekit.Pod{},
		requests:  make(chan relistRequest, relistRequestCapacity),
	}
}

// Events returns the channel events are sent on. When it is full, a relist's
// events are dropped (and logged) rather than blocking the PLEG; the cache is
// still updated, so the periodic sync repairs what was missed.
func (g *Generic) Events() <-chan *Event { return g.events }

// Run relists every RelistPeriod, and the pods RequestRelist asks for at
// once, until ctx is done.
func (g *Generic) Run(ctx context.Context) error {
	go g.serveRequests(ctx)
	t := g.opts.Clock.NewTicker(g.opts.RelistPeriod)
	defer t.Stop()
	for {
		g.Relist(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
}

// Healthy reports an error when no relist has completed within the
// threshold (or none ever has).
func (g *Generic) Healthy() error {
	g.healthMu.Lock()
	last := g.lastRelist
	g.healthMu.Unlock()
	if last.IsZero() {
		return fmt.Errorf("pleg has yet to be successful")
	}
	if since := g.opts.Clock.Since(last); since > g.opts.RelistThreshold {
		return fmt.Errorf("pleg was last seen active %v ago; threshold is %v", since.Round(time.Second), g.opts.RelistThreshold)
	}
	return nil
}

// Relist lists the runtime's pods once, refreshes the cache for the pods
// that changed (and for the ones whose inspection failed before), and sends
// the events. A failed listing changes nothing and is retried next time.
func (g *Generic) Relist(ctx context.Context) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	logger := klog.FromContext(ctx)
	start := g.opts.Clock.Now()
	g.healthMu.Lock()
	var interval time.Duration
	if !g.lastRelist.IsZero() {
		interval = start.Sub(g.lastRelist)
	}
	g.healthMu.Unlock()
	defer func() { g.opts.Metrics.ObserveRelist(g.opts.Clock.Since(start), interval) }()

	pods, err := g.rt.ListPods(ctx, true)
	if err != nil {
		logger.Error(err, "PLEG: unable to list pods from the runtime")
		return
	}
	g.healthMu.Lock()
	g.lastRelist = start
	g.healthMu.Unlock()
	g.opts.Metrics.SetPLEGLastSeen(start)
	g.opts.Metrics.SetRunning(runningCounts(pods))
	if g.opts.OnList != nil {
		g.opts.OnList(pods, start)
	}

	g.cur = make(map[types.UID]*nodekit.Pod, len(pods))
	for _, p := range pods {
		g.cur[p.ID] = p
	}
	// Only pods that changed are inspected, as upstream: a GetPodStatus of
	// every pod every relist cost a third of the agent's steady CPU at 100
	// pods. A pod gone from the listing is always handled, so its cache
	// entry goes even when it had nothing left to report.
	byPod := map[types.UID][]*Event{}
	for uid := range union(g.old, g.cur) {
		evs := podEvents(uid, g.old[uid], g.cur[uid])
		if len(evs) > 0 || g.cur[uid] == nil {
			byPod[uid] = evs
		}
	}

	failed := map[types.UID]*nodekit.Pod{}
	for uid, evs := range byPod {
		pod := g.cur[uid]
		if err := g.updateCache(ctx, uid, pod); err != nil {
			logger.V(4).Info("PLEG: will inspect the pod again on the next relist", "podUID", uid, "err", err)
			failed[uid] = pod
			continue // keep the old record, so the change is seen again
		}
		delete(g.reinspect, uid)
		g.commit(uid)
		for _, ev := range evs {
			if ev.Type != ContainerChanged {
				g.send(ctx, ev)
			}
		}
	}
	for uid, pod := range g.reinspect {
		if err := g.updateCache(ctx, uid, pod); err != nil {
			failed[uid] = pod
		}
	}
	// Pods with no event keep their record current too.
	for uid := range g.cur {
		if _, changed := byPod[uid]; !changed {
			g.commit(uid)
		}
	}
	g.cache.UpdateTime(start)
	g.reinspect = failed
}

// commit makes the current listing of a pod the one the next relist compares
// against.
func (g *Generic) commit(uid types.UID) {
	if p, ok := g.cur[uid]; ok {
		g.old[uid] = p
	} else {
		delete(g.old, uid)
	}
}

// updateCache reads the pod's status into the cache; a pod gone from the
// runtime is dropped from it.
func (g *Generic) updateCache(ctx context.Context, uid types.UID, pod *nodekit.Pod) error {
	if pod == nil {
		g.cache.Delete(uid)
		return nil
	}
	t := g.opts.Clock.Now()
	st, err := g.rt.GetPodStatus(ctx, uid, pod.Name, pod.Namespace)
	if err == nil && st != nil && !hasReadySandbox(st) {
		// A stopped sandbox may no longer report its IPs; keep the last
		// known ones so a terminating pod's status does not lose them.
		if prev, _ := g.cache.Get(uid); prev != nil && len(prev.IPs) > 0 {
			st.IPs = prev.IPs
		}
	}
	g.cache.Set(uid, st, err, t)
	return err
}

func hasReadySandbox(st *nodekit.PodStatus) bool {
	for _, sb := range st.Sandboxes {
		if sb.State == nodekit.SandboxReady {
			return true
		}
	}
	return false
}

func union(a, b map[types.UID]*nodekit.Pod) map[types.UID]struct{} {
	out := make(map[types.UID]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// containerState is a container's state as the PLEG tracks it; absent means
// the container is not listed at all.
type containerState string

const (
	stateRunning containerState = "running"
	stateExited  containerState = "exited"
	stateUnknown containerState = "unknown"
	stateAbsent  containerState = "absent"
)

func stateIn(p *nodekit.Pod, id nodekit.ContainerID) containerState {
	if p == nil {
		return stateAbsent
	}
	for _, list := range [][]*nodekit.Container{p.Containers, p.Sandboxes} {
		for _, c := range list {
			if c.ID != id {
				continue
			}
			switch c.State {
			case nodekit.StateRunning:
				return stateRunning
			case nodekit.StateExited:
				return stateExited
			}
			// Created (not yet started) counts as unknown, as upstream.
			return stateUnknown
		}
	}
	return stateAbsent
}

// podEvents compares every container and sandbox of one pod between two
// listings.
func podEvents(uid types.UID, old, cur *nodekit.Pod) []*Event {
	seen := map[nodekit.ContainerID]bool{}
	var out []*Event
	for _, p := range []*nodekit.Pod{old, cur} {
		if p == nil {
			continue
		}
		for _, list := range [][]*nodekit.Container{p.Sandboxes, p.Containers} {
			for _, c := range list {
				if seen[c.ID] {
					continue
				}
				seen[c.ID] = true
				out = append(out, transition(uid, c.ID, stateIn(old, c.ID), stateIn(cur, c.ID))...)
			}
		}
	}
	return out
}

// transition maps a state change to events, as upstream.
func transition(uid types.UID, id nodekit.ContainerID, from, to containerState) []*Event {
	if from == to {
		return nil
	}
	ev := func(t EventType) *Event { return &Event{PodID: uid, Type: t, Container: id} }
	switch to {
	case stateRunning:
		return []*Event{ev(ContainerStarted)}
	case stateExited:
		return []*Event{ev(ContainerDied)}
	case stateUnknown:
		return []*Event{ev(ContainerChanged)}
	}
	// Gone: a container that vanished without being seen exited died first.
	if from == stateExited {
		return []*Event{ev(ContainerRemoved)}
	}
	return []*Event{ev(ContainerDied), ev(ContainerRemoved)}
}

// runningCounts counts the pods with a running sandbox and the containers
// by state, as upstream's kubelet_running_pods and
// kubelet_running_containers.
func runningCounts(pods []*nodekit.Pod) (int, map[string]int) {
	running := 0
	states := map[string]int{}
	for _, p := range pods {
		for _, c := range p.Containers {
			states[string(c.State)]++
		}
		for _, sb := range p.Sandboxes {
			if sb.State == nodekit.StateRunning {
				running++
				break
			}
		}
	}
	return running, states
}
