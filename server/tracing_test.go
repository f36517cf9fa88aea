package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestRequestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s, err := New(Config{NodeName: "node-1", AllowAnonymous: true, Authorizer: AlwaysAllow{}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []http.Handler{s.Handler(), s.ReadOnlyHandler()} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("GET /healthz: %d %s", w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/no-such-route", nil))
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want one per request (3)", len(spans))
	}
	for i, want := range []string{"/healthz", "/healthz", "kubelet"} {
		sp := spans[i]
		if sp.Name() != want || sp.SpanKind() != trace.SpanKindServer {
			t.Errorf("span %d: %q kind %v, want %q, a server span", i, sp.Name(), sp.SpanKind(), want)
		}
		if sp.InstrumentationScope().Name == "" {
			t.Errorf("span %d has no instrumentation scope", i)
		}
	}
	var route string
	for _, a := range spans[0].Attributes() {
		if a.Key == "http.route" {
			route = a.Value.AsString()
		}
	}
	if route != "/healthz" {
		t.Errorf("http.route = %q, want /healthz", route)
	}

	// Without a provider nothing is traced and requests are served.
	plain, err := New(Config{NodeName: "node-1", AllowAnonymous: true, Authorizer: AlwaysAllow{}})
	if err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	plain.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if w.Code != http.StatusOK || len(rec.Ended()) != 3 {
		t.Errorf("untraced server: %d, %d spans", w.Code, len(rec.Ended()))
	}
}
