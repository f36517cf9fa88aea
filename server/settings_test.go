package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// With debugging handlers off, the secure port answers as upstream's
// InstallDebuggingDisabledHandlers: 405 for the debugging paths, 404 for
// configz and checkpoint; the rest is served; authentication still comes
// first.
func TestDebuggingHandlersDisabled(t *testing.T) {
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	rt := &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}
	backend, _ := echoBackend(t)
	cfg := Config{Pods: pods, Runtime: rt, Streaming: &fakeStreamer{url: backend},
		Checkpointer: &fakeCheckpointer{}, CheckpointDir: t.TempDir()}
	on := newEnv(t, cfg)
	cfg.DisableDebuggingHandlers = true
	off := newEnv(t, cfg)

	for _, tc := range []struct {
		method, path string
		on, off      int
	}{
		{"POST", "/exec/default/web/app?command=ls&output=1", 400, 405}, // 400: not an upgrade
		{"GET", "/exec/default/web/uid-1/app?command=ls&output=1", 400, 405},
		{"POST", "/attach/default/web/app?output=1", 400, 405},
		{"POST", "/portForward/default/web", 400, 405},
		{"POST", "/run/default/web/app?cmd=ls", 404, 405},
		{"GET", "/containerLogs/default/web/app", 400, 405}, // 400: no container instance in the fake
		{"GET", "/runningpods/", 200, 405},
		{"GET", "/logs/", 405, 405}, // 405 on: no SystemLogDir, "logs endpoint is disabled."
		{"GET", "/debug/pprof/", 200, 405},
		{"PUT", "/debug/flags/v", 405, 404}, // 405 on: no SetVerbosity, "flags endpoint is disabled."
		{"GET", "/configz", 200, 404},
		{"POST", "/checkpoint/default/web/app", 200, 404},
		{"GET", "/healthz", 200, 200},
		{"GET", "/pods", 200, 200},
		{"GET", "/metrics", 200, 200},
	} {
		if code, _ := on.do(t, tc.method, tc.path); code != tc.on {
			t.Errorf("debugging on: %s %s: %d, want %d", tc.method, tc.path, code, tc.on)
		}
		code, body := off.do(t, tc.method, tc.path)
		if code != tc.off {
			t.Errorf("debugging off: %s %s: %d, want %d", tc.method, tc.path, code, tc.off)
		}
		if code == 405 && body != "Debug endpoints are disabled.\n" {
			t.Errorf("debugging off: %s: body %q", tc.path, body)
		}
	}
	// Even a real upgrade is refused, and before that the caller must
	// authenticate.
	if resp, _, _ := off.upgrade(t, "POST", "/exec/default/web/app?command=ls&output=1", "SPDY/3.1"); resp.StatusCode != 405 {
		t.Fatalf("exec upgrade with debugging off: %d", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", off.url+"/exec/default/web/app", nil)
	resp, err := off.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("exec without credentials, debugging off: %d, want 401", resp.StatusCode)
	}
}

// serveTLS serves s's secure API on a loopback listener and returns its
// address.
func serveTLS(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); _ = <-done })
	return l.Addr().String()
}

func handshake(addr string, c *tls.Config) error {
	c.InsecureSkipVerify = true
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		return err
	}
	return conn.Close()
}

func TestTLSSettings(t *testing.T) {
	newServer := func(cfg Config) *Server {
		cfg.NodeName, cfg.Authorizer = "n", AlwaysAllow{}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("min version 1.3", func(t *testing.T) {
		addr := serveTLS(t, newServer(Config{TLSMinVersion: tls.VersionTLS13}))
		if err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
			t.Fatal("a TLS 1.2-only client was accepted under TLSMinVersion 1.3")
		}
		if err := handshake(addr, &tls.Config{MinVersion: tls.VersionTLS13}); err != nil {
			t.Fatalf("TLS 1.3 client: %v", err)
		}
	})
	t.Run("default min version 1.2", func(t *testing.T) {
		addr := serveTLS(t, newServer(Config{}))
		if err := handshake(addr, &tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}); err == nil {
			t.Fatal("a TLS 1.1 client was accepted by default")
		}
		if err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12}); err != nil {
			t.Fatalf("TLS 1.2 client: %v", err)
		}
	})
	t.Run("cipher suites", func(t *testing.T) {
		addr := serveTLS(t, newServer(Config{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}))
		if err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}); err == nil {
			t.Fatal("a client without the configured suite was accepted")
		}
		if err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}); err != nil {
			t.Fatalf("client with the configured suite: %v", err)
		}
	})
	t.Run("curve preferences", func(t *testing.T) {
		addr := serveTLS(t, newServer(Config{CurvePreferences: []tls.CurveID{tls.CurveP384}}))
		if err := handshake(addr, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}); err == nil {
			t.Fatal("a client offering only X25519 was accepted with curves [P-384]")
		}
		if err := handshake(addr, &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP384}}); err != nil {
			t.Fatalf("client offering P-384: %v", err)
		}
	})
	for name, cfg := range map[string]Config{
		"bad version":     {TLSMinVersion: 0x0200},
		"bad suite":       {CipherSuites: []uint16{0xfefe}},
		"bad curve":       {CurvePreferences: []tls.CurveID{0xfefe}},
		"bad idle":        {StreamingIdleTimeout: -time.Second},
		"no HTTP/2 suite": {CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}},
	} {
		cfg.NodeName, cfg.Authorizer = "n", AlwaysAllow{}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestParseTLSNames(t *testing.T) {
	for name, want := range map[string]uint16{"": tls.VersionTLS12, "VersionTLS10": tls.VersionTLS10, "VersionTLS11": tls.VersionTLS11,
		"VersionTLS12": tls.VersionTLS12, "VersionTLS13": tls.VersionTLS13} {
		if got, err := ParseTLSVersion(name); err != nil || got != want {
			t.Errorf("ParseTLSVersion(%q) = %#x, %v; want %#x", name, got, err, want)
		}
	}
	for _, bad := range []string{"TLS13", "versiontls13", "VersionTLS14"} {
		if _, err := ParseTLSVersion(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseTLSVersion(%q): %v", bad, err)
		}
	}

	got, err := ParseCipherSuites([]string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_RSA_WITH_RC4_128_SHA"})
	if err != nil || len(got) != 3 || got[0] != tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 ||
		got[1] != tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 || got[2] != tls.TLS_RSA_WITH_RC4_128_SHA {
		t.Fatalf("ParseCipherSuites: %v %v", got, err)
	}
	if insecure := InsecureCipherSuites(got); len(insecure) != 1 || insecure[0] != "TLS_RSA_WITH_RC4_128_SHA" {
		t.Fatalf("InsecureCipherSuites: %v", insecure)
	}
	if got, err := ParseCipherSuites(nil); got != nil || err != nil {
		t.Fatalf("no suites: %v %v", got, err)
	}
	if _, err := ParseCipherSuites([]string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_NOPE"}); err == nil || !strings.Contains(err.Error(), `[1]: cipher suite "TLS_NOPE"`) {
		t.Fatalf("unknown suite: %v", err)
	}

	curves, err := ParseCurvePreferences([]int32{23, 29, 4588})
	if err != nil || len(curves) != 3 || curves[0] != tls.CurveP256 || curves[1] != tls.X25519 || curves[2] != tls.X25519MLKEM768 {
		t.Fatalf("ParseCurvePreferences: %v %v", curves, err)
	}
	for _, bad := range [][]int32{{0}, {70000}, {23, 23}, {9999}} {
		if _, err := ParseCurvePreferences(bad); err == nil {
			t.Errorf("ParseCurvePreferences(%v) accepted", bad)
		}
	}
}

// An exec stream with no bytes either way for StreamingIdleTimeout is
// closed; traffic keeps it open.
func TestStreamingIdleTimeout(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	backend, _ := echoBackend(t)
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	e := newEnv(t, Config{Pods: pods, Runtime: &fakeRuntime{pods: []*nodekit.Pod{runningPod()}},
		Streaming: &fakeStreamer{url: backend}, StreamingIdleTimeout: time.Minute, Clock: clk})
	resp, conn, br := e.upgrade(t, "POST", "/exec/default/web/app?command=sh&input=1&output=1", "SPDY/3.1")
	if resp.StatusCode != 101 {
		t.Fatalf("exec: %d", resp.StatusCode)
	}
	greeting := make([]byte, len("hello:"))
	if _, err := io.ReadFull(br, greeting); err != nil || string(greeting) != "hello:" {
		t.Fatalf("greeting %q %v", greeting, err)
	}
	echo := func(msg string) error {
		if _, err := conn.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			return errors.New("echoed " + string(buf))
		}
		return nil
	}
	waitTimer(t, clk)
	clk.Step(40 * time.Second)
	if err := echo("ping"); err != nil { // activity at 40s
		t.Fatalf("stream before the idle timeout: %v", err)
	}
	clk.Step(30 * time.Second) // 70s after the start, 30s after the last byte
	waitTimer(t, clk)
	if err := echo("pong"); err != nil {
		t.Fatalf("stream active 30s ago was closed: %v", err)
	}
	waitTimer(t, clk)
	clk.Step(2 * time.Minute)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound, not a wait
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle stream: read %v, want EOF", err)
	}
}

// waitTimer yields until the idle watcher has armed its timer on clk.
func waitTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the idle watcher never armed its timer")
		}
		runtime.Gosched()
	}
}

// freePort returns a loopback port nothing listens on (at the moment).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// With DisableSecurePort, Run serves only the read-only port (as
// upstream's enableServer: false), and nothing at all without one.
func TestRunWithoutSecurePort(t *testing.T) {
	secure, ro := freePort(t), freePort(t)
	s, err := New(Config{NodeName: "n", Authorizer: AlwaysAllow{}, Address: "127.0.0.1", Port: secure, ReadOnlyPort: ro, DisableSecurePort: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	url := "http://127.0.0.1:" + strconv.Itoa(ro) + "/healthz"
	var resp *http.Response
	for i := 0; i < 100; i++ { // until the listener is up
		if resp, err = http.Get(url); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("read-only port: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("read-only healthz: %q", b)
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(secure)); err == nil {
		c.Close()
		t.Fatal("the secure port listens with DisableSecurePort")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	s, _ = New(Config{NodeName: "n", Authorizer: AlwaysAllow{}, DisableSecurePort: true})
	if err := s.Run(t.Context()); err != nil { // returns at once: nothing to serve
		t.Fatal(err)
	}
}

func TestHealthzServer(t *testing.T) {
	h := &HealthzServer{Port: 1}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, l) }()
	for path, want := range map[string]string{"/healthz": "ok", "/healthz/ping": "ok"} {
		resp, err := http.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("%s: %d %q", path, resp.StatusCode, b)
		}
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/healthz/syncloop")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("/healthz/syncloop on the local endpoint: %d, want 404 (upstream checks only ping there)", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := (&HealthzServer{}).Run(t.Context()); err == nil {
		t.Fatal("Run with port 0 did not fail")
	}
}

// A port in use is retried every 5s, as upstream, not fatal.
func TestHealthzServerRetriesListen(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := busy.Addr().(*net.TCPAddr).Port
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	h := &HealthzServer{Address: "127.0.0.1", Port: port, Clock: clk}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	waitTimer(t, clk) // the first listen failed; waiting to retry
	busy.Close()
	clk.Step(healthzRetry)
	var resp *http.Response
	for i := 0; i < 100; i++ { // until the retried listener is up
		if resp, err = http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("healthz after the port was freed: %v", err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// /logs/ serves SystemLogDir (upstream's /var/log) with the debugging
// handlers, and never without them.
func TestSystemLogs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "syslog"), []byte("boot ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	on := newEnv(t, Config{SystemLogDir: dir})
	if code, body := on.do(t, "GET", "/logs/syslog"); code != 200 || body != "boot ok\n" {
		t.Fatalf("/logs/syslog: %d %q", code, body)
	}
	if code, body := on.do(t, "GET", "/logs/"); code != 200 || !strings.Contains(body, "syslog") {
		t.Fatalf("/logs/ listing: %d %q", code, body)
	}
	if code, _ := on.do(t, "POST", "/logs/syslog"); code != 405 {
		t.Fatalf("POST /logs/syslog: %d", code)
	}
	off := newEnv(t, Config{SystemLogDir: dir, DisableDebuggingHandlers: true})
	if code, body := off.do(t, "GET", "/logs/syslog"); code != 405 || body != "Debug endpoints are disabled.\n" {
		t.Fatalf("/logs/ with debugging off: %d %q", code, body)
	}
	none := newEnv(t, Config{})
	if code, body := none.do(t, "GET", "/logs/syslog"); code != 405 || body != "logs endpoint is disabled.\n" {
		t.Fatalf("/logs/ without SystemLogDir: %d %q", code, body)
	}
}
