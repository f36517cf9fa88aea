package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseEndpoints(t *testing.T) {
	for _, c := range []struct {
		endpoint, proxy string
		want            endpoints
		wantErr         string
	}{
		{"/var/lib/kubelet/plugins/d/dra.sock", "tcp://:9001", endpoints{"/var/lib/kubelet/plugins/d/dra.sock", ":9001"}, ""},
		{"unix:///csi/csi.sock", "tcp://127.0.0.1:9002", endpoints{"/csi/csi.sock", "127.0.0.1:9002"}, ""},
		{"", "tcp://:9001", endpoints{}, "--endpoint is required"},
		{"unix://", "tcp://:9001", endpoints{}, "no socket path"},
		{"tcp://:10000", "tcp://:9001", endpoints{}, "only unix sockets"},
		{"/s.sock", "", endpoints{}, "proxy mode"},
		{"/s.sock", "unix:///x", endpoints{}, "proxy mode"},
		{"/s.sock", "tcp://9001", endpoints{}, "missing port"},
	} {
		got, err := parseEndpoints(c.endpoint, c.proxy)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseEndpoints(%q, %q) = %v, want error containing %q", c.endpoint, c.proxy, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseEndpoints(%q, %q) = %+v, %v; want %+v", c.endpoint, c.proxy, got, err, c.want)
		}
	}
}

// Unknown flags and stray arguments are refused, --v is taken.
func TestRunRefusesOtherModes(t *testing.T) {
	for _, args := range [][]string{
		{"--v=5", "--endpoint=/x.sock", "--proxy-endpoint=tcp://:1", "--drivername=hostpath.csi.k8s.io"},
		{"--v=5", "--endpoint=/x.sock", "--proxy-endpoint=tcp://:1", "extra"},
		{"--v=5", "--endpoint=/x.sock"},
	} {
		var out bytes.Buffer
		if err := run(t.Context(), args, &out); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

// testProxy is a proxy serving on a socket in a temp dir and a loopback
// port until the test ends.
type testProxy struct {
	sock, tcp string
	cancel    context.CancelFunc
	done      chan error
}

func startProxy(t *testing.T) *testProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "hpp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	e := endpoints{unixPath: filepath.Join(dir, "plugin.sock"), tcpAddr: "127.0.0.1:0"}
	unixL, tcpL, err := e.listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	p := &testProxy{sock: e.unixPath, tcp: tcpL.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- newProxy(log.New(io.Discard, "", 0)).serve(ctx, unixL, tcpL) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop cancels the proxy and waits for serve to return nil.
func (p *testProxy) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case err, ok := <-p.done:
		if ok && err != nil {
			t.Errorf("serve: %v", err)
		}
		if ok {
			close(p.done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}

func dial(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	// A bound on a broken proxy, not a wait for a result.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(to, buf); err != nil {
		t.Fatalf("read %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

// Connections pair in order, whichever side connects first, and each pair
// carries bytes both ways independently of the others.
func TestProxyPairsConnections(t *testing.T) {
	p := startProxy(t)
	// The peer connects ahead of time, as e2e.test's port-forwards do; its
	// first bytes (a gRPC server's SETTINGS) wait for the client.
	peer1 := dial(t, "tcp", p.tcp)
	if _, err := peer1.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	client1 := dial(t, "unix", p.sock)
	buf := make([]byte, 5)
	if _, err := io.ReadFull(client1, buf); err != nil || string(buf) != "early" {
		t.Fatalf("client 1 read %q, %v; want the peer's early bytes", buf, err)
	}
	send(t, client1, peer1, "hello from client 1")

	// Now the client first: it waits until a peer comes.
	client2 := dial(t, "unix", p.sock)
	peer2 := dial(t, "tcp", p.tcp)
	send(t, client2, peer2, "hello from client 2")
	send(t, peer2, client2, "reply to client 2")
	send(t, peer1, client1, "reply to client 1")
	send(t, client1, peer1, strings.Repeat("x", 1<<20))
}

// When one side ends its stream, the other sees the end after the bytes
// still in flight, can answer, and both are closed once both ended.
func TestProxyHalfClose(t *testing.T) {
	p := startProxy(t)
	client := dial(t, "unix", p.sock)
	peer := dial(t, "tcp", p.tcp)
	if _, err := client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := client.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(peer)
	if err != nil || string(got) != "request" {
		t.Fatalf("peer read %q, %v; want the request then EOF", got, err)
	}
	if _, err := peer.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := peer.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "response" {
		t.Fatalf("client read %q, %v; want the response then EOF", got, err)
	}
}

// A client that goes away closes its peer, and the other way round; the
// proxy goes on pairing new connections.
func TestProxyCloseEitherSide(t *testing.T) {
	p := startProxy(t)
	client := dial(t, "unix", p.sock)
	peer := dial(t, "tcp", p.tcp)
	send(t, client, peer, "ping")
	_ = client.Close()
	if got, err := io.ReadAll(peer); err != nil || len(got) != 0 {
		t.Fatalf("peer after the client closed: read %q, %v; want EOF", got, err)
	}

	client = dial(t, "unix", p.sock)
	peer = dial(t, "tcp", p.tcp)
	send(t, peer, client, "pong")
	_ = peer.Close()
	if got, err := io.ReadAll(client); err != nil || len(got) != 0 {
		t.Fatalf("client after the peer closed: read %q, %v; want EOF", got, err)
	}

	client = dial(t, "unix", p.sock)
	peer = dial(t, "tcp", p.tcp)
	send(t, client, peer, "still pairing")
}

// Stopping closes paired connections and a client still waiting for its
// peer, and serve returns nil.
func TestProxyStop(t *testing.T) {
	p := startProxy(t)
	client := dial(t, "unix", p.sock)
	peer := dial(t, "tcp", p.tcp)
	send(t, client, peer, "ping")
	waiting := dial(t, "unix", p.sock)
	p.stop(t)
	for name, c := range map[string]net.Conn{"client": client, "peer": peer, "waiting client": waiting} {
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: read after stop = %v, want EOF or reset", name, err)
		}
	}
}

// A socket file left behind by a killed instance does not stop a new one.
func TestListenRemovesStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "hpp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "plugin.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	_ = old.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stale socket is gone before the test: %v", err)
	}
	unixL, tcpL, err := endpoints{unixPath: sock, tcpAddr: "127.0.0.1:0"}.listen()
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	_ = unixL.Close()
	_ = tcpL.Close()
}
