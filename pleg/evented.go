package pleg

import (
	"context"
	"fmt"
	"sync"
	"time"

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

// Defaults of the evented PLEG, as upstream.
const (
	// EventedRelistPeriod is the safety-net relist while events flow.
	EventedRelistPeriod = 300 * time.Second
	// MaxStreamFailures is how many broken streams make the PLEG give up
	// on events and relist every second again.
	MaxStreamFailures = 5
)

// Evented is the PLEG for runtimes that stream container events: each event
// refreshes its pod's cache entry and is forwarded at once, and the generic
// relist runs only every 300 s as a safety net. When the stream cannot be
// opened or breaks MaxStreamFailures times, it falls back to relisting every
// second for good. Events go out on the Generic's channel.
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

// FellBack reports whether the PLEG has given up on events.
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
	e.g.Relist(ctx)
	period := func() time.Duration {
		if e.FellBack() {
			return e.g.opts.RelistPeriod
		}
		return EventedRelistPeriod
	}
	timer := e.g.opts.Clock.NewTimer(period())
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
				logger.Error(err, "Container event stream failed too often; falling back to relisting every second", "failures", MaxStreamFailures)
				timer.Reset(0)
				continue
			}
			logger.Info("Container event stream broke; reopening it and relisting", "err", err)
			e.g.Relist(ctx) // catch up on what the stream missed
			startStream()
		case ev := <-events:
			e.handle(ctx, ev)
		case <-timer.C():
			e.g.Relist(ctx)
			timer.Reset(period())
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
