package server

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/exec"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/streamtranslate/spdytest"
)

// With TranslateWebSockets, kubectl's default clients (WebSocket v5 exec
// and attach, port-forward tunneled through a WebSocket) work against a
// runtime whose streaming server speaks SPDY only, through the server's
// own routes, authentication and upgrade proxy.
func TestTranslatedWebSocketStreams(t *testing.T) {
	execRT := spdytest.NewExecServer(t, "to stderr\n", 3)
	st := &fakeStreamer{url: execRT.ExecURL(true, true, true, false)}
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	e := newEnv(t, Config{Pods: pods, Runtime: &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}, Streaming: st, TranslateWebSockets: true})
	cfg := &rest.Config{Host: e.url, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	res := spdytest.Exec(t.Context(), cfg, e.url+"/exec/default/web/app?command=tr&command=a-z&command=A-Z&input=1&output=1&error=1",
		strings.NewReader("hello\n"), true, false)
	var ce exec.CodeExitError
	if res.Stdout != "HELLO\n" || res.Stderr != "to stderr\n" || !errors.As(res.Err, &ce) || ce.ExitStatus() != 3 {
		t.Fatalf("exec: stdout %q stderr %q, %v", res.Stdout, res.Stderr, res.Err)
	}
	if ex := st.execs[0]; strings.Join(ex.Cmd, " ") != "tr a-z A-Z" || !ex.Stdin || !ex.Stdout || !ex.Stderr || ex.Tty {
		t.Fatalf("exec request %+v", ex)
	}

	ttyRT := spdytest.NewExecServer(t, "", 0)
	st.url = ttyRT.ExecURL(true, true, false, true)
	res = spdytest.Exec(t.Context(), cfg, e.url+"/attach/default/web/tty?input=1&output=1&error=1", strings.NewReader("x"), false, true,
		spdytest.Size{Width: 80, Height: 24})
	if res.Err != nil || res.Stdout != "size 80x24\nX" {
		t.Fatalf("attach with a TTY: stdout %q, %v", res.Stdout, res.Err)
	}

	pfRT := spdytest.NewPortForwardServer(t)
	st.url, _ = url.Parse(pfRT.URL)
	conn, proto, err := spdytest.Forward(cfg, e.url+"/portForward/default/web")
	if err != nil || proto != "portforward.k8s.io" {
		t.Fatalf("port-forward: %q, %v", proto, err)
	}
	defer conn.Close()
	if got, err := spdytest.RoundTrip(conn, 8080, 0, "ping"); err != nil || got != "8080:PING" {
		t.Fatalf("through port 8080: %q, %v", got, err)
	}
	if pf := st.pfs[0]; pf.PodSandboxId != "sb-1" || len(pf.Port) != 0 {
		t.Fatalf("port-forward request %+v", pf)
	}
}
