package events

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

func TestRepeatIsPatchedWithCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		h.rec.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
		synctest.Wait()
		h.clock.Step(time.Minute)
		h.rec.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
		synctest.Wait()

		calls := h.sink.Calls()
		if verbs(calls) != "create,patch" {
			t.Fatalf("sink calls %s, want create,patch", verbs(calls))
		}
		first, repeat := calls[0].Event, calls[1].Event
		if repeat.Count != 2 || repeat.Name != first.Name || !repeat.FirstTimestamp.Equal(&first.FirstTimestamp) ||
			!repeat.LastTimestamp.Time.Equal(start.Add(time.Minute)) {
			t.Errorf("repeat\n%s\nof\n%s", dump(repeat), dump(first))
		}
		// The correlator learnt the stored event's resourceVersion.
		if repeat.ResourceVersion != "rv-i" {
			t.Errorf("repeat resourceVersion %q, want the one the sink returned", repeat.ResourceVersion)
		}
		if want := upstreamRepeatPatch(t, repeat); calls[1].Patch != want {
			t.Errorf("patch %s, strategicpatch's %s", calls[1].Patch, want)
		}
		if want := `{"count":2,"lastTimestamp":"2026-03-14T15:10:26Z","message":"back-off"}`; calls[1].Patch != want {
			t.Errorf("patch %s, want %s", calls[1].Patch, want)
		}
	})
}

func TestPatchNotFoundFallsBackToCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &fakeSink{fail: failOn("patch", first1, apierrors.NewNotFound(gr, "web-0.1"))}
		h := newHarness(t, sink)
		for range 3 {
			h.rec.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
			synctest.Wait()
		}
		calls := h.sink.Calls()
		wantCalls(t, calls, "create,patch,create,patch", 1, 2, 2, 3)
		if len(calls) == 4 && calls[2].Event.ResourceVersion != "" {
			t.Errorf("create with resourceVersion %q", calls[2].Event.ResourceVersion)
		}
		if len(calls) == 4 && calls[3].Event.ResourceVersion != "rv-iii" {
			t.Errorf("patch after re-create with resourceVersion %q, want rv-iii", calls[3].Event.ResourceVersion)
		}
	})
}

// TestRetryTiming checks the waits between tries on the fake clock: the
// first a random fraction of 10s from the injected source, then 10s,
// 12 tries in all.
func TestRetryTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &fakeSink{fail: failOn("create", always, errors.New("connection refused"))}
		h := newHarness(t, sink, WithRand(rand.New(rand.NewPCG(5, 6))))
		firstWait := time.Duration(float64(retryInterval) * rand.New(rand.NewPCG(5, 6)).Float64())
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "Started", "started")
		synctest.Wait()

		expectCalls := func(n int) {
			t.Helper()
			synctest.Wait()
			if got := len(h.sink.Calls()); got != n {
				t.Fatalf("%d tries at %v, want %d", got, h.clock.Since(start), n)
			}
		}
		expectCalls(1)
		h.clock.Step(firstWait - time.Nanosecond)
		expectCalls(1)
		h.clock.Step(time.Nanosecond)
		expectCalls(2)
		for n := 3; n <= maxTries; n++ {
			h.clock.Step(retryInterval - time.Nanosecond)
			expectCalls(n - 1)
			h.clock.Step(time.Nanosecond)
			expectCalls(n)
		}
		synctest.Wait()
		if h.clock.HasWaiters() {
			t.Error("still waiting after the last try")
		}
		h.clock.Step(time.Hour)
		expectCalls(maxTries)
		if n := len(h.logs.Entries("Unable to write event (may retry after sleeping)")); n != maxTries {
			t.Errorf("%d retry lines, want %d", n, maxTries)
		}
		if n := len(h.logs.Entries("Unable to write event (retry limit exceeded!)")); n != 1 {
			t.Errorf("%d give-up lines, want 1", n)
		}
	})
}

func TestFinalErrorsAreNotRetried(t *testing.T) {
	tests := map[string]error{
		"already exists": apierrors.NewAlreadyExists(gr, "web-0.1"),
		"wrapped":        fmt.Errorf("create: %w", apierrors.NewAlreadyExists(gr, "web-0.1")),
		"invalid":        apierrors.NewBadRequest("no"),
	}
	for name, err := range tests {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, &fakeSink{fail: failOn("create", always, err)})
				h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "Started", "started")
				synctest.Wait()
				if h.clock.HasWaiters() {
					t.Error("waiting to retry")
				}
				h.clock.Step(time.Hour)
				synctest.Wait()
				if n := len(h.sink.Calls()); n != 1 {
					t.Errorf("%d tries, want 1", n)
				}
			})
		})
	}
}

func TestAggregation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		for i := range 11 {
			h.rec.Eventf(testPod("web-0"), v1.EventTypeWarning, "FailedMount", "volume %d", i)
			synctest.Wait()
			h.clock.Step(time.Second)
		}
		calls := h.sink.Calls()
		wantCalls(t, calls, repeat("create", 10)+",patch", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2)
		if len(calls) != 11 {
			return
		}
		for i, c := range calls[:9] {
			if c.Event.Message != fmt.Sprintf("volume %d", i) {
				t.Errorf("event %d message %q", i, c.Event.Message)
			}
		}
		agg := calls[9].Event
		if agg.Message != "(combined from similar events): volume 9" || agg.ReportingController != "" ||
			agg.Name != "web-0."+fmt.Sprintf("%x", start.Add(9*time.Second).UnixNano()) {
			t.Errorf("aggregate event %s", dump(agg))
		}
		if p := calls[10]; p.Event.Name != agg.Name || p.Event.Message != "(combined from similar events): volume 10" {
			t.Errorf("second aggregate %s", dump(p))
		}
	})
}

func TestSpamFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		emit := func(reason string) {
			h.rec.Event(testPod("web-0"), v1.EventTypeNormal, reason, "m")
			synctest.Wait()
		}
		for i := range 26 {
			emit(fmt.Sprintf("R%d", i))
		}
		if n := len(h.sink.Calls()); n != 25 {
			t.Fatalf("%d events through, want 25", n)
		}
		h.clock.Step(5*time.Minute - time.Millisecond)
		emit("Early")
		h.clock.Step(time.Millisecond)
		emit("OnTime")
		emit("Late")
		calls := h.sink.Calls()
		if len(calls) != 26 || calls[25].Event.Reason != "OnTime" {
			t.Errorf("after 5 minutes: %d events, last %s", len(calls), calls[len(calls)-1].Event.Reason)
		}
	})
}

func TestStructuredLogging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil) // logging only
		ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web-0", Namespace: "ns-1", FieldPath: "spec.containers{app}"}
		h.rec.Event(ref, v1.EventTypeWarning, "BackOff", "back-off")
		synctest.Wait()
		want := []logEntry{{Level: logVerbosity, Msg: "Event occurred", KV: []any{
			"object", klog.KRef("ns-1", "web-0"), "fieldPath", "spec.containers{app}", "kind", "Pod",
			"apiVersion", "v1", "type", "Warning", "reason", "BackOff", "message", "back-off",
		}}}
		if got := h.logs.Entries("Event occurred"); !reflect.DeepEqual(got, want) {
			t.Errorf("logged %s, want %s", dump(got), dump(want))
		}
	})
}

// A full queue drops events; the recorder does not wait.
func TestFullQueueDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		h := newHarness(t, &fakeSink{gate: gate}, WithQueueLength(2))
		emit := func(i int) {
			h.rec.Event(testPod("web-0"), v1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
			synctest.Wait()
		}
		emit(0) // taken, the sink holds it
		emit(1) // queued
		emit(2) // queued
		emit(3) // dropped
		if n := len(h.logs.Entries("Unable to record event: too many queued events, dropped event")); n != 1 {
			t.Errorf("%d drop lines, want 1", n)
		}
		close(gate)
		synctest.Wait()
		var reasons []string
		for _, c := range h.sink.Calls() {
			reasons = append(reasons, c.Event.Reason)
		}
		if got := strings.Join(reasons, ","); got != "R0,R1,R2" {
			t.Errorf("written %s, want R0,R1,R2", got)
		}
		if n := len(h.logs.Entries("Event occurred")); n != 4 {
			t.Errorf("%d events logged, want 4 (the log queue was not full)", n)
		}
	})
}

// Shutdown waits for the sink call in progress, drops what is queued and
// refuses new events. Run a few times: when the sink call ends, both the
// stop and the queued event are ready, and the stop must win every time.
func TestShutdown(t *testing.T) {
	for range 20 {
		testShutdown(t)
	}
}

func testShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		h := newHarness(t, &fakeSink{gate: gate})
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "R0", "m")
		synctest.Wait()
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "R1", "m")
		done := make(chan struct{})
		go func() {
			h.b.Shutdown()
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Shutdown returned during a sink call")
		default:
		}
		close(gate)
		<-done
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "R2", "m")
		h.b.Shutdown() // again
		if calls := h.sink.Calls(); len(calls) != 1 || calls[0].Event.Reason != "R0" {
			t.Errorf("written %s, want R0 only", dump(calls))
		}
		if n := len(h.logs.Entries("Unable to record event (will not retry!)")); n != 1 {
			t.Errorf("%d refusal lines, want 1", n)
		}
	})
}

// Shutdown ends the wait between tries.
func TestShutdownDuringRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{fail: failOn("create", always, errors.New("connection refused"))})
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "R0", "m")
		synctest.Wait()
		h.b.Shutdown()
		h.clock.Step(time.Hour)
		synctest.Wait()
		if n := len(h.sink.Calls()); n != 1 {
			t.Errorf("%d tries, want 1", n)
		}
		if n := len(h.logs.Entries("Unable to write event (broadcaster is shut down)")); n != 1 {
			t.Errorf("%d shut-down lines, want 1", n)
		}
	})
}

// The Broadcaster stops with its context.
func TestContextCancelStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logRecorder{}
		sink := &fakeSink{}
		ctx, cancel := context.WithCancel(logs.context(t.Context()))
		b := NewBroadcaster(ctx, sink)
		rec := b.NewRecorder(testScheme(t), testSource)
		cancel()
		synctest.Wait()
		rec.Event(testPod("web-0"), v1.EventTypeNormal, "R0", "m")
		b.Shutdown()
		if n := len(sink.Calls()); n != 0 {
			t.Errorf("%d writes after cancel", n)
		}
		if n := len(logs.Entries("Unable to record event (will not retry!)")); n != 1 {
			t.Errorf("%d refusal lines, want 1", n)
		}
	})
}
