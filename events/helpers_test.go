package events

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// start is where the fake clocks of the tests start.
var start = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC)

var testSource = v1.EventSource{Component: "kubelet", Host: "node-1"}

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func testPod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns-1", UID: types.UID("uid-" + name), ResourceVersion: "42",
	}}
}

// sinkCall is one call a fakeSink received.
type sinkCall struct {
	Verb  string // "create" or "patch"
	Event *v1.Event
	Patch string
}

// fakeSink records its calls and stores events as an API server would,
// giving each write a new resourceVersion. fail, if set, is asked for
// the error of each call (n counts calls from 0). gate, if set, is
// received from before each call is answered.
type fakeSink struct {
	fail func(n int, verb string) error
	gate chan struct{}

	mu    sync.Mutex
	calls []sinkCall
}

func (s *fakeSink) Create(e *v1.Event) (*v1.Event, error) { return s.call("create", e, nil) }
func (s *fakeSink) Update(e *v1.Event) (*v1.Event, error) { return s.call("update", e, nil) }
func (s *fakeSink) Patch(e *v1.Event, data []byte) (*v1.Event, error) {
	return s.call("patch", e, data)
}

func (s *fakeSink) call(verb string, e *v1.Event, patch []byte) (*v1.Event, error) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.calls)
	s.calls = append(s.calls, sinkCall{Verb: verb, Event: e.DeepCopy(), Patch: string(patch)})
	if s.fail != nil {
		if err := s.fail(n, verb); err != nil {
			return nil, err
		}
	}
	stored := e.DeepCopy()
	stored.ResourceVersion = "rv-" + strings.Repeat("i", n+1)
	return stored, nil
}

func (s *fakeSink) Calls() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// logEntry is one line logged; Level is -1 for an error. Values are
// copied when logged: events deep, errors as their text.
type logEntry struct {
	Level int
	Msg   string
	Err   string
	KV    []any
}

// logRecorder collects the lines of loggers made by logger().
type logRecorder struct {
	mu      sync.Mutex
	entries []logEntry
}

func (r *logRecorder) logger() logr.Logger { return logr.New(captureSink{r: r}) }

// context returns ctx with a logger that records into r.
func (r *logRecorder) context(ctx context.Context) context.Context {
	return klog.NewContext(ctx, r.logger())
}

func (r *logRecorder) add(level int, msg string, err error, kv []any) {
	e := logEntry{Level: level, Msg: msg}
	if err != nil {
		e.Err = err.Error()
	}
	for _, v := range kv {
		switch v := v.(type) {
		case *v1.Event:
			e.KV = append(e.KV, v.DeepCopy())
		case error:
			e.KV = append(e.KV, v.Error())
		default:
			e.KV = append(e.KV, v)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

// Entries returns the entries whose message is msg, or all if msg is "".
func (r *logRecorder) Entries(msg string) []logEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logEntry
	for _, e := range r.entries {
		if msg == "" || e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}

type captureSink struct {
	r  *logRecorder
	kv []any
}

func (s captureSink) Init(logr.RuntimeInfo)        {}
func (s captureSink) Enabled(int) bool             { return true }
func (s captureSink) WithName(string) logr.LogSink { return s }
func (s captureSink) Info(level int, msg string, kv ...any) {
	s.r.add(level, msg, nil, append(slices.Clip(s.kv), kv...))
}
func (s captureSink) Error(err error, msg string, kv ...any) {
	s.r.add(-1, msg, err, append(slices.Clip(s.kv), kv...))
}
func (s captureSink) WithValues(kv ...any) logr.LogSink {
	return captureSink{r: s.r, kv: append(slices.Clip(s.kv), kv...)}
}

// dump renders v for a failure message.
func dump(v any) string {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func verbs(calls []sinkCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Verb)
	}
	return strings.Join(out, ",")
}
