package events

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// upstreamRepeatPatch is the patch record sends for a repeated event.
func upstreamRepeatPatch(t *testing.T, e *v1.Event) string {
	t.Helper()
	base := *e
	base.Count = 0
	base.LastTimestamp = metav1.NewTime(time.Unix(0, 0))
	base.Message = ""
	return upstreamPatch(t, &base, e)
}

func upstreamPatch(t *testing.T, from, to *v1.Event) string {
	t.Helper()
	old, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	updated, err := json.Marshal(to)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(old, updated, v1.Event{})
	if err != nil {
		t.Fatal(err)
	}
	return string(patch)
}

func baseEvent() *v1.Event {
	t := metav1.NewTime(start)
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0.18a2b", Namespace: "ns-1", ResourceVersion: "7"},
		InvolvedObject: v1.ObjectReference{
			Kind: "Pod", Namespace: "ns-1", Name: "web-0", UID: "u", APIVersion: "v1", FieldPath: "spec.containers{app}",
		},
		Reason: "BackOff", Message: "back-off restarting", Type: v1.EventTypeWarning,
		FirstTimestamp: t, LastTimestamp: metav1.NewTime(start.Add(time.Minute)), Count: 2,
		Source: testSource, ReportingController: "kubelet", ReportingInstance: "node-1",
	}
}

func TestRepeatPatchIsStrategicPatch(t *testing.T) {
	tests := map[string]func(e *v1.Event){
		"count and timestamp and message": func(*v1.Event) {},
		"large count":                     func(e *v1.Event) { e.Count = 1<<31 - 1 },
		"count zero":                      func(e *v1.Event) { e.Count = 0 },
		"no message":                      func(e *v1.Event) { e.Message = "" },
		"html and quotes":                 func(e *v1.Event) { e.Message = `<a href="x">&'</a>` + "\t\n\\" },
		"unicode":                         func(e *v1.Event) { e.Message = "ünïcødé \u2028 \u2029 😀" },
		"invalid utf-8":                   func(e *v1.Event) { e.Message = "bad \xff\xfe bytes" },
		"no last timestamp":               func(e *v1.Event) { e.LastTimestamp = metav1.Time{} },
		"last timestamp at the epoch":     func(e *v1.Event) { e.LastTimestamp = metav1.NewTime(time.Unix(0, 0)) },
		"last timestamp within the epoch second": func(e *v1.Event) {
			e.LastTimestamp = metav1.NewTime(time.Unix(0, 999))
		},
		"sub-second last timestamp": func(e *v1.Event) { e.LastTimestamp = metav1.NewTime(start.Add(time.Millisecond)) },
		"annotations": func(e *v1.Event) {
			e.Annotations = map[string]string{"b": "2", "a": "1", "<x>": "&"}
		},
		"aggregated": func(e *v1.Event) {
			e.Message = aggregatePrefix + e.Message
			e.ReportingController, e.ReportingInstance = "", ""
		},
		"empty event": func(e *v1.Event) { *e = v1.Event{} },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			e := baseEvent()
			change(e)
			got, err := repeatPatch(e)
			if err != nil {
				t.Fatal(err)
			}
			if want := upstreamRepeatPatch(t, e); string(got) != want {
				t.Errorf("patch\n%s\nstrategicpatch's\n%s", got, want)
			}
		})
	}
}

// TestRepeatPatchRandom compares with strategicpatch on random events.
func TestRepeatPatchRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09 -_.<>&\"\\/\u00e9\u2028\U0001F600\x00\x7f")
	str := func() string {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 500 {
		e := baseEvent()
		e.Count = r.Int32()
		e.Message = str()
		e.Reason = str()
		e.LastTimestamp = metav1.NewTime(time.Unix(r.Int64N(1<<34), r.Int64N(1e9)))
		if r.IntN(2) == 0 {
			e.Annotations = map[string]string{str(): str()}
		}
		got, err := repeatPatch(e)
		if err != nil {
			t.Fatal(err)
		}
		if want := upstreamRepeatPatch(t, e); string(got) != want {
			t.Fatalf("event %d: patch\n%s\nstrategicpatch's\n%s", i, got, want)
		}
	}
}

// TestMergePatchIsStrategicPatch compares mergePatch with strategicpatch
// on pairs of events that differ in more than a repeat's fields.
func TestMergePatchIsStrategicPatch(t *testing.T) {
	tests := map[string]func(e *v1.Event){
		"same":               func(*v1.Event) {},
		"annotation added":   func(e *v1.Event) { e.Annotations = map[string]string{"a": "1"} },
		"annotation changed": func(e *v1.Event) { e.Annotations["keep"] = "changed" },
		"annotation removed": func(e *v1.Event) { delete(e.Annotations, "drop") },
		"annotations removed": func(e *v1.Event) {
			e.Annotations = nil
		},
		"labels and reason": func(e *v1.Event) { e.Labels = map[string]string{"x": "y"}; e.Reason = "Other" },
		"source and object": func(e *v1.Event) {
			e.Source.Host = "node-2"
			e.InvolvedObject.FieldPath = ""
			e.InvolvedObject.UID = "v"
		},
		"reporting fields removed": func(e *v1.Event) { e.ReportingController, e.ReportingInstance = "", "" },
		"series added": func(e *v1.Event) {
			e.Series = &v1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(start)}
		},
		"count message timestamp": func(e *v1.Event) {
			e.Count, e.Message, e.LastTimestamp = 9, "new", metav1.Time{}
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			from := baseEvent()
			from.Annotations = map[string]string{"keep": "1", "drop": "2"}
			to := from.DeepCopy()
			change(to)
			got, err := mergePatch(from, to)
			if err != nil {
				t.Fatal(err)
			}
			if want := upstreamPatch(t, from, to); string(got) != want {
				t.Errorf("patch\n%s\nstrategicpatch's\n%s", got, want)
			}
		})
	}
}

// A strategic merge patch of a list depends on the list's merge keys,
// which mergePatch does not know: it refuses.
func TestMergePatchRefusesListChanges(t *testing.T) {
	from := baseEvent()
	from.Finalizers = []string{"a"}
	to := from.DeepCopy()
	to.Finalizers = []string{"a", "b"}
	if patch, err := mergePatch(from, to); err == nil {
		t.Errorf("patch %s, want an error", patch)
	}
	to.Finalizers = []string{"a"}
	if _, err := mergePatch(from, to); err != nil {
		t.Errorf("unchanged list: %v", err)
	}
}
