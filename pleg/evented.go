package pleg

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// ContainerEventer is the optional runtime capability the evented PLEG
// uses: a stream of container events. criruntime implements it over CRI
// GetContainerEvents.
type ContainerEventer interface {
	// ContainerEvents sends events to out until ctx ends or the stream
	// breaks, and returns why it stopped.
	ContainerEvents(ctx context.Context, out chan<- nodekit.ContainerEvent) error
}

// MaxStreamFailures is how many broken streams make the evented PLEG give
// up on events for good (upstream's eventedPlegMaxStreamRetries).
const MaxStreamFailures = 5

// Evented is the PLEG for runtimes that stream container events: each event
// refreshes its pod's cache entry and is forwarded at once, so a container
// that dies is seen in the time the runtime takes to report it rather than
// at the next relist. As upstream's v1.37 evented PLEG it is a fast path
// beside the generic PLEG, which keeps relisting every RelistPeriod: a pod
// worker waits (Cache.GetNewerThan) for a status newer than its last sync,
// and a sync that changed nothing in the runtime makes no event, so only a
// relist answers it. When the stream cannot be opened or breaks
// MaxStreamFailures times, it stops reopening it (FellBack) and relists
// alone. Events go out on the Generic's channel.
type Evented struct {
	g       *Generic
	eventer ContainerEventer

	mu       sync.Mutex
	failures int
	fallback bool
}

// NewEvented returns an evented PLEG over g (which supplies the cache, the
// event channel, the clock and the health check).
func NewEvented(g *Generic, eventer ContainerEventer) *Evented {
	return &Evented{g: g, eventer: eventer}
}

// Events returns the channel events are sent on (the Generic's).
func (e *Evented) Events() <-chan *Event { return e.g.Events() }

// Healthy is the Generic's health: relists must keep completing, events or
// not.
func (e *Evented) Healthy() error { return e.g.Healthy() }

// FellBack reports whether the PLEG has given up on events and relists
// alone.
func (e *Evented) FellBack() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fallback
}

// Run consumes events and relists until ctx is done.
func (e *Evented) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	events := make(chan nodekit.ContainerEvent, eventChannelCapacity)
	streamDone := make(chan error, 1)
	startStream := func() {
		go func() { streamDone <- e.eventer.ContainerEvents(ctx, events) }()
	}
	startStream()
	go e.g.serveRequests(ctx)
	e.g.Relist(ctx)
	timer := e.g.opts.Clock.NewTimer(e.g.opts.RelistPeriod)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-streamDone:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.mu.Lock()
			e.failures++
			giveUp := e.failures >= MaxStreamFailures
			if giveUp {
				e.fallback = true
			}
			e.mu.Unlock()
			if giveUp {
				logger.Error(err, "Container event stream failed too often; falling back to relisting alone", "failures", MaxStreamFailures)
				continue
			}
			logger.Info("Container event stream broke; reopening it and relisting", "err", err)
			e.g.Relist(ctx) // catch up on what the stream missed
			startStream()
		case ev := <-events:
			e.handle(ctx, ev)
		case <-timer.C():
			e.g.Relist(ctx)
			timer.Reset(e.g.opts.RelistPeriod)
		}
	}
}

// handle refreshes the pod's cache entry and forwards the event.
func (e *Evented) handle(ctx context.Context, ev nodekit.ContainerEvent) {
	if ev.PodID == "" {
		return
	}
	var t EventType
	switch ev.Type {
	case nodekit.ContainerStartedEvent:
		t = ContainerStarted
	case nodekit.ContainerStoppedEvent:
		t = ContainerDied
	case nodekit.ContainerDeletedEvent:
		t = ContainerRemoved
	default:
		t = PodSync
	}
	name, ns := e.g.podName(ev.PodID)
	if err := e.g.inspect(ctx, ev.PodID, name, ns); err != nil {
		klog.FromContext(ctx).V(4).Info("Evented PLEG: pod inspection failed; the next relist retries", "podUID", ev.PodID, "err", err)
		return
	}
	e.g.send(ctx, &Event{PodID: ev.PodID, Type: t, Container: ev.Container})
}

// podName finds the name of a pod from the last relist.
func (g *Generic) podName(uid types.UID) (string, string) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	if p, ok := g.old[uid]; ok {
		return p.Name, p.Namespace
	}
	return "", ""
}

// inspect reads one pod's status into the cache.
func (g *Generic) inspect(ctx context.Context, uid types.UID, name, ns string) error {
	t := g.opts.Clock.Now()
	st, err := g.rt.GetPodStatus(ctx, uid, name, ns)
	if err != nil {
		return fmt.Errorf("status of pod %s: %w", uid, err)
	}
	g.cache.Set(uid, st, nil, t)
	return nil
}

// send forwards an event without blocking.
func (g *Generic) send(ctx context.Context, ev *Event) {
	select {
	case g.events <- ev:
	default:
		klog.FromContext(ctx).Error(nil, "PLEG: event channel is full, dropping an event", "podUID", ev.PodID, "event", ev.Type)
	}
}
