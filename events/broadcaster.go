package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// queueLength bounds each queue between recorders and the
	// broadcaster's goroutines, as record's maxQueuedEvents.
	queueLength = 1000
	// logVerbosity is the verbosity of the line logged per event, as
	// kubelet's StartStructuredLogging(3).
	logVerbosity = 3
)

var errStopped = errors.New("broadcaster already stopped")

// Broadcaster takes the events of its Recorders and, each on a goroutine
// of its own, logs them and writes them to its Sink. Events wait in a
// bounded queue for each; a Recorder drops an event rather than wait when
// a queue is full. Both see the events in the order they were queued.
type Broadcaster struct {
	ctx    context.Context
	cancel context.CancelFunc
	logger klog.Logger
	clock  clock.Clock
	rand   *lockedRand
	sink   Sink
	corr   *correlator // owned by the sink goroutine

	queues []chan *v1.Event
	wg     sync.WaitGroup
}

// Option configures a Broadcaster.
type Option func(*config)

type config struct {
	clock       clock.Clock
	rand        *rand.Rand
	queueLength int
}

// WithClock sets the clock that timestamps events, paces the correlator
// and times the waits between tries. The default is clock.RealClock{}.
func WithClock(c clock.Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithRand sets the random source for the first wait between tries and
// for the names of events whose usual name is invalid. The Broadcaster
// serializes its use of r; nothing else may use it. The default is
// seeded from math/rand/v2's global source.
func WithRand(r *rand.Rand) Option {
	return func(cfg *config) { cfg.rand = r }
}

// WithQueueLength sets the length of each queue (at least 1); the
// default is 1000, as record's.
func WithQueueLength(n int) Option {
	return func(cfg *config) { cfg.queueLength = max(n, 1) }
}

// NewBroadcaster starts a Broadcaster that logs each event at verbosity 3
// with the logger of ctx and writes it to sink; a nil sink only logs. It
// stops when ctx is done or Shutdown is called; only Shutdown waits for
// it to have stopped. All its lines, and its Recorders', go to ctx's
// logger.
func NewBroadcaster(ctx context.Context, sink Sink, opts ...Option) *Broadcaster {
	cfg := config{clock: clock.RealClock{}, queueLength: queueLength}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.rand == nil {
		cfg.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	b := &Broadcaster{
		logger: klog.FromContext(ctx),
		clock:  cfg.clock,
		rand:   &lockedRand{r: cfg.rand},
		sink:   sink,
		corr:   newCorrelator(cfg.clock),
	}
	b.ctx, b.cancel = context.WithCancel(ctx)
	b.start(cfg.queueLength, b.logEvent)
	if sink != nil {
		b.start(cfg.queueLength, b.deliver)
	}
	return b
}

// Shutdown stops the Broadcaster and returns once its goroutines have
// ended. It blocks until the Sink call in progress, if any, returns (the
// Sink bounds it; kubeclient.EventSink by its client's timeout); a write
// waiting to be retried is given up at once, with an error in the log.
// Events still queued are dropped, and Recorders refuse later events. It
// is idempotent and safe to call from any goroutine.
func (b *Broadcaster) Shutdown() {
	b.cancel()
	b.wg.Wait()
}

// start runs handle on a goroutine of its own for each event of a new
// queue, until the Broadcaster stops.
func (b *Broadcaster) start(length int, handle func(context.Context, *v1.Event)) {
	queue := make(chan *v1.Event, length)
	b.queues = append(b.queues, queue)
	b.wg.Go(func() {
		for {
			select {
			case <-b.ctx.Done():
				return
			case event := <-queue:
				// Both cases may be ready: stop wins.
				if b.ctx.Err() != nil {
					return
				}
				handle(b.ctx, event)
			}
		}
	})
}

// enqueue puts event on every queue without waiting; the handlers share
// it and do not change it.
func (b *Broadcaster) enqueue(event *v1.Event) {
	if b.ctx.Err() != nil {
		b.logger.Error(errStopped, "Unable to record event (will not retry!)")
		return
	}
	dropped := false
	for _, queue := range b.queues {
		select {
		case queue <- event:
		default:
			dropped = true
		}
	}
	if dropped {
		b.logger.Error(nil, "Unable to record event: too many queued events, dropped event", "event", event)
	}
}

// logEvent logs event as record's StartStructuredLogging does.
func (b *Broadcaster) logEvent(_ context.Context, e *v1.Event) {
	b.logger.V(logVerbosity).Info("Event occurred",
		"object", klog.KRef(e.InvolvedObject.Namespace, e.InvolvedObject.Name),
		"fieldPath", e.InvolvedObject.FieldPath,
		"kind", e.InvolvedObject.Kind,
		"apiVersion", e.InvolvedObject.APIVersion,
		"type", e.Type,
		"reason", e.Reason,
		"message", e.Message)
}

// lockedRand serializes the use of a rand.Rand, which recorders (for
// names) and the sink goroutine (for waits) share.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// uuid returns a random (version 4) UUID in its usual text form.
func (l *lockedRand) uuid() string {
	var u [16]byte
	l.mu.Lock()
	binary.BigEndian.PutUint64(u[:8], l.r.Uint64())
	binary.BigEndian.PutUint64(u[8:], l.r.Uint64())
	l.mu.Unlock()
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}
