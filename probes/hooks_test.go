package probes

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestHookExec(t *testing.T) {
	ctx := testCtx(t)
	ex := &fakeExec{}
	r := NewHookRunner(HookConfig{Execer: ex})
	pod := testPod("p1", nil, nil, nil)
	c := &pod.Spec.Containers[0]
	h := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo hi > /tmp/f"}}}

	if msg, err := r.Run(ctx, pod, c, cid("c1"), "", h); err != nil || msg != "" {
		t.Fatalf("= %q, %v", msg, err)
	}
	if ex.calls[0] != "c1 [sh -c echo hi > /tmp/f]" {
		t.Errorf("ran %q", ex.calls[0])
	}

	ex.answer(2, "no space", nil)
	msg, err := r.Run(ctx, pod, c, cid("c1"), "", h)
	want := `Exec lifecycle hook ([sh -c echo hi > /tmp/f]) for Container "app" in Pod "pod-p1_default(p1)" failed - error: command 'sh -c echo hi > /tmp/f' exited with 2: , message: "no space"`
	if err == nil || msg != want {
		t.Errorf("non-zero exit:\n got %q, %v\nwant %q", msg, err, want)
	}

	ex.answer(-1, "", errors.New("container is not running"))
	if msg, err := r.Run(ctx, pod, c, cid("c1"), "", h); err == nil || !strings.Contains(msg, "error: container is not running") {
		t.Errorf("runtime error: %q, %v", msg, err)
	}

	if _, err := NewHookRunner(HookConfig{}).Run(ctx, pod, c, cid("c1"), "", h); err == nil {
		t.Error("no error without an Execer")
	}
}

func TestHookHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.UserAgent()+" "+r.Host)
		mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/after", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable) // the status does not matter
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	ctx := testCtx(t)
	rec := &fakeEvents{}
	r := NewHookRunner(HookConfig{Recorder: rec})
	pod := testPod("p1", nil, nil, nil)
	c := &pod.Spec.Containers[0]
	c.Ports = []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}
	hook := func(mod func(*v1.HTTPGetAction)) *v1.LifecycleHandler {
		a := &v1.HTTPGetAction{Path: "/start", Port: intstr.FromString("web")}
		if mod != nil {
			mod(a)
		}
		return &v1.LifecycleHandler{HTTPGet: a}
	}

	if msg, err := r.Run(ctx, pod, c, cid("c1"), "127.0.0.1", hook(nil)); err != nil {
		t.Fatalf("= %q, %v", msg, err)
	}
	if _, err := r.Run(ctx, pod, c, cid("c1"), "127.0.0.1", hook(func(a *v1.HTTPGetAction) { a.Path = "/redirect" })); err != nil {
		t.Fatal(err)
	}
	// An HTTPS hook answered in plain HTTP is retried in HTTP.
	if msg, err := r.Run(ctx, pod, c, cid("c1"), "127.0.0.1", hook(func(a *v1.HTTPGetAction) { a.Scheme = v1.URISchemeHTTPS; a.Path = "/tls" })); err != nil {
		t.Fatalf("fallback: %q, %v", msg, err)
	}
	mu.Lock()
	want := []string{
		"/start kube-lifecycle/1.37 " + srv.Listener.Addr().String(),
		"/redirect kube-lifecycle/1.37 " + srv.Listener.Addr().String(),
		"/after kube-lifecycle/1.37 " + srv.Listener.Addr().String(),
		"/tls kube-lifecycle/1.37 " + srv.Listener.Addr().String(),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	mu.Unlock()
	if ev := rec.list(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning LifecycleHTTPFallback request to HTTPS lifecycle hook 127.0.0.1:") {
		t.Errorf("events %q", ev)
	}

	if msg, err := r.Run(ctx, pod, c, cid("c1"), "", hook(nil)); err == nil || !strings.Contains(msg, `HTTP lifecycle hook (/start) for Container "app" in Pod "pod-p1_default(p1)" failed - error: failed to find networking container`) {
		t.Errorf("no pod IP: %q, %v", msg, err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	if msg, err := r.Run(ctx, pod, c, cid("c1"), "127.0.0.1", hook(func(a *v1.HTTPGetAction) { a.Port = intstr.FromInt32(int32(closed)) })); err == nil || !strings.Contains(msg, "connection refused") {
		t.Errorf("refused: %q, %v", msg, err)
	}
}

func TestHookSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clocktesting.NewFakeClock(epoch)
		r := NewHookRunner(HookConfig{Clock: clk})
		pod := testPod("p1", nil, nil, nil)
		c := &pod.Spec.Containers[0]
		h := &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}
		run := func(ctx context.Context) <-chan error {
			done := make(chan error, 1)
			go func() {
				_, err := r.Run(ctx, pod, c, cid("c1"), "", h)
				done <- err
			}()
			synctest.Wait()
			return done
		}

		done := run(testCtx(t))
		clk.Step(4 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned after 4s of 5: %v", err)
		default:
		}
		clk.Step(time.Second)
		synctest.Wait()
		if err := <-done; err != nil {
			t.Fatalf("sleep: %v", err)
		}

		ctx, cancel := context.WithCancel(testCtx(t))
		done = run(ctx)
		cancel()
		if err := <-done; err == nil || err.Error() != "container terminated before sleep hook finished" {
			t.Errorf("cancelled sleep: %v", err)
		}
	})
}

func TestHookInvalid(t *testing.T) {
	pod := testPod("p1", nil, nil, nil)
	r := NewHookRunner(HookConfig{})
	for _, h := range []*v1.LifecycleHandler{nil, {}, {TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(80)}}} {
		msg, err := r.Run(testCtx(t), pod, &pod.Spec.Containers[0], cid("c1"), "10.0.0.1", h)
		if err == nil || !strings.HasPrefix(msg, "Cannot run handler: invalid handler") {
			t.Errorf("%v: %q, %v", h, msg, err)
		}
	}
}
