package streamtranslate

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/exec"

	"github.com/nodekit/nodekit/internal/streamtranslate/spdytest"
)

// translating serves every request with a Translator towards the
// runtime's session URL for opts.
func translating(t *testing.T, rt *spdytest.ExecServer, opts Options, location *url.URL) string {
	t.Helper()
	if location == nil {
		location = rt.ExecURL(opts.Stdin, opts.Stdout, opts.Stderr, opts.TTY)
	}
	hs := httptest.NewServer(&Translator{Location: location, Options: opts})
	t.Cleanup(hs.Close)
	return hs.URL
}

func session(t *testing.T, rt *spdytest.ExecServer) spdytest.Session {
	t.Helper()
	select {
	case s := <-rt.Sessions():
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime saw no session")
		return spdytest.Session{}
	}
}

// A v5 WebSocket client's stdin, stdout and stderr reach an SPDY runtime
// session and back, and the command's non-zero exit code comes back as the
// client's exit error.
func TestTranslatorStreamsAndExitCode(t *testing.T) {
	rt := spdytest.NewExecServer(t, "to stderr\n", 3)
	u := translating(t, rt, Options{Stdin: true, Stdout: true, Stderr: true}, nil)
	res := spdytest.Exec(t.Context(), &rest.Config{Host: u}, u+"/exec", strings.NewReader("hello\nworld\n"), true, false)
	var ce exec.CodeExitError
	if !errors.As(res.Err, &ce) || ce.ExitStatus() != 3 {
		t.Fatalf("exit: %v, want exit code 3", res.Err)
	}
	if res.Stdout != "HELLO\nWORLD\n" || res.Stderr != "to stderr\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	s := session(t, rt)
	if s.Stdin != "hello\nworld\n" || !slices.Equal(s.Streams, []string{"error", "stderr", "stdin", "stdout"}) || s.Size != nil {
		t.Fatalf("runtime saw %+v", s)
	}
}

// With a TTY the client's terminal size reaches the runtime on the resize
// stream, and a command that exits 0 ends the client without an error.
func TestTranslatorTTYResize(t *testing.T) {
	rt := spdytest.NewExecServer(t, "", 0)
	u := translating(t, rt, Options{Stdin: true, Stdout: true, TTY: true}, nil)
	res := spdytest.Exec(t.Context(), &rest.Config{Host: u}, u+"/exec", strings.NewReader("ls\n"), false, true, spdytest.Size{Width: 100, Height: 40})
	if res.Err != nil || res.Stdout != "size 100x40\nLS\n" {
		t.Fatalf("stdout %q, %v", res.Stdout, res.Err)
	}
	s := session(t, rt)
	if s.Size == nil || *s.Size != (spdytest.Size{Width: 100, Height: 40}) || !slices.Equal(s.Streams, []string{"error", "resize", "stdin", "stdout"}) {
		t.Fatalf("runtime saw %+v", s)
	}
}

// Output only, no stdin: the session still ends when the command does.
func TestTranslatorOutputOnly(t *testing.T) {
	rt := spdytest.NewExecServer(t, "only stderr", 0)
	u := translating(t, rt, Options{Stdout: true, Stderr: true}, nil)
	res := spdytest.Exec(t.Context(), &rest.Config{Host: u}, u+"/exec", nil, true, false)
	if res.Err != nil || res.Stdout != "" || res.Stderr != "only stderr" {
		t.Fatalf("stdout %q stderr %q, %v", res.Stdout, res.Stderr, res.Err)
	}
	if s := session(t, rt); !slices.Equal(s.Streams, []string{"error", "stderr", "stdout"}) {
		t.Fatalf("runtime saw %+v", s)
	}
}

// A runtime that refuses the session: the client gets the refusal as its
// error, through the status channel.
func TestTranslatorRuntimeRefuses(t *testing.T) {
	rt := spdytest.NewExecServer(t, "", 0)
	refuse, _ := url.Parse(rt.URL + "/refuse")
	u := translating(t, rt, Options{Stdout: true}, refuse)
	res := spdytest.Exec(t.Context(), &rest.Config{Host: u}, u+"/exec", nil, false, false)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "session not found") {
		t.Fatalf("refused session: %v, want the runtime's reason", res.Err)
	}
}

// Only v5 callers are translated: an older WebSocket protocol is not
// upgraded.
func TestTranslatorRequiresV5(t *testing.T) {
	rt := spdytest.NewExecServer(t, "", 0)
	u := translating(t, rt, Options{Stdout: true}, nil)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", u+"/exec", nil)
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "v4.channel.k8s.io"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatal("a v4 WebSocket was accepted")
	}
}

// A session whose WebSocket passes no frame for IdleTimeout is closed:
// the runtime's command sees its stdin end and the client returns.
func TestTranslatorIdleTimeout(t *testing.T) {
	rt := spdytest.NewExecServer(t, "", 0)
	opts := Options{Stdin: true, Stdout: true}
	hs := httptest.NewServer(&Translator{Location: rt.ExecURL(true, true, false, false), Options: opts, IdleTimeout: 300 * time.Millisecond})
	defer hs.Close()
	quiet, unused := io.Pipe() // stdin that never sends
	defer unused.Close()
	start := time.Now()
	res := spdytest.Exec(t.Context(), &rest.Config{Host: hs.URL}, hs.URL+"/exec", quiet, false, false)
	if took := time.Since(start); took > 5*time.Second || errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("idle session ended after %v: %v", took, res.Err)
	}
	if s := session(t, rt); s.Stdin != "" {
		t.Fatalf("runtime saw %+v", s)
	}
}
