package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps h in a server span per request when Config.TracerProvider is
// set, as kubelet installs go-restful's OpenTelemetry filter on its
// server: spans of the "kubelet" instrumentation, named by the route
// (routeNamed renames them once the mux has matched one). public marks the
// read-only port, whose callers' trace context is not trusted: its spans
// start new traces linked to the caller's.
func (s *Server) traced(public bool, h http.Handler) http.Handler {
	if s.cfg.TracerProvider == nil {
		return h
	}
	opts := []otelhttp.Option{otelhttp.WithTracerProvider(s.cfg.TracerProvider),
		// "kubelet" until routeNamed knows the route (a request no route
		// matched keeps it).
		otelhttp.WithSpanNameFormatter(func(operation string, _ *http.Request) string { return operation })}
	if public {
		opts = append(opts, otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
	}
	return otelhttp.NewHandler(h, "kubelet", opts...)
}

// routeNamed serves mux and then names the request's span after the route
// the mux matched ("GET /stats/summary" becomes "/stats/summary", with
// http.route set), as the go-restful filter names its spans by route
// path. Without Config.TracerProvider it is mux.
func (s *Server) routeNamed(mux http.Handler) http.Handler {
	if s.cfg.TracerProvider == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The mux sets Pattern on the request it is given: a copy, so that
		// otelhttp does not rename the span "METHOD pattern" after it.
		r = r.WithContext(r.Context())
		mux.ServeHTTP(w, r)
		span := trace.SpanFromContext(r.Context())
		if !span.IsRecording() || r.Pattern == "" {
			return
		}
		route := r.Pattern
		if _, path, ok := strings.Cut(route, " "); ok {
			route = path
		}
		span.SetName(route)
		span.SetAttributes(attribute.String("http.route", route))
	})
}
