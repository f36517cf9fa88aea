package events

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// The correlator's settings: record's defaults, which kubelet keeps.
const (
	// cacheEntries bounds each of the correlator's three caches; the
	// least recently used entry goes first.
	cacheEntries = 4096
	// Similar events (differing only in message) aggregate once
	// aggregateMaxEvents distinct messages were seen for them, none more
	// than aggregateInterval after the one before.
	aggregateMaxEvents = 10
	aggregateInterval  = 600 * time.Second
	// Each source may send spamBurst events about one object, then one
	// every 1/spamQPS seconds (five minutes).
	spamBurst = 25
	spamQPS   = 1. / 300.
)

// aggregatePrefix starts the message of an aggregated event.
const aggregatePrefix = "(combined from similar events): "

// correlator decides what to send for each event, as record's
// EventCorrelator with default options does, in three steps: aggregation
// turns a flood of similar events into one event, observation turns a
// repeat of an event into a count increment of the stored one, and the
// spam filter drops events past an object's rate. All three keep state
// even for events the spam filter then drops. It is not safe for
// concurrent use: the sink goroutine owns it.
type correlator struct {
	clock      clock.PassiveClock
	aggregates *lru.Cache // aggregate key -> *aggregateRecord
	observed   *lru.Cache // cache key -> observation
	limits     *lru.Cache // spam key -> flowcontrol.PassiveRateLimiter
}

// correlation is what to do with an event: skip it, or write event (a
// patch of the stored event when its Count is above 1).
type correlation struct {
	event *v1.Event
	patch []byte
	skip  bool
}

// aggregateRecord is what the aggregator knows of a group of similar
// events: the distinct messages seen, and when the last one was.
type aggregateRecord struct {
	messages map[string]struct{}
	last     time.Time
}

// observation is what the correlator knows of an event it sent: the
// stored event's name, resourceVersion and first timestamp, and how many
// times it occurred.
type observation struct {
	count           int32
	firstTimestamp  metav1.Time
	name            string
	resourceVersion string
}

func newCorrelator(c clock.PassiveClock) *correlator {
	return &correlator{
		clock:      c,
		aggregates: lru.New(cacheEntries),
		observed:   lru.New(cacheEntries),
		limits:     lru.New(cacheEntries),
	}
}

// correlate returns what to send for event, which it does not change.
// An error means the patch could not be built; the result is still
// usable, with a nil patch, as record's.
func (c *correlator) correlate(event *v1.Event) (correlation, error) {
	aggregated, key := c.aggregate(event)
	observed, patch, err := c.observe(aggregated, key)
	if c.spam(observed) {
		return correlation{skip: true}, nil
	}
	return correlation{event: observed, patch: patch}, err
}

// aggregate returns the event to send for event and the key its
// occurrences are counted under. Below the threshold that is event itself
// under its full key; at the threshold it is a new event with the
// aggregate message, under the aggregate key, so that further similar
// events count up that one event.
func (c *correlator) aggregate(event *v1.Event) (*v1.Event, string) {
	now := c.clock.Now()
	groupKey := aggregateKey(event)
	var record *aggregateRecord
	if value, ok := c.aggregates.Get(groupKey); ok {
		record = value.(*aggregateRecord)
	}
	// A group not seen for longer than the interval (or never) starts over.
	if record == nil || now.Sub(record.last) > aggregateInterval {
		record = &aggregateRecord{messages: map[string]struct{}{}}
	}
	record.messages[event.Message] = struct{}{}
	record.last = now
	c.aggregates.Add(groupKey, record)

	if len(record.messages) < aggregateMaxEvents {
		return event, eventKey(event)
	}
	// Keep the set below the threshold by forgetting one message, any
	// one: a message seen again later then counts as new.
	for message := range record.messages {
		delete(record.messages, message)
		break
	}
	t := metav1.NewTime(now)
	// Only these fields: the aggregate has no annotations and no
	// reporting controller or instance, as record's.
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%v.%x", event.InvolvedObject.Name, t.UnixNano()),
			Namespace: event.Namespace,
		},
		Count:          1,
		FirstTimestamp: t,
		InvolvedObject: event.InvolvedObject,
		LastTimestamp:  t,
		Message:        aggregatePrefix + event.Message,
		Type:           event.Type,
		Reason:         event.Reason,
		Source:         event.Source,
	}, groupKey
}

// observe returns a copy of event to send, and remembers it under key. If
// an event was sent under key before, the copy takes that event's name,
// resourceVersion and first timestamp, its count plus one, and comes with
// the patch that updates the stored event.
func (c *correlator) observe(event *v1.Event, key string) (*v1.Event, []byte, error) {
	copied := *event
	out := &copied
	var (
		patch []byte
		err   error
	)
	if last, ok := c.lastObservation(key); ok && last.count > 0 {
		out.Name = last.name
		out.ResourceVersion = last.resourceVersion
		out.FirstTimestamp = last.firstTimestamp
		out.Count = last.count + 1
		patch, err = repeatPatch(out)
	}
	c.remember(key, out)
	return out, patch, err
}

// updateState records the event as the API server stored it, under the
// event's full key, so that its next repeat patches it.
func (c *correlator) updateState(stored *v1.Event) {
	if stored == nil {
		return
	}
	c.remember(eventKey(stored), stored)
}

func (c *correlator) remember(key string, event *v1.Event) {
	c.observed.Add(key, observation{
		count:           event.Count,
		firstTimestamp:  event.FirstTimestamp,
		name:            event.Name,
		resourceVersion: event.ResourceVersion,
	})
}

func (c *correlator) lastObservation(key string) (observation, bool) {
	value, ok := c.observed.Get(key)
	if !ok {
		return observation{}, false
	}
	o, ok := value.(observation)
	return o, ok
}

// spam reports whether event exceeds its source's rate for its object,
// taking a token from the object's bucket if not.
func (c *correlator) spam(event *v1.Event) bool {
	key := spamKey(event)
	var limiter flowcontrol.PassiveRateLimiter
	if value, ok := c.limits.Get(key); ok {
		limiter = value.(flowcontrol.PassiveRateLimiter)
	} else {
		limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(spamQPS, spamBurst, c.clock)
	}
	filtered := !limiter.TryAccept()
	c.limits.Add(key, limiter) // also marks the entry as recently used
	return filtered
}

// eventKey identifies an event for counting repeats: everything that
// makes two events the same, message included. The fields are joined
// with no separator, as record's keys (so keys may collide; they do so
// in record too).
func eventKey(e *v1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{
		e.Source.Component, e.Source.Host,
		o.Kind, o.Namespace, o.Name, o.FieldPath, string(o.UID), o.APIVersion,
		e.Type, e.Reason, e.Message,
	}, "")
}

// aggregateKey identifies a group of similar events: the event key
// without field path and message, with the reporting controller and
// instance.
func aggregateKey(e *v1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{
		e.Source.Component, e.Source.Host,
		o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion,
		e.Type, e.Reason,
		e.ReportingController, e.ReportingInstance,
	}, "")
}

// spamKey identifies the events of one source about one object of one
// type, whatever their reason and message, as record's getSpamKey.
func spamKey(e *v1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{
		e.Source.Component, e.Source.Host,
		o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion,
		e.Type,
	}, "")
}
