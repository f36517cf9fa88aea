package probes

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// serverPort is the port of an httptest server on 127.0.0.1.
func serverPort(t *testing.T, s *httptest.Server) int {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func newProber(rec EventRecorder) *prober {
	d := defaultDialer()
	return &prober{dialer: d, transport: newTransport(d), events: rec}
}

func httpProbe(port intstr.IntOrString, path string, mod func(*v1.HTTPGetAction)) *v1.Probe {
	a := &v1.HTTPGetAction{Port: port, Path: path}
	if mod != nil {
		mod(a)
	}
	p := withDefaults(v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: a}}, Readiness)
	return &p
}

// TestHTTPProbe covers status codes, paths, named ports, headers (Host,
// User-Agent, Accept), redirects and timeouts against a local server.
func TestHTTPProbe(t *testing.T) {
	var mu sync.Mutex
	var seen *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Clone(r.Context())
		mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("fine"))
		case "/fail":
			http.Error(w, "secret details", http.StatusInternalServerError)
		case "/notfound":
			w.WriteHeader(http.StatusNotFound)
		case "/local-redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/local-redirect-fail":
			http.Redirect(w, r, "/fail", http.StatusMovedPermanently)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/remote-redirect":
			// localhost is another host name: not followed.
			http.Redirect(w, r, "http://localhost:1/elsewhere", http.StatusFound)
		case "/slow":
			<-r.Context().Done()
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}

	for _, tc := range []struct {
		name string
		path string
		port intstr.IntOrString
		mod  func(*v1.HTTPGetAction)
		want outcome
		msg  string
	}{
		{name: "ok", path: "/ok", want: outSuccess, msg: "fine"},
		{name: "named port", path: "/ok", port: intstr.FromString("http"), want: outSuccess},
		{name: "500", path: "/fail", want: outFailure, msg: "HTTP probe failed with statuscode: 500"},
		{name: "404", path: "/notfound", want: outFailure, msg: "HTTP probe failed with statuscode: 404"},
		{name: "418", path: "/teapot", want: outFailure, msg: "HTTP probe failed with statuscode: 418"},
		{name: "same-host redirect is followed", path: "/local-redirect", want: outSuccess, msg: "fine"},
		{name: "same-host redirect to a failure", path: "/local-redirect-fail", want: outFailure, msg: "statuscode: 500"},
		{name: "redirect loop", path: "/loop", want: outFailure, msg: "stopped after 10 redirects"},
		{name: "other-host redirect is a warning", path: "/remote-redirect", want: outWarning, msg: "Probe terminated redirects"},
		{name: "https to an http server", path: "/ok", mod: func(a *v1.HTTPGetAction) { a.Scheme = v1.URISchemeHTTPS }, want: outFailure, msg: "http: server gave HTTP response to HTTPS client"},
		{name: "unknown port name", path: "/ok", port: intstr.FromString("nope"), want: outUnknown, msg: `port "nope" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.port
			if p.Type == intstr.Int && p.IntVal == 0 && p.StrVal == "" {
				p = intstr.FromInt32(int32(port))
			}
			out, msg, err := newProber(discardEvents{}).run(testCtx(t), httpProbe(p, tc.path, tc.mod), c, "127.0.0.1", cid("c1"))
			if err != nil {
				msg = err.Error()
			}
			if out != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("= %v %q, want %v containing %q", out, msg, tc.want, tc.msg)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("the failure message carries the body: %q", msg)
			}
		})
	}

	t.Run("headers", func(t *testing.T) {
		spec := httpProbe(intstr.FromInt32(int32(port)), "/ok?x=1", func(a *v1.HTTPGetAction) {
			a.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: "svc.example"}, {Name: "X-Custom", Value: "a"}, {Name: "X-Custom", Value: "b"}}
		})
		if out, _, _ := newProber(discardEvents{}).run(testCtx(t), spec, c, "127.0.0.1", cid("c1")); out != outSuccess {
			t.Fatalf("outcome %v", out)
		}
		mu.Lock()
		r := seen
		mu.Unlock()
		if r.Host != "svc.example" || r.URL.RawQuery != "x=1" || r.UserAgent() != "kube-probe/1.37" ||
			r.Header.Get("Accept") != "*/*" || strings.Join(r.Header.Values("X-Custom"), ",") != "a,b" {
			t.Errorf("request: host %q query %q UA %q Accept %q X-Custom %q", r.Host, r.URL.RawQuery, r.UserAgent(), r.Header.Get("Accept"), r.Header.Values("X-Custom"))
		}

		spec = httpProbe(intstr.FromInt32(int32(port)), "/ok", func(a *v1.HTTPGetAction) {
			a.HTTPHeaders = []v1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: ""}}
		})
		if _, msg, err := newProber(discardEvents{}).run(testCtx(t), spec, c, "127.0.0.1", cid("c1")); err != nil {
			t.Fatalf("probe with headers: %q %v", msg, err)
		}
		mu.Lock()
		r = seen
		mu.Unlock()
		if r.UserAgent() != "mine" || len(r.Header.Values("Accept")) != 0 {
			t.Errorf("overrides: UA %q Accept %q", r.UserAgent(), r.Header.Values("Accept"))
		}
	})

	t.Run("explicit host", func(t *testing.T) {
		spec := httpProbe(intstr.FromInt32(int32(port)), "/ok", func(a *v1.HTTPGetAction) { a.Host = "127.0.0.1" })
		if out, msg, _ := newProber(discardEvents{}).run(testCtx(t), spec, c, "192.0.2.1", cid("c1")); out != outSuccess {
			t.Errorf("host not used: %v %s", out, msg)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		a := &v1.HTTPGetAction{Port: intstr.FromInt32(int32(port)), Path: "/slow"}
		req, err := newHTTPRequest(testCtx(t), a, c, "127.0.0.1", probeUserAgent)
		if err != nil {
			t.Fatal(err)
		}
		out, msg := checkHTTP(newTransport(defaultDialer()), req, 50*time.Millisecond)
		if out != outFailure || !strings.Contains(msg, "Client.Timeout exceeded") {
			t.Errorf("= %v %q, want a timeout failure", out, msg)
		}
	})

	t.Run("events", func(t *testing.T) {
		rec := &fakeEvents{}
		pod := testPod("p1", nil, nil, nil)
		st := &v1.PodStatus{PodIP: "127.0.0.1"}
		pr := newProber(rec)
		p := intstr.FromInt32(int32(port))
		if r, err := pr.probe(testCtx(t), Readiness, pod, c, httpProbe(p, "/remote-redirect", nil), st, cid("c1")); r != Success || err != nil {
			t.Errorf("other-host redirect: %v %v, want Success", r, err)
		}
		if r, _ := pr.probe(testCtx(t), Liveness, pod, c, httpProbe(p, "/fail", nil), st, cid("c1")); r != Failure {
			t.Errorf("500: %v, want Failure", r)
		}
		if r, err := pr.probe(testCtx(t), Startup, pod, c, httpProbe(intstr.FromString("nope"), "/", nil), st, cid("c1")); err == nil {
			t.Errorf("bad port: %v, want an error", r)
		}
		want := []string{
			"Warning ProbeWarning Readiness probe warning: Probe terminated redirects, Response body: ",
			"Warning Unhealthy Liveness probe failed: HTTP probe failed with statuscode: 500",
			`Warning Unhealthy Startup probe errored and resulted in unknown state: port "nope" not found`,
		}
		got := rec.list()
		if len(got) != len(want) {
			t.Fatalf("events %q", got)
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("event %d = %q, want %q...", i, got[i], want[i])
			}
		}
	})
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	// A port that was free a moment ago: connections are refused.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln2.Addr().(*net.TCPAddr).Port
	_ = ln2.Close()
	defer ln.Close()

	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "svc", ContainerPort: int32(open)}}}
	tcp := func(port intstr.IntOrString, host string) *v1.Probe {
		p := withDefaults(v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port, Host: host}}}, Liveness)
		return &p
	}
	for _, tc := range []struct {
		name string
		spec *v1.Probe
		ip   string
		want outcome
	}{
		{"open", tcp(intstr.FromInt32(int32(open)), ""), "127.0.0.1", outSuccess},
		{"named port", tcp(intstr.FromString("svc"), ""), "127.0.0.1", outSuccess},
		{"explicit host", tcp(intstr.FromInt32(int32(open)), "127.0.0.1"), "", outSuccess},
		{"refused", tcp(intstr.FromInt32(int32(closed)), ""), "127.0.0.1", outFailure},
		{"bad port", tcp(intstr.FromInt32(70000), ""), "127.0.0.1", outUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, msg, err := newProber(discardEvents{}).run(testCtx(t), tc.spec, c, tc.ip, cid("c1"))
			if out != tc.want {
				t.Errorf("= %v %q %v, want %v", out, msg, err, tc.want)
			}
		})
	}
}

func TestGRPCProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	hs := health.NewServer()
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	// A gRPC server without the health service.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(ln2) }()
	defer bare.Stop()

	probe := func(port int, service *string) *v1.Probe {
		p := withDefaults(v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(port), Service: service}}}, Liveness)
		return &p
	}
	c := &v1.Container{Name: "app"}
	for _, tc := range []struct {
		name string
		spec *v1.Probe
		want outcome
		msg  string
	}{
		{"serving", probe(port, nil), outSuccess, "service healthy"},
		{"named service not serving", probe(port, ptr.To("db")), outFailure, `service unhealthy (responded with "NOT_SERVING")`},
		{"unknown service", probe(port, ptr.To("nope")), outFailure, "error: health rpc probe failed"},
		{"no health service", probe(ln2.Addr().(*net.TCPAddr).Port, nil), outFailure, "does not implement the grpc health protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, msg, err := newProber(discardEvents{}).run(testCtx(t), tc.spec, c, "127.0.0.1", cid("c1"))
			if err != nil || out != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("= %v %q %v, want %v containing %q", out, msg, err, tc.want, tc.msg)
			}
		})
	}

	t.Run("flips", func(t *testing.T) {
		hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		defer hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		if out, msg, _ := newProber(discardEvents{}).run(testCtx(t), probe(port, nil), c, "127.0.0.1", cid("c1")); out != outFailure {
			t.Errorf("= %v %q, want a failure", out, msg)
		}
	})

	t.Run("refused within timeout", func(t *testing.T) {
		ln3, _ := net.Listen("tcp", "127.0.0.1:0")
		closed := ln3.Addr().(*net.TCPAddr).Port
		_ = ln3.Close()
		out, msg := checkGRPC(testCtx(t), defaultDialer(), net.JoinHostPort("127.0.0.1", strconv.Itoa(closed)), "", 100*time.Millisecond)
		if out != outFailure || !strings.Contains(msg, "timeout: failed to connect service") {
			t.Errorf("= %v %q", out, msg)
		}
	})
}

func TestJudgeResponse(t *testing.T) {
	for _, tc := range []struct {
		code int
		want outcome
		msg  string
	}{
		{101, outFailure, "HTTP probe failed with statuscode: 101"},
		{199, outFailure, "HTTP probe failed with statuscode: 199"},
		{200, outSuccess, "body"},
		{204, outSuccess, "body"},
		{299, outSuccess, "body"},
		{300, outWarning, "Probe terminated redirects, Response body: body"},
		{302, outWarning, "Probe terminated redirects, Response body: body"},
		{399, outWarning, "Probe terminated redirects, Response body: body"},
		{400, outFailure, "HTTP probe failed with statuscode: 400"},
		{503, outFailure, "HTTP probe failed with statuscode: 503"},
	} {
		got, msg := judgeResponse(tc.code, []byte("body"))
		if got != tc.want || msg != tc.msg {
			t.Errorf("judgeResponse(%d) = %v, %q; want %v, %q", tc.code, got, msg, tc.want, tc.msg)
		}
	}
}

func TestSameHostRedirects(t *testing.T) {
	req := func(raw string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := req("http://10.0.0.1:8080/healthz")
	chain := func(n int) []*http.Request {
		via := []*http.Request{first}
		for len(via) < n {
			via = append(via, req("http://10.0.0.1:8080/hop"))
		}
		return via
	}
	for _, tc := range []struct {
		name string
		next string
		via  []*http.Request
		want string
	}{
		{"same host, other port", "http://10.0.0.1:9090/x", chain(1), "<nil>"},
		{"same host, ninth hop", "http://10.0.0.1:8080/x", chain(9), "<nil>"},
		{"same host, tenth hop", "http://10.0.0.1:8080/x", chain(10), "stopped after 10 redirects"},
		{"other host", "http://10.0.0.2:8080/x", chain(1), http.ErrUseLastResponse.Error()},
		{"other host beats the limit", "http://example.invalid/x", chain(10), http.ErrUseLastResponse.Error()},
	} {
		if got := fmt.Sprint(sameHostRedirects(req(tc.next), tc.via)); got != tc.want {
			t.Errorf("%s: sameHostRedirects = %s, want %s", tc.name, got, tc.want)
		}
	}
}
