package syncloop_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/syncloop"
)

// spanRuntime records the span each SyncPod and KillPod ran under.
type spanRuntime struct {
	nodekit.Runtime
	mu    sync.Mutex
	spans []trace.SpanContext
}

func (r *spanRuntime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	r.mu.Lock()
	r.spans = append(r.spans, trace.SpanContextFromContext(ctx))
	r.mu.Unlock()
	return r.Runtime.SyncPod(ctx, req)
}

func (r *spanRuntime) KillPod(ctx context.Context, req nodekit.KillPodRequest) error {
	r.mu.Lock()
	r.spans = append(r.spans, trace.SpanContextFromContext(ctx))
	r.mu.Unlock()
	return r.Runtime.KillPod(ctx, req)
}

func TestTracing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rt *spanRuntime
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		n := agenttest.StartSimNode(t, agenttest.SimOptions{
			Runtime: func(f *agenttest.FakeRuntime) nodekit.Runtime { rt = &spanRuntime{Runtime: f}; return rt },
			Loop:    func(c *syncloop.Config) { c.TracerProvider = tp },
		})
		p := pod("u1", v1.RestartPolicyAlways, "app")
		n.AddPod(p)
		n.Settle(2 * time.Second)
		n.DeletePod(p) // graceful, 30 s
		n.Settle(5 * time.Second)

		byName := map[string][]sdktrace.ReadOnlySpan{}
		ids := map[trace.SpanID]string{}
		for _, s := range spans.Ended() {
			byName[s.Name()] = append(byName[s.Name()], s)
			ids[s.SpanContext().SpanID()] = s.Name()
		}
		for _, name := range []string{"syncPod", "syncTerminatingPod", "syncTerminatedPod"} {
			if len(byName[name]) == 0 {
				t.Fatalf("no %s span; spans: %v", name, names(spans.Ended()))
			}
			s := byName[name][0]
			want := map[attribute.Key]string{
				"k8s.pod.uid": "u1", "k8s.pod.name": "pod-u1", "k8s.namespace.name": "default", "k8s.pod": "default/pod-u1",
			}
			if name == "syncPod" {
				want["k8s.pod.update_type"] = "create"
			}
			got := map[attribute.Key]string{}
			for _, kv := range s.Attributes() {
				got[kv.Key] = kv.Value.AsString()
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s span: %s = %q, want %q (all: %v)", name, k, got[k], v, got)
				}
			}
			if name != "syncPod" {
				if _, ok := got["k8s.pod.update_type"]; ok {
					t.Errorf("%s span has k8s.pod.update_type; upstream's has none", name)
				}
			}
		}
		// The runtime's calls run under the step's span (the CRI spans of
		// criruntime become its children).
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if len(rt.spans) < 2 {
			t.Fatalf("runtime saw %d SyncPod/KillPod calls, want a sync and a kill", len(rt.spans))
		}
		for i, sc := range rt.spans {
			if name := ids[sc.SpanID()]; name != "syncPod" && name != "syncTerminatingPod" {
				t.Errorf("runtime call %d ran under span %q, want syncPod or syncTerminatingPod", i, name)
			}
		}
	})
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
