package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// debugServer is a Server whose token "t" is user tester, authorized by
// authz.
func debugServer(t *testing.T, cfg Config, authz Authorizer) *Server {
	t.Helper()
	cfg.NodeName = "node-1"
	cfg.Authenticator = tokenAuthn(map[string]string{"t": "tester"})
	cfg.Authorizer = authz
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serveDebug(t *testing.T, s *Server, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer t")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

func TestProfilingHandler(t *testing.T) {
	on := debugServer(t, Config{}, AlwaysAllow{})
	w := serveDebug(t, on, "GET", "/debug/pprof/", "")
	if w.Code != 200 {
		t.Fatalf("index: %d %q", w.Code, w.Body)
	}
	for _, p := range []string{"goroutine", "heap", "allocs", "block", "mutex", "threadcreate", "cmdline", "profile", "symbol", "trace"} {
		if !strings.Contains(w.Body.String(), p) {
			t.Errorf("index lists no %q: %q", p, w.Body)
		}
	}
	// A named profile, and the special handlers by name.
	if w := serveDebug(t, on, "GET", "/debug/pprof/goroutine?debug=1", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "goroutine profile:") {
		t.Errorf("goroutine: %d %.200q", w.Code, w.Body)
	}
	if w := serveDebug(t, on, "GET", "/debug/pprof/cmdline", ""); w.Code != 200 || w.Body.Len() == 0 {
		t.Errorf("cmdline: %d %q", w.Code, w.Body)
	}
	if w := serveDebug(t, on, "GET", "/debug/pprof/symbol", ""); w.Code != 200 || !strings.HasPrefix(w.Body.String(), "num_symbols:") {
		t.Errorf("symbol: %d %q", w.Code, w.Body)
	}
	if w := serveDebug(t, on, "GET", "/debug/pprof/nosuch", ""); w.Code != 404 || !strings.Contains(w.Body.String(), "Unknown profile") {
		t.Errorf("unknown profile: %d %q", w.Code, w.Body)
	}
	if w := serveDebug(t, on, "POST", "/debug/pprof/", ""); w.Code != 405 || w.Header().Get("Allow") == "" {
		t.Errorf("POST: %d, Allow %q; want 405 with Allow", w.Code, w.Header().Get("Allow"))
	}

	off := debugServer(t, Config{DisableProfilingHandler: true}, AlwaysAllow{})
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile"} {
		if w := serveDebug(t, off, "GET", p, ""); w.Code != 405 || w.Body.String() != "profiling endpoint is disabled.\n" {
			t.Errorf("profiling off: %s: %d %q", p, w.Code, w.Body)
		}
	}
	// The debugging handlers' switch wins, as upstream.
	noDebug := debugServer(t, Config{DisableDebuggingHandlers: true}, AlwaysAllow{})
	if w := serveDebug(t, noDebug, "GET", "/debug/pprof/", ""); w.Code != 405 || w.Body.String() != "Debug endpoints are disabled.\n" {
		t.Errorf("debugging off: %d %q", w.Code, w.Body)
	}
	// Nor on the read-only port.
	r := httptest.NewRequestWithContext(t.Context(), "GET", "/debug/pprof/", nil)
	rw := httptest.NewRecorder()
	on.ReadOnlyHandler().ServeHTTP(rw, r)
	if rw.Code != 405 {
		t.Errorf("read-only port: %d %q", rw.Code, rw.Body)
	}
}

func TestDebugFlagsHandler(t *testing.T) {
	var got []string
	set := func(v string) (string, error) {
		got = append(got, v)
		if v != "4" {
			return "", errors.New("bad level " + v)
		}
		return "successfully set klog.logging.verbosity to " + v, nil
	}
	s := debugServer(t, Config{SetVerbosity: set}, AlwaysAllow{})
	w := serveDebug(t, s, "PUT", "/debug/flags/v", "4")
	if w.Code != 200 || w.Body.String() != "successfully set klog.logging.verbosity to 4\n" || w.Header().Get("Content-Type") != "text/plain" {
		t.Fatalf("PUT 4: %d %q %q", w.Code, w.Body, w.Header().Get("Content-Type"))
	}
	if w := serveDebug(t, s, "PUT", "/debug/flags/v", "x"); w.Code != 400 || w.Body.String() != "bad level x\n" {
		t.Errorf("PUT x: %d %q", w.Code, w.Body)
	}
	if w := serveDebug(t, s, "GET", "/debug/flags/v", ""); w.Code != 406 || w.Body.String() != "unsupported http method\n" {
		t.Errorf("GET: %d %q", w.Code, w.Body)
	}
	if strings.Join(got, ",") != "4,x" {
		t.Errorf("setter called with %q, want 4 then x", got)
	}

	unset := debugServer(t, Config{}, AlwaysAllow{})
	if w := serveDebug(t, unset, "PUT", "/debug/flags/v", "4"); w.Code != 405 || w.Body.String() != "flags endpoint is disabled.\n" {
		t.Errorf("no SetVerbosity: %d %q", w.Code, w.Body)
	}
	noDebug := debugServer(t, Config{SetVerbosity: set, DisableDebuggingHandlers: true}, AlwaysAllow{})
	if w := serveDebug(t, noDebug, "PUT", "/debug/flags/v", "4"); w.Code != 404 {
		t.Errorf("debugging off: %d %q, want 404 as upstream", w.Code, w.Body)
	}
	if len(got) != 2 {
		t.Errorf("setter called %d times, want 2", len(got))
	}
}

// The debug paths are authorized as nodes/proxy, verb from the method,
// and a refused caller never reaches the setter.
func TestDebugHandlersAuthorization(t *testing.T) {
	var seen []Attributes
	deny := AuthorizerFunc(func(_ context.Context, a Attributes) (bool, string, error) {
		seen = append(seen, a)
		return false, "", nil
	})
	called := false
	s := debugServer(t, Config{SetVerbosity: func(string) (string, error) { called = true; return "", nil }}, deny)
	for _, tc := range []struct{ method, path, verb string }{
		{"PUT", "/debug/flags/v", "update"},
		{"GET", "/debug/pprof/heap", "get"},
	} {
		seen = nil
		w := serveDebug(t, s, tc.method, tc.path, "4")
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "verb="+tc.verb+", resource=nodes, subresource(s)=[proxy]") {
			t.Errorf("%s %s: %d %q", tc.method, tc.path, w.Code, w.Body)
		}
		if len(seen) != 1 || seen[0].Subresource != "proxy" || seen[0].Verb != tc.verb || seen[0].Name != "node-1" || seen[0].User.Name != "tester" {
			t.Errorf("%s %s: attributes %+v", tc.method, tc.path, seen)
		}
	}
	if called {
		t.Error("SetVerbosity ran for a forbidden caller")
	}
}
