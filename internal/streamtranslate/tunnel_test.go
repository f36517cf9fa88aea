package streamtranslate

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/nodekit/nodekit/internal/streamtranslate/spdytest"
)

// tunneling serves every request with a Tunnel whose Upgrade is a
// reverse proxy to target (a proxy that hijacks the connection on 101).
func tunneling(t *testing.T, target string) string {
	t.Helper()
	u, _ := url.Parse(target)
	hs := httptest.NewServer(&Tunnel{Upgrade: httputil.NewSingleHostReverseProxy(u)})
	t.Cleanup(hs.Close)
	return hs.URL
}

// kubectl's WebSocket-tunneled port-forward reaches an SPDY runtime: the
// protocol is negotiated through the tunnel, and data on two ports
// makes the round trip.
func TestTunnelPortForward(t *testing.T) {
	rt := spdytest.NewPortForwardServer(t)
	u := tunneling(t, rt.URL)
	conn, proto, err := spdytest.Forward(&rest.Config{Host: u}, u+"/portForward/default/web")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if proto != "portforward.k8s.io" {
		t.Fatalf("negotiated %q", proto)
	}
	msg := "ping " + strings.Repeat("x", 100000) // many WebSocket messages
	for i, port := range []int{8080, 9090} {
		got, err := spdytest.RoundTrip(conn, port, i, msg)
		if want := strconv.Itoa(port) + ":" + strings.ToUpper(msg); err != nil || got != want {
			t.Fatalf("port %d: %.40q… (%d bytes), %v", port, got, len(got), err)
		}
	}
	if ports := rt.Ports(); !slices.Equal(ports, []string{"8080", "9090"}) {
		t.Fatalf("runtime served ports %v", ports)
	}
}

// A runtime's refusal reaches the caller as the HTTP answer to its
// handshake.
func TestTunnelRuntimeRefuses(t *testing.T) {
	rt := spdytest.NewPortForwardServer(t)
	u := tunneling(t, rt.URL)
	_, _, err := spdytest.Forward(&rest.Config{Host: u}, u+"/refuse")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("refused port-forward: %v, want the runtime's 403", err)
	}
}

// A WebSocket request without a tunneled SPDY protocol is refused before
// the runtime is asked.
func TestTunnelWithoutSPDYProtocol(t *testing.T) {
	asked := false
	hs := httptest.NewServer(&Tunnel{Upgrade: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { asked = true })})
	defer hs.Close()
	code, body := wsHandshake(t, hs.URL, "v5.channel.k8s.io")
	if code != http.StatusBadRequest || !strings.Contains(body, "no tunneling spdy protocols") || asked {
		t.Fatalf("%d %q, runtime asked: %v", code, body, asked)
	}
}

// The upgrade request the runtime gets is SPDY's, offering the tunneled
// protocols without their prefix; a 101 that does not switch to SPDY,
// even when written in pieces, is answered 500.
func TestTunnelRequestAndBadUpgrade(t *testing.T) {
	var got *http.Request
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		for _, part := range []string{"HTTP/1.1 101 Switching Protocols\r\nConn", "ection: Upgrade\r\nUpgrade: h2c\r", "\n\r\n"} {
			if _, err := io.WriteString(conn, part); err != nil {
				return
			}
		}
	})
	hs := httptest.NewServer(&Tunnel{Upgrade: up})
	defer hs.Close()
	code, body := wsHandshake(t, hs.URL, "SPDY/3.1+portforward.k8s.io, v4.channel.k8s.io, SPDY/3.1+other.example")
	if code != http.StatusInternalServerError || !strings.Contains(body, "missing upgrade headers") {
		t.Fatalf("%d %q", code, body)
	}
	if got.Method != "POST" || got.Header.Get("Upgrade") != "SPDY/3.1" || got.Header.Get("Sec-Websocket-Key") != "" ||
		got.Header.Get("Sec-Websocket-Protocol") != "" || !slices.Equal(got.Header.Values("X-Stream-Protocol-Version"), []string{"portforward.k8s.io"}) {
		t.Fatalf("runtime got %s %v", got.Method, got.Header)
	}
}

// wsHandshake sends a WebSocket handshake offering protocols and returns
// the answer's status and body.
func wsHandshake(t *testing.T, u, protocols string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", u+"/portForward/default/web", nil)
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": protocols} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
