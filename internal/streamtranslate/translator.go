// Package streamtranslate serves kubectl's WebSocket streaming protocols
// in front of a container runtime's streaming server, which speaks SPDY
// only: Translator joins an exec or attach caller of the WebSocket v5
// remote-command protocol (v5.channel.k8s.io) to an SPDY session with the
// runtime, and Tunnel unwraps port-forward callers that carry SPDY frames
// inside a WebSocket (SPDY/3.1+portforward.k8s.io). These are the two
// translations upstream kubelet does with ExtendWebSocketsToKubelet
// (through k8s.io/apiserver/pkg/util/proxy); they are written here so the
// agent does not link that package, which brings client-go's informers
// and clientset with it.
package streamtranslate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	clientspdy "k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

const (
	// IdleTimeout is how long the caller's WebSocket may pass no frame
	// either way before it is closed: the limit upstream's translator
	// sets, which is kubelet's default streaming idle timeout.
	IdleTimeout = 4 * time.Hour
	// statusWriteTimeout bounds writing the final status frame.
	statusWriteTimeout = 10 * time.Second
	// spdyPingPeriod keeps the runtime's SPDY connection alive through
	// quiet periods (the value upstream's translator uses).
	spdyPingPeriod = 5 * time.Second
)

// Options are the streams an exec or attach caller asked for.
type Options struct {
	Stdin, Stdout, Stderr, TTY bool
}

// Translator serves one exec or attach request of the WebSocket v5
// protocol: it accepts the caller's WebSocket, opens an SPDY session with
// the runtime's streaming server at Location and copies the streams
// between them. Resize events on channel 4 become the SPDY session's
// terminal sizes (with TTY); the outcome (success, exit code, or error) is
// written as a metav1.Status on channel 3 before the WebSocket closes.
type Translator struct {
	// Location is the runtime's streaming URL for the session.
	Location *url.URL
	// Options are the streams to carry.
	Options Options
	// IdleTimeout closes the caller's WebSocket when no frame has passed
	// for this long; 0 means the package's IdleTimeout.
	IdleTimeout time.Duration
}

// ServeHTTP serves r, which must be a WebSocket upgrade offering
// v5.channel.k8s.io (wsstream.IsWebSocketRequestWithStreamCloseProtocol).
// A request that cannot be upgraded is answered by the WebSocket
// handshake with an HTTP error; once upgraded, every failure is reported
// in the status frame.
func (t *Translator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	idle := t.IdleTimeout
	if idle <= 0 {
		idle = IdleTimeout
	}
	ws, err := acceptWebSocket(w, r, t.Options, idle)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("WebSocket exec/attach not accepted", "err", err)
		return
	}
	defer ws.conn.Close() //nolint:errcheck // the session is over either way

	executor, err := runtimeExecutor(t.Location)
	if err != nil {
		ws.writeStatus(apierrors.NewInternalError(err).Status())
		return
	}
	err = executor.StreamWithContext(ctx, ws.streamOptions(ctx))
	ws.writeStatus(outcome(err))
}

// runtimeExecutor is an SPDY remote-command client of the runtime's
// streaming URL. Redirects are refused, as the runtime has no reason to
// send one and following it could reach anywhere.
func runtimeExecutor(location *url.URL) (remotecommand.Executor, error) {
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{PingPeriod: spdyPingPeriod})
	if err != nil {
		return nil, err
	}
	return remotecommand.NewSPDYExecutorRejectRedirects(rt, clientspdy.NewUpgraderForStreaming(rt), http.MethodPost, location)
}

// outcome is the status written to the caller for the SPDY session's
// result err. A command that exited non-zero is a failure with reason
// NonZeroExitCode and its code as the ExitCode cause, which the caller's
// client turns back into an exit code; a status from the runtime passes
// through as it is; anything else is an internal error.
func outcome(err error) metav1.Status {
	if err == nil {
		return metav1.Status{Status: metav1.StatusSuccess}
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se.Status()
	}
	var ce exec.CodeExitError
	if errors.As(err, &ce) && ce.Exited() {
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  rcconst.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", ce),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    rcconst.ExitCodeCauseType,
				Message: fmt.Sprint(ce.ExitStatus()),
			}}},
		}
	}
	return apierrors.NewInternalError(err).Status()
}

// wsSession is the caller's side of a translated session.
type wsSession struct {
	conn    *wsstream.Conn
	streams []io.ReadWriteCloser
	opts    Options
}

// channelsFor lays out the v5 channels: stdin, stdout and stderr as
// asked, the status channel always, and the resize channel always read
// (a caller may send sizes even when they are ignored).
func channelsFor(o Options) []wsstream.ChannelType {
	pick := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	ch := make([]wsstream.ChannelType, rcconst.StreamResize+1)
	ch[rcconst.StreamStdIn] = pick(o.Stdin, wsstream.ReadChannel)
	ch[rcconst.StreamStdOut] = pick(o.Stdout, wsstream.WriteChannel)
	ch[rcconst.StreamStdErr] = pick(o.Stderr, wsstream.WriteChannel)
	ch[rcconst.StreamErr] = wsstream.WriteChannel
	ch[rcconst.StreamResize] = wsstream.ReadChannel
	return ch
}

// acceptWebSocket completes the caller's WebSocket handshake for the v5
// protocol only and announces the session with an empty frame on the
// lowest channel it will write (stdout, else stderr, else status), which
// clients wait for before they start streaming.
func acceptWebSocket(w http.ResponseWriter, r *http.Request, o Options, idle time.Duration) (*wsSession, error) {
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		rcconst.StreamProtocolV5Name: {Binary: true, Channels: channelsFor(o)},
	})
	conn.SetIdleTimeout(idle)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return nil, err
	}
	first := rcconst.StreamErr
	switch {
	case o.Stdout:
		first = rcconst.StreamStdOut
	case o.Stderr:
		first = rcconst.StreamStdErr
	}
	if _, err := streams[first].Write([]byte{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("announce the WebSocket session: %w", err)
	}
	return &wsSession{conn: conn, streams: streams, opts: o}, nil
}

// streamOptions wires the caller's channels to the SPDY client. Without a
// TTY the resize channel is drained and dropped, so a stray size cannot
// stall the caller's other channels.
func (s *wsSession) streamOptions(ctx context.Context) remotecommand.StreamOptions {
	var so remotecommand.StreamOptions
	if s.opts.Stdin {
		so.Stdin = s.streams[rcconst.StreamStdIn]
	}
	if s.opts.Stdout {
		so.Stdout = s.streams[rcconst.StreamStdOut]
	}
	if s.opts.Stderr {
		so.Stderr = s.streams[rcconst.StreamStdErr]
	}
	resize := s.streams[rcconst.StreamResize]
	if !s.opts.TTY {
		go func() { _, _ = io.Copy(io.Discard, resize) }()
		return so
	}
	sizes := make(chan remotecommand.TerminalSize)
	go decodeSizes(ctx, resize, sizes)
	so.Tty = true
	so.TerminalSizeQueue = sizeQueue(sizes)
	return so
}

// writeStatus sends st, JSON-encoded, on the status channel.
func (s *wsSession) writeStatus(st metav1.Status) {
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	s.conn.SetWriteDeadline(statusWriteTimeout)
	_, _ = s.streams[rcconst.StreamErr].Write(b)
}

// decodeSizes reads the caller's JSON terminal sizes ({"Width":..,
// "Height":..}) from r into sizes until r ends or is malformed, or ctx
// ends; it closes sizes when it returns.
func decodeSizes(ctx context.Context, r io.Reader, sizes chan<- remotecommand.TerminalSize) {
	defer close(sizes)
	dec := json.NewDecoder(r)
	for {
		var size remotecommand.TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case sizes <- size:
		case <-ctx.Done():
			return
		}
	}
}

// sizeQueue hands the decoded sizes to the SPDY client; nil once the
// caller's resize channel has ended.
type sizeQueue <-chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &size
}
