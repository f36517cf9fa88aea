// Package spdytest is a container runtime's streaming server for tests:
// it speaks the SPDY exec/attach (v4.channel.k8s.io) and port-forward
// (portforward.k8s.io) protocols as the CRI streaming servers do, and runs
// a small scripted command or an echo instead of a container.
package spdytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// streamWait bounds how long the server waits for the client's streams.
const streamWait = 10 * time.Second

// Session is what the exec server saw of one session.
type Session struct {
	// Streams are the stream types the client opened, sorted.
	Streams []string
	// Stdin is what the client sent before closing stdin.
	Stdin string
	// Size is the first terminal size sent on the resize stream.
	Size *Size
}

// Size is a terminal size as the resize stream carries it.
type Size struct{ Width, Height uint16 }

// ExecServer answers every upgrade with one session of a scripted
// command. The session's streams are named in the URL's query as a CRI
// streaming server knows them from its request (stdin, stdout, stderr,
// tty set to 1; see ExecURL). The command reads a terminal size first when
// there is a TTY, then stdin to its end; it writes "size WxH\n" and the
// input upper-cased to stdout, Stderr to stderr, and ends with ExitCode.
// Path /refuse is answered 404 without an upgrade.
type ExecServer struct {
	URL      string
	Stderr   string
	ExitCode int

	sessions chan Session
}

// NewExecServer starts an ExecServer, closed when the test ends.
func NewExecServer(t interface{ Cleanup(func()) }, stderr string, exitCode int) *ExecServer {
	s := &ExecServer{Stderr: stderr, ExitCode: exitCode, sessions: make(chan Session, 10)}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// ExecURL is the session URL for the streams asked for (stderr is dropped
// with a TTY, as the API does).
func (s *ExecServer) ExecURL(stdin, stdout, stderr, tty bool) *url.URL {
	q := url.Values{}
	for name, on := range map[string]bool{"stdin": stdin, "stdout": stdout, "stderr": stderr && !tty, "tty": tty} {
		if on {
			q.Set(name, "1")
		}
	}
	u, _ := url.Parse(s.URL + "/exec?" + q.Encode())
	return u
}

// Sessions delivers each finished session.
func (s *ExecServer) Sessions() <-chan Session { return s.sessions }

// expectedStreams are the stream types a session's URL asks for.
func expectedStreams(q url.Values) []string {
	want := []string{v1.StreamTypeError}
	for name, typ := range map[string]string{"stdin": v1.StreamTypeStdin, "stdout": v1.StreamTypeStdout, "stderr": v1.StreamTypeStderr, "tty": v1.StreamTypeResize} {
		if q.Get(name) == "1" {
			want = append(want, typ)
		}
	}
	return want
}

func (s *ExecServer) serve(w http.ResponseWriter, r *http.Request) {
	streams, conn, ok := accept(w, r, rcconst.StreamProtocolV4Name, http.StatusNotFound, "session not found")
	if !ok {
		return
	}
	defer conn.Close()
	want := expectedStreams(r.URL.Query())
	ctx, cancel := context.WithTimeout(r.Context(), streamWait)
	defer cancel()
	byType := map[string]httpstream.Stream{}
	for len(byType) < len(want) {
		select {
		case st := <-streams:
			byType[st.Headers().Get(v1.StreamType)] = st
		case <-ctx.Done():
			return
		}
	}
	s.sessions <- s.run(byType)
	<-conn.CloseChan()
}

func (s *ExecServer) run(byType map[string]httpstream.Stream) Session {
	var got Session
	for k := range byType {
		got.Streams = append(got.Streams, k)
	}
	slices.Sort(got.Streams)
	var stdout io.WriteCloser = nopStream{}
	if st := byType[v1.StreamTypeStdout]; st != nil {
		stdout = st
	}
	if rs := byType[v1.StreamTypeResize]; rs != nil {
		var size Size
		if err := json.NewDecoder(rs).Decode(&size); err == nil {
			got.Size = &size
			_, _ = fmt.Fprintf(stdout, "size %dx%d\n", size.Width, size.Height)
		}
	}
	if in := byType[v1.StreamTypeStdin]; in != nil {
		b, _ := io.ReadAll(in)
		got.Stdin = string(b)
		_, _ = stdout.Write(bytes.ToUpper(b))
	}
	if es := byType[v1.StreamTypeStderr]; es != nil {
		_, _ = io.WriteString(es, s.Stderr)
		_ = es.Close()
	}
	_ = stdout.Close()
	errStream := byType[v1.StreamTypeError]
	if s.ExitCode != 0 {
		st := metav1.Status{Status: metav1.StatusFailure, Reason: rcconst.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command exited with %d", s.ExitCode),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: rcconst.ExitCodeCauseType, Message: fmt.Sprint(s.ExitCode)}}}}
		b, _ := json.Marshal(st)
		_, _ = errStream.Write(b)
	}
	_ = errStream.Close()
	return got
}

// nopStream stands for stdout when the session has none.
type nopStream struct{}

func (nopStream) Write(p []byte) (int, error) { return len(p), nil }
func (nopStream) Close() error                { return nil }

// accept negotiates protocol and upgrades r to SPDY; the client's new
// streams arrive on the returned channel. A request for /refuse is
// answered with code and reason instead.
func accept(w http.ResponseWriter, r *http.Request, protocol string, code int, reason string) (<-chan httpstream.Stream, httpstream.Connection, bool) {
	if r.URL.Path == "/refuse" {
		http.Error(w, reason, code)
		return nil, nil, false
	}
	if _, err := httpstream.Handshake(r, w, []string{protocol}); err != nil {
		return nil, nil, false // Handshake answered
	}
	streams := make(chan httpstream.Stream, 16)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st httpstream.Stream, _ <-chan struct{}) error {
		streams <- st
		return nil
	})
	if conn == nil {
		return nil, nil, false
	}
	return streams, conn, true
}

// PortForwardServer answers every upgrade with a port-forward session in
// which each data stream gets back "PORT:" and its input upper-cased once
// the client has closed it. Path /refuse is answered 403.
type PortForwardServer struct {
	URL string

	mu    sync.Mutex
	ports []string
}

// NewPortForwardServer starts a PortForwardServer, closed when the test
// ends.
func NewPortForwardServer(t interface{ Cleanup(func()) }) *PortForwardServer {
	s := &PortForwardServer{}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Ports are the ports of the data streams served so far.
func (s *PortForwardServer) Ports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ports...)
}

func (s *PortForwardServer) serve(w http.ResponseWriter, r *http.Request) {
	streams, conn, ok := accept(w, r, pfconst.PortForwardV1Name, http.StatusForbidden, "port-forward refused")
	if !ok {
		return
	}
	defer conn.Close()
	for {
		select {
		case st := <-streams:
			if st.Headers().Get(v1.StreamType) == v1.StreamTypeData {
				go s.echo(st)
			}
		case <-conn.CloseChan():
			return
		}
	}
}

func (s *PortForwardServer) echo(st httpstream.Stream) {
	port := st.Headers().Get(v1.PortHeader)
	s.mu.Lock()
	s.ports = append(s.ports, port)
	s.mu.Unlock()
	b, _ := io.ReadAll(st)
	_, _ = io.WriteString(st, port+":"+strings.ToUpper(string(b)))
	_ = st.Close()
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// output collects a session's stdout and stderr; the executor's copy
// goroutines may still write when a cancelled session returns.
type output struct {
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

// to is a writer into b, one of o's buffers.
func (o *output) to(b *bytes.Buffer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		return b.Write(p)
	})
}

func (o *output) result(err error) Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Result{Stdout: o.stdout.String(), Stderr: o.stderr.String(), Err: err}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
