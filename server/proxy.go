package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// upgradeErrorBodyLimit bounds the error body relayed when the runtime
// refuses an upgrade.
const upgradeErrorBodyLimit = 64 << 10

// isUpgrade reports whether r asks to switch protocols (SPDY/3.1 or
// WebSocket), as exec, attach and port-forward must.
func isUpgrade(r *http.Request) bool {
	for _, h := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(h, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

func isWebSocket(r *http.Request) bool {
	return isUpgrade(r) && strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// dialStream connects to the runtime's streaming server.
func dialStream(ctx context.Context, u *url.URL) (net.Conn, error) {
	host := u.Host
	switch u.Scheme {
	case "http", "ws":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", host)
	case "https", "wss":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "443")
		}
		d := tls.Dialer{Config: &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}}
		return d.DialContext(ctx, "tcp", host)
	}
	return nil, fmt.Errorf("unsupported streaming URL scheme %q", u.Scheme)
}

// proxyUpgrade forwards the upgrade request r to the runtime's streaming
// URL target and, once the runtime switches protocols, joins the caller's
// connection to the runtime's byte for byte until either side closes (or
// the server shuts down). A refusal by the runtime is relayed with its
// status. The caller's credentials are not passed on. With idle > 0 the
// stream is closed once no byte has passed either way for idle (on clk).
func proxyUpgrade(w http.ResponseWriter, r *http.Request, target *url.URL, idle time.Duration, clk clock.Clock) {
	ctx := r.Context()
	logger := klog.FromContext(ctx)
	backend, err := dialStream(ctx, target)
	if err != nil {
		logger.Error(err, "Unable to reach the runtime's streaming server", "url", target.Redacted())
		http.Error(w, "unable to reach the container runtime's streaming server: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer backend.Close()

	out := upgradeRequest(r, target)
	if err := out.Write(backend); err != nil {
		http.Error(w, "unable to send the request to the container runtime: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// Everything read from the runtime is kept, so the switch response and
	// any bytes after it reach the caller unchanged.
	var raw bytes.Buffer
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(backend, &raw)), out)
	if err != nil {
		http.Error(w, "invalid response from the container runtime: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		relayRefusal(w, backend, resp)
		return
	}
	client, buffered, err := http.NewResponseController(w).Hijack()
	if err != nil {
		logger.Error(err, "Unable to take over the connection for streaming")
		http.Error(w, "unable to take over the connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer client.Close()
	_ = client.SetDeadline(time.Time{})
	if _, err := client.Write(raw.Bytes()); err != nil {
		return
	}
	// buffered drains what the server read ahead, then reads client; a
	// hijacker may give none.
	var fromClient io.Reader = client
	if buffered != nil {
		fromClient = buffered
	}
	joinStreams(ctx, client, fromClient, backend, idle, clk, r.URL.Path)
}

// upgradeRequest is the caller's request r readdressed to target for the
// runtime: no body, no Authorization header, and the caller's address
// added to X-Forwarded-For.
func upgradeRequest(r *http.Request, target *url.URL) *http.Request {
	out := r.Clone(r.Context())
	loc := *target
	out.URL, out.Host, out.RequestURI = &loc, target.Host, ""
	out.Body, out.ContentLength = http.NoBody, 0
	out.Header.Del("Authorization")
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := out.Header.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	return out
}

// relayRefusal answers the caller with the runtime's response resp to an
// upgrade it did not accept: its error status, content type and (capped)
// body. A status below 400 is no refusal the caller could act on, so it is
// reported as an internal error naming the status.
func relayRefusal(w http.ResponseWriter, backend net.Conn, resp *http.Response) {
	// Socket deadlines are wall-clock times.
	_ = backend.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:forbidigo // net.Conn deadlines are wall-clock
	body, _ := io.ReadAll(io.LimitReader(resp.Body, upgradeErrorBodyLimit))
	code := resp.StatusCode
	if code < 400 {
		code = http.StatusInternalServerError
		body = fmt.Appendf(nil, "invalid upgrade response from the container runtime: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// joinStreams copies bytes both ways between the caller's connection
// (written to as client, read from as fromClient) and the runtime's
// backend until one direction ends, ctx ends or, with idle > 0, nothing
// has passed for idle; then it closes both connections and waits for the
// other copy to finish. path names the stream in the idle log line.
func joinStreams(ctx context.Context, client net.Conn, fromClient io.Reader, backend net.Conn, idle time.Duration, clk clock.Clock, path string) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			backend.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	var toBackend, toClient io.Writer = backend, client
	if idle > 0 {
		a := &activity{clk: clk}
		a.touch()
		toBackend, toClient = activeWriter{backend, a}, activeWriter{client, a}
		watchCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go a.closeWhenIdle(watchCtx, idle, func() {
			klog.FromContext(ctx).V(2).Info("Closing an idle stream", "idleTimeout", idle, "path", path)
			closeBoth()
		})
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(toBackend, fromClient)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(toClient, backend)
		done <- struct{}{}
	}()
	<-done
	closeBoth()
	<-done
}

// activity is when bytes last passed through a stream.
type activity struct {
	clk  clock.Clock
	last atomic.Int64 // UnixNano on clk
}

func (a *activity) touch() { a.last.Store(a.clk.Now().UnixNano()) }

// closeWhenIdle calls closeStream once the stream has been idle for idle,
// or returns when ctx ends.
func (a *activity) closeWhenIdle(ctx context.Context, idle time.Duration, closeStream func()) {
	t := a.clk.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		quiet := a.clk.Since(time.Unix(0, a.last.Load()))
		if quiet >= idle {
			closeStream()
			return
		}
		t.Reset(idle - quiet)
	}
}

// activeWriter records activity on every write that moves bytes.
type activeWriter struct {
	w io.Writer
	a *activity
}

func (w activeWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if n > 0 {
		w.a.touch()
	}
	return n, err
}
