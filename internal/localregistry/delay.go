package localregistry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// delayProxy stands in front of the registry when Config.PullDelay is set:
// it holds every manifest request for the delay before passing it on, and
// records how many were held at once. A pull asks for its manifest once
// or twice (the tag, then the digest), one after the other, so the most
// requests held at once is the most pulls that ran at once.
type delayProxy struct {
	delay  time.Duration
	server *http.Server
	done   chan struct{}

	mu            sync.Mutex
	inFlight, max int
}

// startDelayProxy listens on a free loopback port with the registry's
// certificate and forwards to backend. It returns the host it listens on.
func startDelayProxy(ctx context.Context, delay time.Duration, backend *url.URL, transport http.RoundTripper, certFile, keyFile string) (*delayProxy, string, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("delay proxy: %w", err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("delay proxy: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(backend)
	rp.Transport = transport
	p := &delayProxy{delay: delay, done: make(chan struct{})}
	p.server = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { p.serve(w, req, rp) }),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() {
		defer close(p.done)
		_ = p.server.Serve(tls.NewListener(l, p.server.TLSConfig))
	}()
	return p, l.Addr().String(), nil
}

func (p *delayProxy) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	if strings.Contains(req.URL.Path, "/manifests/") {
		p.mu.Lock()
		p.inFlight++
		p.max = max(p.max, p.inFlight)
		p.mu.Unlock()
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-req.Context().Done():
		}
		t.Stop()
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}
	next.ServeHTTP(w, req)
}

func (p *delayProxy) maxInFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max
}

func (p *delayProxy) stop(ctx context.Context) error {
	err := p.server.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = p.server.Close()
	}
	<-p.done
	if errors.Is(err, http.ErrServerClosed) {
		return nil // stopped before
	}
	return err
}
