package spdytest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Forward opens a port-forward connection as kubectl does by default:
// SPDY tunneled through a WebSocket to u. It returns the connection and
// the protocol the server chose.
func Forward(cfg *rest.Config, u string) (httpstream.Connection, string, error) {
	dialer, err := portforward.NewSPDYOverWebsocketDialerForStreaming(mustParse(u), cfg)
	if err != nil {
		return nil, "", err
	}
	return dialer.Dial(pfconst.PortForwardV1Name)
}

// RoundTrip sends msg to port over conn (request id as kubectl numbers
// them), closes its side and returns what came back on the data stream.
func RoundTrip(conn httpstream.Connection, port, id int, msg string) (string, error) {
	h := http.Header{}
	h.Set(v1.StreamType, v1.StreamTypeError)
	h.Set(v1.PortHeader, strconv.Itoa(port))
	h.Set(v1.PortForwardRequestIDHeader, strconv.Itoa(id))
	errStream, err := conn.CreateStream(h)
	if err != nil {
		return "", fmt.Errorf("error stream: %w", err)
	}
	defer conn.RemoveStreams(errStream)
	_ = errStream.Close() // the client writes nothing on it
	h.Set(v1.StreamType, v1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		return "", fmt.Errorf("data stream: %w", err)
	}
	defer conn.RemoveStreams(data)
	if _, err := io.WriteString(data, msg); err != nil {
		return "", err
	}
	_ = data.Close()
	b, err := io.ReadAll(data)
	return string(b), err
}

// Result is what an exec session delivered to its client.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// sessionTimeout bounds a test session, so a broken translation fails
// instead of hanging.
const sessionTimeout = 30 * time.Second

// Exec runs a session as kubectl does by default: the WebSocket v5
// remote-command protocol to u, sending stdin (when not nil) and, with a
// TTY, the sizes. It gives up after 30 seconds.
func Exec(ctx context.Context, cfg *rest.Config, u string, stdin io.Reader, stderr, tty bool, sizes ...Size) Result {
	ctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u)
	if err != nil {
		return Result{Err: err}
	}
	var out output
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: out.to(&out.stdout), Tty: tty}
	if stderr {
		opts.Stderr = out.to(&out.stderr)
	}
	if tty {
		q := make(chan remotecommand.TerminalSize, len(sizes))
		for _, s := range sizes {
			q <- remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
		}
		close(q)
		opts.TerminalSizeQueue = chanQueue(q)
	}
	return out.result(ex.StreamWithContext(ctx, opts))
}

type chanQueue chan remotecommand.TerminalSize

func (q chanQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}
