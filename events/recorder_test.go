package events

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
)

// harness is a Broadcaster on a fake clock writing to a fakeSink and
// logging to a logRecorder. Make it inside a synctest bubble: tests wait
// for the Broadcaster's goroutines with synctest.Wait.
type harness struct {
	clock *clocktesting.FakeClock
	sink  *fakeSink
	logs  *logRecorder
	b     *Broadcaster
	rec   *Recorder
}

func newHarness(t *testing.T, sink *fakeSink, opts ...Option) *harness {
	t.Helper()
	h := &harness{clock: clocktesting.NewFakeClock(start), sink: sink, logs: &logRecorder{}}
	opts = append([]Option{WithClock(h.clock)}, opts...)
	var s Sink // a nil *fakeSink would be a Sink that is not nil
	if sink != nil {
		s = sink
	}
	h.b = NewBroadcaster(h.logs.context(t.Context()), s, opts...)
	t.Cleanup(h.b.Shutdown)
	h.rec = h.b.NewRecorder(testScheme(t), testSource)
	return h
}

func TestRecorderBuildsEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		annotations := map[string]string{"a": "1"}
		h.rec.AnnotatedEventf(testPod("web-0"), annotations, v1.EventTypeWarning, "Failed", "exit code %d", 3)
		annotations["a"] = "changed by the caller"
		synctest.Wait()

		now := metav1.NewTime(start)
		want := &v1.Event{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "web-0." + strconv.FormatInt(start.UnixNano(), 16),
				Namespace:   "ns-1",
				Annotations: map[string]string{"a": "1"},
			},
			InvolvedObject: v1.ObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: "web-0", Namespace: "ns-1", UID: "uid-web-0", ResourceVersion: "42",
			},
			Reason:              "Failed",
			Message:             "exit code 3",
			FirstTimestamp:      now,
			LastTimestamp:       now,
			Count:               1,
			Type:                v1.EventTypeWarning,
			Source:              testSource,
			ReportingController: "kubelet",
			ReportingInstance:   "node-1",
		}
		calls := h.sink.Calls()
		if len(calls) != 1 || calls[0].Verb != "create" {
			t.Fatalf("sink calls %s, want create", verbs(calls))
		}
		if !reflect.DeepEqual(calls[0].Event, want) {
			t.Errorf("event\n%s\nwant\n%s", dump(calls[0].Event), dump(want))
		}
	})
}

func TestRecorderEventDefaultNamespace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		h.rec.Event(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, v1.EventTypeNormal, "Starting", "up")
		synctest.Wait()
		calls := h.sink.Calls()
		if len(calls) != 1 || calls[0].Event.Namespace != metav1.NamespaceDefault || calls[0].Event.InvolvedObject.Namespace != "" {
			t.Errorf("calls %s", dump(calls))
		}
	})
}

func TestRecorderDropsUnsupportedType(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		h.rec.Event(testPod("web-0"), "Info", "Started", "started")
		h.rec.Eventf(testPod("web-0"), "normal", "Started", "started")
		h.rec.Event(testPod("web-0"), v1.EventTypeNormal, "Started", "started")
		synctest.Wait()
		if calls := h.sink.Calls(); len(calls) != 1 || calls[0].Event.Type != v1.EventTypeNormal {
			t.Errorf("calls %s, want the Normal event only", dump(calls))
		}
		logged := h.logs.Entries("Unsupported event type")
		if len(logged) != 2 || logged[0].Level != -1 || !reflect.DeepEqual(logged[0].KV, []any{"eventType", "Info"}) {
			t.Errorf("logged %s", dump(logged))
		}
	})
}

func TestRecorderDropsObjectWithoutReference(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		h.rec.Event(nil, v1.EventTypeNormal, "Started", "started")
		h.rec.Event((*v1.Pod)(nil), v1.EventTypeNormal, "Started", "started")
		h.rec.Event((*v1.ObjectReference)(nil), v1.EventTypeNormal, "Started", "started")
		h.rec.Event(&widget{}, v1.EventTypeNormal, "Started", "started")
		synctest.Wait()
		if calls := h.sink.Calls(); len(calls) != 0 {
			t.Errorf("calls %s, want none", dump(calls))
		}
		if logged := h.logs.Entries("Could not construct reference, will not report event"); len(logged) != 4 {
			t.Errorf("logged %s, want 4 lines", dump(logged))
		}
	})
}

// widget is a type no scheme knows.
type widget struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (w *widget) DeepCopyObject() runtime.Object { c := *w; return &c }

// bare is an object without metadata.
type bare struct{ metav1.TypeMeta }

func (b *bare) DeepCopyObject() runtime.Object { c := *b; return &c }

func TestReference(t *testing.T) {
	scheme := testScheme(t)
	given := &v1.ObjectReference{Kind: "Pod", Name: "web-0", Namespace: "ns-1", FieldPath: "spec.containers{app}"}
	tests := []struct {
		name    string
		scheme  *runtime.Scheme
		object  runtime.Object
		want    *v1.ObjectReference
		wantErr bool
	}{{
		name:   "kind from the scheme",
		scheme: scheme,
		object: testPod("web-0"),
		want: &v1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: "web-0", Namespace: "ns-1", UID: "uid-web-0", ResourceVersion: "42",
		},
	}, {
		name: "kind from TypeMeta, before the scheme",
		object: &widget{
			TypeMeta:   metav1.TypeMeta{Kind: "Widget", APIVersion: "example.com/v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns-2", UID: "u", ResourceVersion: "9"},
		},
		scheme: scheme,
		want: &v1.ObjectReference{
			Kind: "Widget", APIVersion: "example.com/v1", Name: "w", Namespace: "ns-2", UID: "u", ResourceVersion: "9",
		},
	}, {
		name:   "an object reference as given",
		object: given,
		want:   given,
	}, {
		name:   "a list has only a resourceVersion",
		scheme: scheme,
		object: &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}},
		want:   &v1.ObjectReference{Kind: "PodList", APIVersion: "v1", ResourceVersion: "5"},
	}, {
		name:    "no kind and no scheme",
		object:  testPod("web-0"),
		wantErr: true,
	}, {
		name:    "not in the scheme",
		scheme:  scheme,
		object:  &widget{},
		wantErr: true,
	}, {
		name:    "no metadata",
		scheme:  scheme,
		object:  &bare{TypeMeta: metav1.TypeMeta{Kind: "Bare", APIVersion: "v1"}},
		wantErr: true,
	}, {
		name:    "nil",
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := reference(tt.scheme, tt.object)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %t", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reference %s, want %s", dump(got), dump(tt.want))
			}
		})
	}
	if got, _ := reference(nil, given); got != given {
		t.Errorf("a reference is copied, want it used as given")
	}
}

func TestReferenceFieldPathInEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, &fakeSink{})
		ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web-0", Namespace: "ns-1", FieldPath: "spec.containers{app}"}
		h.rec.Event(ref, v1.EventTypeNormal, "Pulled", "pulled")
		synctest.Wait()
		calls := h.sink.Calls()
		if len(calls) != 1 || calls[0].Event.InvolvedObject != *ref {
			t.Errorf("calls %s, want the reference as involved object", dump(calls))
		}
	})
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// An object whose name makes an invalid event name gets a random one.
func TestEventNameFallsBackToUUID(t *testing.T) {
	b := &Broadcaster{rand: &lockedRand{r: rand.New(rand.NewPCG(3, 4))}}
	tests := map[string]bool{ // name -> whether the usual name is kept
		"web-0":                  true,
		"a.b.c":                  true,
		strings.Repeat("a", 236): true, // 236 + "." + 16 hex digits = 253
		strings.Repeat("a", 237): false,
		"Upper":                  false,
		"under_score":            false,
		"":                       false, // ".<hex>" starts with a dot
	}
	for name, kept := range tests {
		got := b.eventName(name, 0x1234567890abcdef)
		if kept != (got == name+".1234567890abcdef") {
			t.Errorf("%q: name %q", name, got)
		}
		if !kept && !uuidPattern.MatchString(got) {
			t.Errorf("%q: name %q, want a version 4 UUID", name, got)
		}
	}
	if a, c := b.eventName("Upper", 1), b.eventName("Upper", 1); a == c {
		t.Errorf("two fallback names alike: %q", a)
	}
}
