package events

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// The aggregator keeps fewer distinct messages than its threshold once it
// aggregates, by forgetting one: a forgotten message counts as new again.
func TestAggregatorForgetsOneMessage(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	c := newCorrelator(clock)
	event := func(i int) *v1.Event {
		return &v1.Event{
			InvolvedObject: v1.ObjectReference{Kind: "Pod", Name: "web-0", Namespace: "ns-1"},
			Source:         testSource, Type: v1.EventTypeWarning, Reason: "FailedMount",
			Message: fmt.Sprintf("volume %d", i),
		}
	}
	messages := func() int {
		value, ok := c.aggregates.Get(aggregateKey(event(0)))
		if !ok {
			return 0
		}
		return len(value.(*aggregateRecord).messages)
	}
	for i := range aggregateMaxEvents {
		e := event(i)
		got, key := c.aggregate(e)
		if i < aggregateMaxEvents-1 && (got != e || key != eventKey(e)) {
			t.Errorf("event %d aggregated: key %q, message %q", i, key, got.Message)
		}
		if i == aggregateMaxEvents-1 && (key != aggregateKey(e) || got.Message != aggregatePrefix+e.Message) {
			t.Errorf("event %d not aggregated: key %q, message %q", i, key, got.Message)
		}
		clock.Step(time.Second)
	}
	if n := messages(); n != aggregateMaxEvents-1 {
		t.Errorf("%d messages kept after aggregating, want %d", n, aggregateMaxEvents-1)
	}
	// One of the ten was forgotten: sending all ten again aggregates at
	// least that one, and never grows the set past nine.
	aggregatedAgain := 0
	for i := range aggregateMaxEvents {
		if _, key := c.aggregate(event(i)); key == aggregateKey(event(i)) {
			aggregatedAgain++
		}
		if n := messages(); n != aggregateMaxEvents-1 {
			t.Fatalf("%d messages kept, want %d", n, aggregateMaxEvents-1)
		}
	}
	if aggregatedAgain == 0 || aggregatedAgain == aggregateMaxEvents {
		t.Errorf("%d of %d known messages aggregated again", aggregatedAgain, aggregateMaxEvents)
	}
}
