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
	"time"

	"k8s.io/klog/v2"
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
// status. The caller's credentials are not passed on.
func proxyUpgrade(w http.ResponseWriter, r *http.Request, target *url.URL) {
	ctx := r.Context()
	logger := klog.FromContext(ctx)
	backend, err := dialStream(ctx, target)
	if err != nil {
		logger.Error(err, "Unable to reach the runtime's streaming server", "url", target.Redacted())
		http.Error(w, "unable to reach the container runtime's streaming server: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer backend.Close()

	out := r.Clone(ctx)
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
		// Socket deadlines are wall-clock times.
		_ = backend.SetReadDeadline(time.Now().Add(10 * time.Second))
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
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			backend.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(backend, buffered) // buffered drains what was read ahead, then reads client
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, backend)
		done <- struct{}{}
	}()
	<-done
	closeBoth()
	<-done
}
