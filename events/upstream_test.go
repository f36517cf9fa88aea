package events

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// These tests run the same script against client-go's record and against
// this package, each in a synctest bubble of its own (so both read the
// same fake time: record's recorder reads the wall clock), and compare
// what reached the sink, call by call, and what was logged.

// advance moves the bubble's fake clock by d. Inside synctest.Test a
// sleep returns, without real time passing, once every other goroutine of
// the bubble is blocked and the clock has reached the end of the sleep.
func advance(d time.Duration) { time.Sleep(d) }

type scenario struct {
	name   string
	fail   func(n int, verb string) error
	script func(r record.EventRecorder)
	// check asserts what the scenario is about on this package's calls,
	// so that it fails even if both implementations were wrong alike.
	check func(t *testing.T, calls []sinkCall)
}

type runResult struct {
	calls    []sinkCall
	logged   []logEntry // "Event occurred"
	sinkLogs []logEntry // the lines about writing to the sink
}

// sinkMessages are the lines record logs with the broadcaster's
// logger while writing to the sink (the recorder's own errors go to
// klog's global logger there, so they cannot be compared).
var sinkMessages = []string{
	"Server rejected event (will not retry!)",
	"Unable to construct event (will not retry!)",
	"Unable to write event (may retry after sleeping)",
	"Unable to write event (retry limit exceeded!)",
	"Unable to write event (broadcaster is shut down)",
	"Event correlation failed",
}

func collect(sink *fakeSink, logs *logRecorder) runResult {
	res := runResult{calls: sink.Calls(), logged: logs.Entries("Event occurred")}
	for _, e := range logs.Entries("") {
		if slices.Contains(sinkMessages, e.Msg) {
			res.sinkLogs = append(res.sinkLogs, e)
		}
	}
	return res
}

func runUpstream(t *testing.T, sc scenario) runResult {
	var res runResult
	synctest.Test(t, func(t *testing.T) {
		logs := &logRecorder{}
		sink := &fakeSink{fail: sc.fail}
		b := record.NewBroadcaster(record.WithContext(logs.context(t.Context())))
		b.StartStructuredLogging(3)
		b.StartRecordingToSink(sink)
		sc.script(b.NewRecorder(testScheme(t), testSource))
		advance(time.Hour) // past every retry
		synctest.Wait()
		b.Shutdown()
		res = collect(sink, logs)
	})
	return res
}

func runOurs(t *testing.T, sc scenario) runResult {
	var res runResult
	synctest.Test(t, func(t *testing.T) {
		logs := &logRecorder{}
		sink := &fakeSink{fail: sc.fail}
		b := NewBroadcaster(logs.context(t.Context()), sink)
		sc.script(b.NewRecorder(testScheme(t), testSource))
		advance(time.Hour)
		synctest.Wait()
		b.Shutdown()
		res = collect(sink, logs)
	})
	return res
}

func TestSameAsRecord(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			want := runUpstream(t, sc)
			got := runOurs(t, sc)
			compareRuns(t, got, want)
			sc.check(t, got.calls)
		})
	}
}

func compareRuns(t *testing.T, got, want runResult) {
	t.Helper()
	if len(got.calls) != len(want.calls) {
		t.Errorf("%d sink calls (%s), record made %d (%s)", len(got.calls), verbs(got.calls), len(want.calls), verbs(want.calls))
	}
	for i := range min(len(got.calls), len(want.calls)) {
		if !reflect.DeepEqual(got.calls[i], want.calls[i]) {
			t.Errorf("sink call %d:\n%s\nrecord's:\n%s", i, dump(got.calls[i]), dump(want.calls[i]))
		}
	}
	if !reflect.DeepEqual(got.logged, want.logged) {
		t.Errorf("event log lines:\n%s\nrecord's:\n%s", dump(got.logged), dump(want.logged))
	}
	if !reflect.DeepEqual(got.sinkLogs, want.sinkLogs) {
		t.Errorf("sink log lines:\n%s\nrecord's:\n%s", dump(got.sinkLogs), dump(want.sinkLogs))
	}
}

// wantCalls checks the verbs of calls and, for each, the count and
// whether the message is an aggregate.
func wantCalls(t *testing.T, calls []sinkCall, want string, counts ...int32) {
	t.Helper()
	if got := verbs(calls); got != want {
		t.Errorf("sink calls %s, want %s", got, want)
	}
	for i, c := range calls {
		if i < len(counts) && c.Event.Count != counts[i] {
			t.Errorf("call %d: count %d, want %d", i, c.Event.Count, counts[i])
		}
	}
}

func repeat(s string, n int) string {
	return strings.TrimSuffix(strings.Repeat(s+",", n), ",")
}

func failOn(verb string, nth func(int) bool, err error) func(int, string) error {
	return func(n int, v string) error {
		if v == verb && nth(n) {
			return err
		}
		return nil
	}
}

func always(int) bool  { return true }
func first(n int) bool { return n == 0 }

var gr = schema.GroupResource{Resource: "events"}

func scenarios() []scenario {
	return slices.Concat(recordingScenarios(), aggregationScenarios(), spamScenarios(),
		patchErrorScenarios(), writeErrorScenarios())
}

func recordingScenarios() []scenario {
	return []scenario{
		{
			name: "first occurrences of several objects",
			script: func(r record.EventRecorder) {
				pod := testPod("web-0")
				node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}}
				r.Event(pod, v1.EventTypeNormal, "Scheduled", "placed")
				advance(time.Second)
				r.Eventf(node, v1.EventTypeWarning, "Rebooted", "node %s rebooted %d times", "node-1", 2)
				r.Event(&v1.ObjectReference{Kind: "Pod", Namespace: "ns-1", Name: "web-0", FieldPath: "spec.containers{app}"},
					v1.EventTypeNormal, "Pulled", "image pulled")
				r.AnnotatedEventf(pod, map[string]string{"a": "1", "b": "2"}, v1.EventTypeWarning, "Failed", "exit %d", 3)
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,create,create,create", 1, 1, 1, 1)
				if len(calls) == 4 && (calls[1].Event.Namespace != "default" || calls[2].Event.InvolvedObject.FieldPath == "") {
					t.Errorf("node event namespace %q, field path %q", calls[1].Event.Namespace, calls[2].Event.InvolvedObject.FieldPath)
				}
			},
		},
		{
			name: "a repeat is counted",
			script: func(r record.EventRecorder) {
				for range 5 {
					r.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off restarting")
					advance(time.Second)
				}
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,"+repeat("patch", 4), 1, 2, 3, 4, 5)
			},
		},
	}
}

func aggregationScenarios() []scenario {
	return []scenario{
		{
			name: "similar events aggregate",
			script: func(r record.EventRecorder) {
				for i := range 13 {
					r.Eventf(testPod("web-0"), v1.EventTypeWarning, "FailedMount", "volume %d not ready", i)
					advance(time.Second)
				}
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, repeat("create", 10)+","+repeat("patch", 3), 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 4)
				for i, c := range calls {
					if aggregated := strings.HasPrefix(c.Event.Message, aggregatePrefix); aggregated != (i >= 9) {
						t.Errorf("call %d message %q", i, c.Event.Message)
					}
				}
			},
		},
		{
			name: "aggregation holds within the interval",
			script: func(r record.EventRecorder) {
				for i := range 10 {
					if i == 9 {
						advance(600 * time.Second)
					}
					r.Eventf(testPod("web-0"), v1.EventTypeWarning, "FailedMount", "volume %d not ready", i)
				}
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, repeat("create", 10))
				if len(calls) == 10 && !strings.HasPrefix(calls[9].Event.Message, aggregatePrefix) {
					t.Errorf("10th event not aggregated: %q", calls[9].Event.Message)
				}
			},
		},
		{
			name: "aggregation starts over after the interval",
			script: func(r record.EventRecorder) {
				for i := range 12 {
					if i == 9 {
						advance(601 * time.Second)
					}
					r.Eventf(testPod("web-0"), v1.EventTypeWarning, "FailedMount", "volume %d not ready", i)
				}
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, repeat("create", 12))
				for _, c := range calls {
					if strings.HasPrefix(c.Event.Message, aggregatePrefix) {
						t.Errorf("aggregated: %q", c.Event.Message)
					}
				}
			},
		},
	}
}

func spamScenarios() []scenario {
	return []scenario{
		{
			name: "the spam filter allows 25 events per object, then one per 5 minutes",
			script: func(r record.EventRecorder) {
				for i := range 30 {
					r.Event(testPod("web-0"), v1.EventTypeNormal, fmt.Sprintf("Reason%d", i), "m")
					advance(time.Second)
				}
				r.Event(testPod("web-1"), v1.EventTypeNormal, "Other", "another object")
				r.Event(testPod("web-0"), v1.EventTypeWarning, "Other", "another type")
				advance(5 * time.Minute)
				r.Event(testPod("web-0"), v1.EventTypeNormal, "Late1", "m")
				r.Event(testPod("web-0"), v1.EventTypeNormal, "Late2", "m")
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, repeat("create", 28))
				if len(calls) == 28 && calls[27].Event.Reason != "Late1" {
					t.Errorf("last event %s, want Late1", calls[27].Event.Reason)
				}
			},
		},
		{
			name: "the spam filter counts repeats it drops",
			script: func(r record.EventRecorder) {
				for range 30 {
					r.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
					advance(time.Second)
				}
				advance(5 * time.Minute)
				r.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
			},
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,"+repeat("patch", 25))
				if len(calls) == 26 && calls[25].Event.Count != 31 {
					t.Errorf("last count %d, want 31", calls[25].Event.Count)
				}
			},
		},
	}
}

// threeRepeats records the same event three times, a second apart.
func threeRepeats(r record.EventRecorder) {
	for range 3 {
		r.Event(testPod("web-0"), v1.EventTypeWarning, "BackOff", "back-off")
		advance(time.Second)
	}
}

// twoEvents records two different events ten minutes apart.
func twoEvents(r record.EventRecorder) {
	r.Event(testPod("web-0"), v1.EventTypeNormal, "Started", "started")
	advance(10 * time.Minute)
	r.Event(testPod("web-0"), v1.EventTypeNormal, "Killing", "stopping")
}

func patchErrorScenarios() []scenario {
	return []scenario{
		{
			name:   "a patch of a deleted event falls back to create",
			fail:   failOn("patch", first1, apierrors.NewNotFound(gr, "x")),
			script: threeRepeats,
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,patch,create,patch", 1, 2, 2, 3)
			},
		},
		{
			name:   "a patch refused otherwise is not retried nor created",
			fail:   failOn("patch", first1, apierrors.NewConflict(gr, "x", errors.New("changed"))),
			script: threeRepeats,
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,patch,patch", 1, 2, 3)
			},
		},
		{
			name:   "a patch is given up after 12 tries",
			fail:   failOn("patch", always, errors.New("connection refused")),
			script: threeRepeats,
			check: func(t *testing.T, calls []sinkCall) {
				wantCalls(t, calls, "create,"+repeat("patch", 24))
				if len(calls) == 25 && calls[24].Event.Count != 3 {
					t.Errorf("last count %d, want 3", calls[24].Event.Count)
				}
			},
		},
	}
}

func writeErrorScenarios() []scenario {
	terminating := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: v1.NamespaceTerminatingCause}}},
	}}
	return []scenario{
		{
			name: "transport errors are retried",
			fail: failOn("create", func(n int) bool { return n < 3 }, errors.New("connection refused")),
			script: func(r record.EventRecorder) {
				r.Event(testPod("web-0"), v1.EventTypeNormal, "Started", "started")
			},
			check: func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, repeat("create", 4)) },
		},
		{
			name:   "a write is given up after 12 tries",
			fail:   failOn("create", always, errors.New("connection refused")),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, repeat("create", 24)) },
		},
		{
			name:   "already exists is final",
			fail:   failOn("create", first, apierrors.NewAlreadyExists(gr, "x")),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create,create") },
		},
		{
			name:   "a terminating namespace is final",
			fail:   failOn("create", first, terminating),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create,create") },
		},
		{
			name:   "server errors are final",
			fail:   failOn("create", first, apierrors.NewInternalError(errors.New("etcd"))),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create,create") },
		},
		{
			name:   "request construction errors are final",
			fail:   failOn("create", first, &rest.RequestConstructionError{Err: errors.New("bad")}),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create,create") },
		},
		{
			name:   "unexpected objects are retried",
			fail:   failOn("create", first, &apierrors.UnexpectedObjectError{Object: &v1.Pod{}}),
			script: twoEvents,
			check:  func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create,create,create") },
		},
		{
			name: "bad types and objects are dropped",
			script: func(r record.EventRecorder) {
				r.Event(testPod("web-0"), "Info", "Started", "started")
				r.Event(nil, v1.EventTypeNormal, "Started", "started")
				r.Event(&v1.Pod{TypeMeta: metav1.TypeMeta{}, ObjectMeta: metav1.ObjectMeta{Name: "x"}}, v1.EventTypeNormal, "Ok", "ok")
			},
			check: func(t *testing.T, calls []sinkCall) { wantCalls(t, calls, "create") },
		},
	}
}

func first1(n int) bool { return n == 1 }
