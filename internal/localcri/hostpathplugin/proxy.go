package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
)

// endpoints are where the proxy listens: a unix socket for the node
// agent's clients and a TCP address for the peer that serves them.
type endpoints struct {
	unixPath string // the socket file
	tcpAddr  string // host:port, host may be empty
}

// parseEndpoints reads --endpoint (a socket path, or a unix:// URL) and
// --proxy-endpoint (tcp://[HOST]:PORT). Anything else is refused: the
// stand-in serves only the proxy mode.
func parseEndpoints(endpoint, proxyEndpoint string) (endpoints, error) {
	var e endpoints
	switch {
	case endpoint == "":
		return e, errors.New("--endpoint is required")
	case strings.HasPrefix(endpoint, "unix://"):
		e.unixPath = strings.TrimPrefix(endpoint, "unix://")
	case strings.Contains(endpoint, "://"):
		return e, fmt.Errorf("--endpoint=%q: only unix sockets are served", endpoint)
	default:
		e.unixPath = endpoint
	}
	if e.unixPath == "" {
		return e, fmt.Errorf("--endpoint=%q: no socket path", endpoint)
	}
	addr, ok := strings.CutPrefix(proxyEndpoint, "tcp://")
	if !ok {
		return e, fmt.Errorf("--proxy-endpoint=%q: want tcp://[HOST]:PORT (this stand-in runs only in proxy mode)", proxyEndpoint)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return e, fmt.Errorf("--proxy-endpoint=%q: %w", proxyEndpoint, err)
	}
	e.tcpAddr = addr
	return e, nil
}

// listen opens both listeners, the TCP port first: once the socket file
// exists, both accept. A file left at the socket path (a socket of an
// earlier instance that was killed) is removed first.
func (e endpoints) listen() (unixL, tcpL net.Listener, err error) {
	tcpL, err = net.Listen("tcp", e.tcpAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", e.tcpAddr, err)
	}
	if err := os.Remove(e.unixPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = tcpL.Close()
		return nil, nil, fmt.Errorf("remove stale socket: %w", err)
	}
	unixL, err = net.Listen("unix", e.unixPath)
	if err != nil {
		_ = tcpL.Close()
		return nil, nil, fmt.Errorf("listen on %s: %w", e.unixPath, err)
	}
	return unixL, tcpL, nil
}

// proxy pairs each connection accepted on the unix socket with the next
// connection accepted on the TCP port, in order, and copies bytes both
// ways between the two. A TCP peer may connect ahead of time: its
// connection waits in the listen backlog, unread, until a unix client
// comes for it.
type proxy struct {
	logf func(format string, args ...any)

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, closed on shutdown
	wg    sync.WaitGroup        // the splicing goroutines
}

func newProxy(logger *log.Logger) *proxy {
	return &proxy{logf: logger.Printf, conns: map[net.Conn]struct{}{}}
}

// serve runs until ctx is done or a listener fails; it closes both
// listeners and every open connection before it returns, and returns nil
// after ctx ended.
func (p *proxy) serve(ctx context.Context, unixL, tcpL net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = unixL.Close(); _ = tcpL.Close() })
	defer stop()
	defer p.wg.Wait()
	defer p.closeAll()
	defer func() { _ = unixL.Close(); _ = tcpL.Close() }()
	for n := 1; ; n++ {
		client, err := unixL.Accept()
		if err != nil {
			return p.acceptErr(ctx, err)
		}
		if !p.track(client) {
			return nil
		}
		p.logf("connection #%d: client connected on %s, waiting for a peer on %s", n, unixL.Addr(), tcpL.Addr())
		peer, err := tcpL.Accept()
		if err != nil {
			return p.acceptErr(ctx, err)
		}
		if !p.track(peer) {
			return nil
		}
		p.logf("connection #%d: paired with peer %s", n, peer.RemoteAddr())
		p.wg.Go(func() {
			p.splice(client, peer)
			p.logf("connection #%d: closed", n)
		})
	}
}

func (p *proxy) acceptErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("accept: %w", err)
}

// track records an open connection; after closeAll it closes c and says
// false.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns != nil {
		delete(p.conns, c)
	}
	_ = c.Close()
}

// closeAll closes every open connection; later ones are closed on arrival.
func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// splice copies a→b and b→a. When one side ends its stream cleanly, the
// other side's write half is shut, so it sees the end of the stream and
// the other direction can still drain; an error on either direction, or
// the end of both, closes both connections.
func (p *proxy) splice(a, b net.Conn) {
	defer p.untrack(a)
	defer p.untrack(b)
	errs := make(chan error, 2)
	half := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err == nil {
			err = closeWrite(dst)
		}
		errs <- err
	}
	go half(a, b)
	go half(b, a)
	if err := <-errs; err != nil {
		_ = a.Close()
		_ = b.Close()
	}
	_ = <-errs // the other direction: its end, or the error of the closed connection
}

// closeWrite shuts the write half of c where it has one.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
