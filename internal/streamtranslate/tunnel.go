package streamtranslate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"

	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// maxResponseHead bounds the runtime's upgrade response headers the
// tunnel buffers before it has seen their end.
const maxResponseHead = 1 << 20

// Tunnel serves a port-forward caller of the WebSocket tunneling protocol,
// whose WebSocket messages carry the bytes of an SPDY connection. It
// rewrites the request into an SPDY upgrade (the protocols the caller
// offered as SPDY/3.1+NAME, without the prefix) and hands it to Upgrade, a
// handler that proxies upgrades to the runtime's streaming server and
// takes the connection over with http.Hijacker. The connection Upgrade
// gets swallows the runtime's 101 response, answers the caller's
// WebSocket handshake with the protocol the runtime chose (prefixed
// again), and from then on carries bytes to and from WebSocket binary
// messages. A refusal Upgrade writes without hijacking reaches the caller
// as an HTTP response.
type Tunnel struct {
	Upgrade http.Handler
}

// ServeHTTP serves r, a WebSocket upgrade offering at least one
// SPDY/3.1+*.k8s.io protocol; without one it is answered 400.
func (t *Tunnel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	protocols := tunneledProtocols(r)
	if len(protocols) == 0 {
		http.Error(w, "unable to upgrade: no tunneling spdy protocols provided", http.StatusBadRequest)
		return
	}
	tw := &tunnelWriter{w: w, conn: newTunnelConn(w, r)}
	t.Upgrade.ServeHTTP(tw, spdyUpgradeRequest(r, protocols))
}

// tunneledProtocols are the SPDY protocols r offers through the tunneling
// prefix, with the prefix removed.
func tunneledProtocols(r *http.Request) []string {
	var out []string
	for _, p := range gwebsocket.Subprotocols(r) {
		if name, ok := strings.CutPrefix(p, pfconst.WebsocketsSPDYTunnelingPrefix); ok && strings.HasSuffix(name, pfconst.KubernetesSuffix) {
			out = append(out, name)
		}
	}
	return out
}

// spdyUpgradeRequest is r as an SPDY upgrade offering protocols: a POST
// without a body and without the WebSocket handshake headers.
func spdyUpgradeRequest(r *http.Request, protocols []string) *http.Request {
	out := r.Clone(r.Context())
	out.Method = http.MethodPost
	out.Body, out.ContentLength = http.NoBody, 0
	for _, h := range []string{wsstream.WebSocketProtocolHeader, "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions"} {
		out.Header.Del(h)
	}
	out.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	out.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	out.Header.Del(httpstream.HeaderProtocolVersion)
	for _, p := range protocols {
		out.Header.Add(httpstream.HeaderProtocolVersion, p)
	}
	return out
}

// tunnelWriter is the ResponseWriter Upgrade writes to: an ordinary
// response (a refusal) goes to the caller as it is; Hijack hands out the
// tunnel's connection instead of the caller's. One excludes the other.
type tunnelWriter struct {
	w    http.ResponseWriter
	conn *tunnelConn

	mu       sync.Mutex
	written  bool
	hijacked bool
}

func (tw *tunnelWriter) Header() http.Header { return tw.w.Header() }

func (tw *tunnelWriter) Write(p []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.hijacked {
		return 0, http.ErrHijacked
	}
	tw.written = true
	return tw.w.Write(p)
}

// WriteHeader passes a status on, except 101: a switch of protocols must
// come through the hijacked connection, where the tunnel can answer it.
func (tw *tunnelWriter) WriteHeader(code int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.hijacked || tw.written {
		return
	}
	tw.written = true
	if code == http.StatusSwitchingProtocols {
		http.Error(tw.w, "unexpected upgrade", http.StatusInternalServerError)
		return
	}
	tw.w.WriteHeader(code)
}

// Hijack returns the tunnel's connection, once and only before anything
// was written.
func (tw *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	switch {
	case tw.hijacked:
		return nil, nil, errors.New("connection has already been hijacked")
	case tw.written:
		return nil, nil, errors.New("response has already been written")
	}
	tw.hijacked = true
	return tw.conn, bufio.NewReadWriter(bufio.NewReader(tw.conn), bufio.NewWriter(tw.conn)), nil
}

// tunnelConn is the connection Upgrade writes the runtime's response and
// stream to. Until the response headers are complete it buffers them;
// then it opens the caller's side (the WebSocket tunnel on a 101, the raw
// connection otherwise) and passes everything on. Reads wait until then.
type tunnelConn struct {
	w http.ResponseWriter
	r *http.Request

	mu    sync.Mutex
	head  []byte
	ready chan struct{} // closed once inner or err is set
	inner net.Conn
	err   error
}

func newTunnelConn(w http.ResponseWriter, r *http.Request) *tunnelConn {
	return &tunnelConn{w: w, r: r, ready: make(chan struct{})}
}

// settled reports whether the tunnel is open (inner) or has failed
// (err); neither field changes after.
func (c *tunnelConn) settled() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// opened is the caller's connection once the tunnel is open, else nil.
func (c *tunnelConn) opened() net.Conn {
	if c.settled() {
		return c.inner
	}
	return nil
}

func (c *tunnelConn) Write(b []byte) (int, error) {
	if c.settled() {
		return c.writeOpen(b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled() {
		return c.writeOpen(b)
	}
	if len(c.head)+len(b) > maxResponseHead {
		c.fail(errors.New("runtime's upgrade response headers too large"), true)
		return 0, c.err
	}
	c.head = append(c.head, b...)
	end := headEnd(c.head)
	if end < 0 {
		return len(b), nil
	}
	head, rest := c.head[:end], c.head[end:]
	c.head = nil
	if err := c.open(head); err != nil {
		return 0, err
	}
	if len(rest) > 0 {
		if _, err := c.inner.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// writeOpen writes b to the caller once the tunnel has settled.
func (c *tunnelConn) writeOpen(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	return c.inner.Write(b)
}

// headEnd is the length of the HTTP response head at the start of b (up
// to and including the blank line; Go also accepts a bare LF), or -1.
func headEnd(b []byte) int {
	crlf, lf := bytes.Index(b, []byte("\r\n\r\n")), bytes.Index(b, []byte("\n\n"))
	switch {
	case crlf >= 0 && (lf < 0 || crlf < lf):
		return crlf + 4
	case lf >= 0:
		return lf + 2
	}
	return -1
}

// open parses the runtime's response head and opens the caller's side.
// Called with mu held; sets inner or err and closes ready.
func (c *tunnelConn) open(head []byte) error {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), c.r)
	if err != nil {
		c.fail(fmt.Errorf("invalid upgrade response from the runtime: %w", err), true)
		return c.err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return c.passThrough(resp, head)
	}
	if !headerHas(resp.Header, httpstream.HeaderConnection, "upgrade") || !headerHas(resp.Header, httpstream.HeaderUpgrade, spdy.HeaderSpdy31) {
		c.fail(errors.New("unable to upgrade: missing upgrade headers in response"), true)
		return c.err
	}
	var offer []string // none when the runtime chose no protocol
	if p := strings.TrimSpace(resp.Header.Get(httpstream.HeaderProtocolVersion)); p != "" {
		offer = []string{pfconst.WebsocketsSPDYTunnelingPrefix + p}
	}
	up := gwebsocket.Upgrader{
		Subprotocols: offer,
		// As upstream's tunnel: the request was authenticated and
		// authorized already, whatever its Origin.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	ws, err := up.Upgrade(c.w, c.r, nil) // answers the caller itself on failure
	if err != nil {
		c.fail(err, false)
		return c.err
	}
	logger := klog.FromContext(c.r.Context())
	logger.V(4).Info("WebSocket tunnel open", "protocol", ws.Subprotocol())
	c.inner = portforward.NewTunnelingConnectionWithLogger(klog.LoggerWithName(logger, "tunnel"), ws)
	close(c.ready)
	return nil
}

// passThrough relays a response other than 101 that Upgrade wrote to the
// hijacked connection: the caller's raw connection gets it verbatim.
func (c *tunnelConn) passThrough(resp *http.Response, head []byte) error {
	klog.FromContext(c.r.Context()).V(2).Info("Runtime refused the port-forward upgrade", "status", resp.Status)
	raw, _, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		c.fail(err, false)
		return c.err
	}
	_ = raw.SetWriteDeadline(time.Now().Add(statusWriteTimeout)) //nolint:forbidigo // net.Conn deadlines are wall-clock
	if _, err := raw.Write(head); err != nil {
		_ = raw.Close()
		c.fail(err, false)
		return c.err
	}
	c.inner = raw
	close(c.ready)
	return nil
}

// fail records err as the tunnel's end; with answer the caller, whose
// connection is still an HTTP exchange, gets it as a 500. Called with mu
// held.
func (c *tunnelConn) fail(err error, answer bool) {
	c.err = err
	if answer {
		http.Error(c.w, err.Error(), http.StatusInternalServerError)
	}
	close(c.ready)
}

func headerHas(h http.Header, name, token string) bool {
	return strings.Contains(strings.ToLower(h.Get(name)), strings.ToLower(token))
}

// Read waits until the tunnel is open, then reads from the caller.
func (c *tunnelConn) Read(b []byte) (int, error) {
	<-c.ready
	if c.err != nil {
		return 0, c.err
	}
	return c.inner.Read(b)
}

// Close closes the caller's side; before the runtime answered, it ends
// the exchange with a 500 instead.
func (c *tunnelConn) Close() error {
	c.mu.Lock()
	if c.settled() {
		c.mu.Unlock()
		if c.inner == nil {
			return nil
		}
		return c.inner.Close()
	}
	defer c.mu.Unlock()
	c.fail(errors.New("connection closed before the runtime answered"), true)
	return nil
}

func (c *tunnelConn) LocalAddr() net.Addr {
	if inner := c.opened(); inner != nil {
		return inner.LocalAddr()
	}
	return noAddr{}
}

func (c *tunnelConn) RemoteAddr() net.Addr {
	if inner := c.opened(); inner != nil {
		return inner.RemoteAddr()
	}
	return noAddr{}
}

func (c *tunnelConn) SetDeadline(t time.Time) error {
	if inner := c.opened(); inner != nil {
		return inner.SetDeadline(t)
	}
	return nil
}

func (c *tunnelConn) SetReadDeadline(t time.Time) error {
	if inner := c.opened(); inner != nil {
		return inner.SetReadDeadline(t)
	}
	return nil
}

func (c *tunnelConn) SetWriteDeadline(t time.Time) error {
	if inner := c.opened(); inner != nil {
		return inner.SetWriteDeadline(t)
	}
	return nil
}

// noAddr stands for an address before the tunnel is open.
type noAddr struct{}

func (noAddr) Network() string { return "" }
func (noAddr) String() string  { return "" }
