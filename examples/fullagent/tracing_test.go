package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	"k8s.io/utils/ptr"
)

// otlpCollector is an OTLP gRPC trace collector on loopback: it keeps
// every span exported to it.
type otlpCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []collectedSpan
}

// collectedSpan is one exported span, its IDs in hex.
type collectedSpan struct {
	name                    string
	traceID, spanID, parent string
	attrs, resource         map[string]string
}

func (s collectedSpan) String() string {
	return fmt.Sprintf("%s (trace %s, span %s, parent %s) %v", s.name, s.traceID, s.spanID, s.parent, s.attrs)
}

func startCollector(t *testing.T) *otlpCollector {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &otlpCollector{addr: l.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return c
}

func (c *otlpCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := stringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, collectedSpan{
					name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()), attrs: stringAttrs(s.GetAttributes()), resource: res,
				})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func stringAttrs(kvs []*commonv1.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

func (c *otlpCollector) collected() []collectedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collectedSpan(nil), c.spans...)
}

// The tracing block gives an OTLP gRPC exporter to tracing.endpoint with
// kubelet's resource, sampling samplingRatePerMillion; unset, no provider;
// without a rate, nothing is sampled.
func TestNewTracerProvider(t *testing.T) {
	if tp, err := newTracerProvider(t.Context(), nil, "n"); tp != nil || err != nil {
		t.Fatalf("no tracing block: %v, %v; want nil, nil", tp, err)
	}
	for _, tc := range []struct {
		name string
		rate *int32
		want int
	}{
		{"every trace", ptr.To[int32](1000000), 1},
		{"no rate: none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCollector(t)
			tp, err := newTracerProvider(t.Context(), &tracingapi.TracingConfiguration{Endpoint: &c.addr, SamplingRatePerMillion: tc.rate}, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("test").Start(t.Context(), "step")
			span.End()
			if err := tp.Shutdown(t.Context()); err != nil { // flushes
				t.Fatal(err)
			}
			got := c.collected()
			if len(got) != tc.want {
				t.Fatalf("collected %v, want %d span(s)", got, tc.want)
			}
			if tc.want > 0 && (got[0].name != "step" || got[0].resource["service.name"] != "kubelet" || got[0].resource["host.name"] != "node-a") {
				t.Fatalf("collected %v with resource %v; want step from service.name kubelet, host.name node-a", got[0], got[0].resource)
			}
		})
	}
}

// An agent with tracing at a collector sends, for a pod it runs, the pod
// worker's syncPod span with the pod's attributes and, in the same trace
// under it, the CRI calls that made the sandbox and the container, as
// kubelet does; the API client's requests (the pod's status PATCH among
// them) as client spans (kubelet's client-go transport wrapped by
// component-base's tracing.WrapperFor); and the garbage collectors'
// passes, named as kubelet's, with their CRI calls under them.
func TestTracing(t *testing.T) {
	c := startCollector(t)
	e := startEnv(t, envOption{config: fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", c.addr),
		flags: func(o *options) { o.imageGCPeriod, o.containerGCPeriod = 2*time.Second, 2*time.Second }})
	p := simplePod("traced", v1.RestartPolicyAlways, "sleep 3600")
	e.createPod(t, p)
	got := e.waitPod(t, "traced", 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	uid := string(got.UID)

	var syncs map[string]collectedSpan // spanID -> syncPod span of the pod
	var sandbox, create collectedSpan
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		spans := c.collected()
		syncs = map[string]collectedSpan{}
		for _, s := range spans {
			if s.name == "syncPod" && s.attrs["k8s.pod.uid"] == uid {
				syncs[s.spanID] = s
			}
		}
		sandbox, create = collectedSpan{}, collectedSpan{}
		for _, s := range spans {
			if _, ok := syncs[s.parent]; !ok {
				continue
			}
			switch s.name {
			case "runtime.v1.RuntimeService/RunPodSandbox":
				sandbox = s
			case "runtime.v1.RuntimeService/CreateContainer":
				create = s
			}
		}
		return sandbox.name != "" && create.name != "", nil
	})
	if err != nil {
		t.Fatalf("within 30s: syncPod spans of the pod %v; RunPodSandbox %q and CreateContainer %q under one of them; all spans:\n%v", syncs, sandbox.name, create.name, c.collected())
	}
	t.Logf("%d spans collected; %d syncPod spans of the pod; RunPodSandbox and CreateContainer under syncPod in trace %s", len(c.collected()), len(syncs), syncs[sandbox.parent].traceID)
	s := syncs[sandbox.parent]
	want := map[string]string{"k8s.pod.name": "traced", "k8s.namespace.name": "default", "k8s.pod": "default/traced", "k8s.pod.update_type": "create"}
	for k, v := range want {
		if s.attrs[k] != v {
			t.Errorf("syncPod span: %s = %q, want %q (%v)", k, s.attrs[k], v, s.attrs)
		}
	}
	if s.resource["service.name"] != "kubelet" || s.resource["host.name"] != testNode {
		t.Errorf("resource %v, want service.name kubelet, host.name %s", s.resource, testNode)
	}
	if sandbox.traceID != s.traceID || create.traceID != syncs[create.parent].traceID {
		t.Errorf("CRI spans in another trace than their syncPod: %v, %v, %v", s, sandbox, create)
	}
	testAPISpans(t, c, "/api/v1/namespaces/default/pods/traced/status")
	testGCSpans(t, c)
	testNodeAPISpans(t, e, c)
}

// testNodeAPISpans GETs /pods from the node API and finds its server span,
// named by the route as kubelet's, from the agent's resource.
func testNodeAPISpans(t *testing.T, e *env, c *otlpCollector) {
	t.Helper()
	if code, body, err := e.nodeAPIGet(t, e.adminTLS(t), "/pods"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /pods from the node API: %d %.200s %v", code, body, err)
	}
	var found collectedSpan
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, s := range c.collected() {
			if s.name == "/pods" && s.attrs["http.route"] == "/pods" {
				found = s
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var names []string
		for _, s := range c.collected() {
			names = append(names, s.name)
		}
		t.Fatalf("within 30s: no server span /pods of the node API; spans: %q", names)
	}
	if found.resource["service.name"] != "kubelet" || found.attrs["http.request.method"] != "GET" {
		t.Errorf("node API span %v (resource %v), want a GET from service.name kubelet", found, found.resource)
	}
}

// testAPISpans finds the API client's span of the PATCH of the pod's
// status (path): otelhttp's client span, "HTTP PATCH" with the request's
// method and URL, from the agent's resource.
func testAPISpans(t *testing.T, c *otlpCollector, path string) {
	t.Helper()
	var patch collectedSpan
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, s := range c.collected() {
			if s.name == "HTTP PATCH" && strings.HasSuffix(strings.SplitN(s.attrs["url.full"], "?", 2)[0], path) {
				patch = s
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var api []string
		for _, s := range c.collected() {
			if strings.HasPrefix(s.name, "HTTP ") {
				api = append(api, s.name+" "+s.attrs["url.full"])
			}
		}
		t.Fatalf("within 30s: no HTTP PATCH span of %s; API spans: %q", path, api)
	}
	if patch.attrs["http.request.method"] != "PATCH" || patch.resource["service.name"] != "kubelet" {
		t.Errorf("status PATCH span %v (resource %v), want http.request.method PATCH from service.name kubelet", patch, patch.resource)
	}
	t.Logf("status PATCH span: %v", patch)
}

// testGCSpans finds a pass of each garbage collector, named as kubelet's
// (Containers/GarbageCollect, Images/GarbageCollect), each with the CRI
// listing it made as a child span.
func testGCSpans(t *testing.T, c *otlpCollector) {
	t.Helper()
	want := map[string]string{
		"Containers/GarbageCollect": "runtime.v1.RuntimeService/ListContainers",
		"Images/GarbageCollect":     "runtime.v1.ImageService/ListImages",
	}
	found := map[string]bool{}
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		spans := c.collected()
		passes := map[string]string{} // spanID -> name
		for _, s := range spans {
			if _, ok := want[s.name]; ok {
				passes[s.spanID] = s.name
			}
		}
		for _, s := range spans {
			if pass, ok := passes[s.parent]; ok && want[pass] == s.name {
				found[pass] = true
			}
		}
		return len(found) == len(want), nil
	})
	if err != nil {
		var names []string
		for _, s := range c.collected() {
			if !strings.HasPrefix(s.name, "HTTP ") {
				names = append(names, s.name)
			}
		}
		t.Fatalf("within 30s: GC passes with their CRI listing found %v, want %v; spans: %q", found, want, names)
	}
}

// The tracing block is accepted (no longer refused) and validated as
// upstream.
func TestConfigTracing(t *testing.T) {
	cfg, err := loadWith(t, configHeader+"tracing: {endpoint: 'unix:///run/otel.sock', samplingRatePerMillion: 100}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing == nil || *cfg.Tracing.Endpoint != "unix:///run/otel.sock" || *cfg.Tracing.SamplingRatePerMillion != 100 {
		t.Fatalf("tracing %+v", cfg.Tracing)
	}
	if _, err := loadWith(t, configHeader+"tracing: {samplingRatePerMillion: -1}\n", nil); err == nil || !strings.Contains(err.Error(), "tracing.samplingRatePerMillion") {
		t.Fatalf("a negative rate: %v, want tracing.samplingRatePerMillion refused", err)
	}
}
