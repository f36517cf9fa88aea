package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit"
)

// fakeRuntime is a deterministic RuntimePods.
type fakeRuntime struct {
	mu       sync.Mutex
	pods     []*nodekit.Pod
	statuses map[types.UID]*nodekit.PodStatus
	err      error
}

var _ RuntimePods = (*fakeRuntime)(nil)

func (f *fakeRuntime) ListPods(context.Context, bool) ([]*nodekit.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods, f.err
}

func (f *fakeRuntime) GetPodStatus(_ context.Context, uid types.UID, name, ns string) (*nodekit.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.statuses[uid]; ok {
		return st, nil
	}
	return &nodekit.PodStatus{ID: uid, Name: name, Namespace: ns}, f.err
}

// fakeStreamer records requests and answers with a fixed URL.
type fakeStreamer struct {
	mu    sync.Mutex
	url   *url.URL
	execs []*runtimeapi.ExecRequest
	atts  []*runtimeapi.AttachRequest
	pfs   []*runtimeapi.PortForwardRequest
}

var _ Streamer = (*fakeStreamer)(nil)

func (f *fakeStreamer) Exec(_ context.Context, r *runtimeapi.ExecRequest) (*url.URL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, r)
	return f.url, nil
}

func (f *fakeStreamer) Attach(_ context.Context, r *runtimeapi.AttachRequest) (*url.URL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.atts = append(f.atts, r)
	return f.url, nil
}

func (f *fakeStreamer) PortForward(_ context.Context, r *runtimeapi.PortForwardRequest) (*url.URL, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pfs = append(f.pfs, r)
	return f.url, nil
}

func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec: v1.PodSpec{
			Containers:     []v1.Container{{Name: "app", Image: "busybox"}, {Name: "tty", Image: "busybox", TTY: true}},
			InitContainers: []v1.Container{{Name: "init", Image: "busybox"}},
		},
	}
}

func runningPod() *nodekit.Pod {
	return &nodekit.Pod{
		ID: "uid-1", Name: "web", Namespace: "default",
		Containers: []*nodekit.Container{
			{ID: nodekit.ContainerID{Type: "containerd", ID: "c-app"}, Name: "app", Image: "busybox", State: nodekit.StateRunning},
			{ID: nodekit.ContainerID{Type: "containerd", ID: "c-tty"}, Name: "tty", Image: "busybox", State: nodekit.StateRunning},
		},
		Sandboxes: []*nodekit.Container{{ID: nodekit.ContainerID{Type: "containerd", ID: "sb-1"}, State: nodekit.StateRunning}},
	}
}

// env is a Server on a TLS test listener, with token "t" for user "tester".
type env struct {
	srv    *Server
	url    string
	client *http.Client
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = "node-1"
	}
	if cfg.Authorizer == nil {
		cfg.Authorizer = AlwaysAllow{}
	}
	if cfg.Authenticator == nil {
		cfg.Authenticator = tokenAuthn(map[string]string{"t": "tester"})
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.TLS = s.TLSConfig().Clone()
	hs.StartTLS()
	t.Cleanup(hs.Close)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return &env{srv: s, url: hs.URL, client: client}
}

func (e *env) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer t")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHealthz(t *testing.T) {
	var syncErr error
	e := newEnv(t, Config{HealthChecks: []HealthCheck{
		NamedCheck("syncloop", func() error { return syncErr }),
		NamedCheck("pleg", func() error { return nil }),
	}})
	if code, body := e.do(t, "GET", "/healthz"); code != 200 || body != "ok" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	if code, body := e.do(t, "GET", "/healthz?verbose"); code != 200 || !strings.Contains(body, "[+]syncloop ok\n[+]pleg ok\nhealthz check passed") {
		t.Fatalf("verbose: %d %q", code, body)
	}
	syncErr = errors.New("runtime down")
	if code, body := e.do(t, "GET", "/healthz"); code != 500 || !strings.Contains(body, "[-]syncloop failed: reason withheld") || strings.Contains(body, "runtime down") {
		t.Fatalf("unhealthy: %d %q", code, body)
	}
	if code, _ := e.do(t, "GET", "/healthz?exclude=syncloop"); code != 200 {
		t.Fatalf("excluded: %d", code)
	}
	if code, _ := e.do(t, "GET", "/healthz/pleg"); code != 200 {
		t.Fatalf("one check: %d", code)
	}
	if code, _ := e.do(t, "GET", "/healthz/syncloop"); code != 500 {
		t.Fatalf("one failing check: %d", code)
	}
	if code, _ := e.do(t, "GET", "/healthz/nope"); code != 404 {
		t.Fatalf("unknown check: %d", code)
	}
}

func TestPodsEndpoints(t *testing.T) {
	rt := &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}
	e := newEnv(t, Config{Pods: PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} }), Runtime: rt})
	code, body := e.do(t, "GET", "/pods")
	var list v1.PodList
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || list.Kind != "PodList" || len(list.Items) != 1 || list.Items[0].Name != "web" {
		t.Fatalf("/pods: %d %s", code, body)
	}
	if code, _ := e.do(t, "POST", "/pods"); code != 405 {
		t.Fatalf("POST /pods: %d", code)
	}
	code, body = e.do(t, "GET", "/runningpods/")
	list = v1.PodList{}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Items) != 1 {
		t.Fatalf("/runningpods/: %d %s", code, body)
	}
	p := list.Items[0]
	if p.UID != "uid-1" || len(p.Spec.Containers) != 2 || p.Spec.Containers[0].Name != "app" || p.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("running pod: %+v", p)
	}
	rt.err = errors.New("runtime down")
	if code, _ := e.do(t, "GET", "/runningpods/"); code != 500 {
		t.Fatalf("runtime error: %d", code)
	}
	if code, _ := newEnv(t, Config{}).do(t, "GET", "/runningpods/"); code != 503 {
		t.Fatalf("no runtime: %d", code)
	}
}

func TestContainerLogsEndpoint(t *testing.T) {
	dir := t.TempDir()
	path := logFile(t, dir,
		"2026-01-02T03:04:05.000000001Z stdout F one\n",
		"2026-01-02T03:04:06.000000001Z stderr F two\n",
		"2026-01-02T03:04:07.000000001Z stdout F three\n")
	var asked []string
	locator := LogLocatorFunc(func(_ context.Context, pod *v1.Pod, c string, previous bool) (ContainerLog, error) {
		asked = append(asked, fmt.Sprintf("%s/%s previous=%v", pod.Name, c, previous))
		if c == "init" {
			return ContainerLog{}, fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", c, pod.Name)
		}
		return ContainerLog{Path: path}, nil
	})
	e := newEnv(t, Config{Pods: PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} }), Logs: locator})
	cases := []struct {
		name, query string
		container   string
		code        int
		body        string
	}{
		{"all", "", "app", 200, "one\ntwo\nthree\n"},
		{"tailLines", "?tailLines=1", "app", 200, "three\n"},
		{"legacy tail", "?tail=2", "app", 200, "two\nthree\n"},
		{"legacy tail all", "?tail=all", "app", 200, "one\ntwo\nthree\n"},
		{"limitBytes", "?limitBytes=5", "app", 200, "one\nt"},
		{"sinceTime", "?sinceTime=2026-01-02T03:04:06Z", "app", 200, "two\nthree\n"},
		{"timestamps", "?timestamps=true&tailLines=1", "app", 200, "2026-01-02T03:04:07.000000001Z three\n"},
		{"stdout", "?stream=Stdout", "app", 200, "one\nthree\n"},
		{"stderr", "?stream=Stderr", "app", 200, "two\n"},
		{"follow of a stopped container", "?follow=true", "app", 200, "one\ntwo\nthree\n"},
		{"previous asks the locator", "?previous=true&tailLines=1", "app", 200, "three\n"},
		{"negative tailLines", "?tailLines=-1", "app", 422, "tailLines"},
		{"zero limitBytes", "?limitBytes=0", "app", 422, "limitBytes"},
		{"both since", "?sinceSeconds=5&sinceTime=2026-01-02T03:04:06Z", "app", 422, "sinceTime or sinceSeconds"},
		{"stream and tail", "?stream=Stdout&tailLines=1", "app", 422, "mutually exclusive"},
		{"garbage tailLines", "?tailLines=abc", "app", 400, "not an integer"},
		{"unknown container", "", "nope", 404, `container "nope" not found in pod "web"`},
		{"locator error", "", "init", 400, "is waiting to start"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.do(t, "GET", "/containerLogs/default/web/"+tc.container+tc.query)
			if code != tc.code || (tc.code == 200 && body != tc.body) || !strings.Contains(body, tc.body) {
				t.Fatalf("got %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
	if code, body := e.do(t, "GET", "/containerLogs/default/ghost/app"); code != 404 || !strings.Contains(body, `pod "ghost" does not exist`) {
		t.Fatalf("unknown pod: %d %q", code, body)
	}
	if !strings.Contains(strings.Join(asked, ","), "web/app previous=true") {
		t.Fatalf("locator calls: %v", asked)
	}
}

func TestPickLogInstance(t *testing.T) {
	pod := func(policy v1.RestartPolicy) *v1.Pod {
		p := testPod()
		p.Spec.RestartPolicy = policy
		return p
	}
	c := func(id string, st nodekit.State, exit int) *nodekit.ContainerStatus {
		return &nodekit.ContainerStatus{ID: nodekit.ContainerID{ID: id}, Name: "app", State: st, ExitCode: exit, LogPath: id + ".log"}
	}
	cases := []struct {
		name      string
		pod       *v1.Pod
		instances []*nodekit.ContainerStatus
		previous  bool
		want      string // instance ID, or "" for an error
	}{
		{"current running", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("2", nodekit.StateRunning, 0), c("1", nodekit.StateExited, 1)}, false, "2"},
		{"previous of running", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("2", nodekit.StateRunning, 0), c("1", nodekit.StateExited, 1)}, true, "1"},
		{"crash loop: previous is the last exit", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("2", nodekit.StateExited, 1), c("1", nodekit.StateExited, 1)}, true, "2"},
		{"crash loop: current is the last exit", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("2", nodekit.StateExited, 1), c("1", nodekit.StateExited, 1)}, false, "2"},
		{"never restarts: previous is the one before", pod(v1.RestartPolicyNever), []*nodekit.ContainerStatus{c("2", nodekit.StateExited, 1), c("1", nodekit.StateExited, 1)}, true, "1"},
		{"on failure after success: terminated for good", pod(v1.RestartPolicyOnFailure), []*nodekit.ContainerStatus{c("1", nodekit.StateExited, 0)}, true, ""},
		{"on failure after failure: restarting", pod(v1.RestartPolicyOnFailure), []*nodekit.ContainerStatus{c("1", nodekit.StateExited, 2)}, true, "1"},
		{"no previous", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("1", nodekit.StateRunning, 0)}, true, ""},
		{"created: show the last one", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("2", nodekit.StateCreated, 0), c("1", nodekit.StateExited, 1)}, false, "1"},
		{"only created", pod(v1.RestartPolicyAlways), []*nodekit.ContainerStatus{c("1", nodekit.StateCreated, 0)}, false, ""},
		{"none", pod(v1.RestartPolicyAlways), nil, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickLogInstance(tc.pod, "app", tc.instances, tc.previous)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("got %s, want an error", got.ID.ID)
			case tc.want != "" && (err != nil || got.ID.ID != tc.want):
				t.Fatalf("got %v %v, want %s", got, err, tc.want)
			}
		})
	}
}

func TestRuntimeLogsRunning(t *testing.T) {
	p := testPod()
	rt := &fakeRuntime{statuses: map[types.UID]*nodekit.PodStatus{p.UID: {Containers: []*nodekit.ContainerStatus{
		{ID: nodekit.ContainerID{ID: "c2"}, Name: "app", State: nodekit.StateRunning, LogPath: "/logs/app/1.log"},
	}}}}
	log, err := NewRuntimeLogs(rt).ContainerLog(t.Context(), p, "app", false)
	if err != nil || log.Path != "/logs/app/1.log" || log.Running == nil {
		t.Fatalf("%+v %v", log, err)
	}
	if ok, err := log.Running(t.Context()); !ok || err != nil {
		t.Fatalf("running: %v %v", ok, err)
	}
	rt.mu.Lock()
	rt.statuses[p.UID].Containers[0].State = nodekit.StateExited
	rt.mu.Unlock()
	if ok, _ := log.Running(t.Context()); ok {
		t.Fatal("exited container reported running")
	}
}

func TestStatsEndpoints(t *testing.T) {
	if code, body := newEnv(t, Config{}).do(t, "GET", "/stats/summary"); code != 503 || !strings.Contains(body, "no stats provider") {
		t.Fatalf("no provider: %d %q", code, body)
	}
	if code, _ := newEnv(t, Config{}).do(t, "GET", "/metrics/resource"); code != 503 {
		t.Fatalf("no provider: %d", code)
	}
	now := metav1.NewTime(time.Unix(1700000000, 0))
	u64 := func(v uint64) *uint64 { return &v }
	var onlyAsked bool
	stats := StatsProviderFunc(func(_ context.Context, only bool) (*statsapi.Summary, error) {
		onlyAsked = only
		return &statsapi.Summary{
			Node: statsapi.NodeStats{NodeName: "node-1",
				CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u64(2e9)},
				Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: u64(1 << 20)}},
			Pods: []statsapi.PodStats{{
				PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "uid-1"},
				CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u64(1e9)},
				Containers: []statsapi.ContainerStats{{Name: "app", StartTime: now,
					Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: u64(4096)}}},
			}},
		}, nil
	})
	e := newEnv(t, Config{Stats: stats})
	code, body := e.do(t, "GET", "/stats/summary")
	var sum statsapi.Summary
	if code != 200 || json.Unmarshal([]byte(body), &sum) != nil || sum.Node.NodeName != "node-1" || onlyAsked {
		t.Fatalf("summary: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/stats/summary?only_cpu_and_memory=true"); code != 200 || !onlyAsked {
		t.Fatalf("only cpu and memory: %d %v", code, onlyAsked)
	}
	code, body = e.do(t, "GET", "/metrics/resource")
	for _, want := range []string{
		"node_cpu_usage_seconds_total 2 1700000000000",
		"node_memory_working_set_bytes 1.048576e+06",
		`pod_cpu_usage_seconds_total{namespace="default",pod="web"} 1`,
		`container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 4096`,
		`container_start_time_seconds{container="app",namespace="default",pod="web"} 1.7e+09`,
		"resource_scrape_error 0",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics/resource lacks %q: %d\n%s", want, code, body)
		}
	}
}

func TestMetricsEndpoints(t *testing.T) {
	reg, probeReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	m, err := RegisterAgentMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := RegisterProbeMetrics(probeReg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RegisterAgentMetrics(reg); err == nil {
		t.Fatal("registering twice succeeded")
	}
	m.ObservePodWorker("sync", 20*time.Millisecond)
	m.ObserveRelist(time.Millisecond, time.Second)
	m.SetRunning(2, map[string]int{"running": 3})
	m.IncEviction("memory.available")
	pm.ObserveProbe("Readiness", "successful", "default", "web", "uid-1", "app", time.Millisecond)
	e := newEnv(t, Config{Metrics: reg, ProbeMetrics: probeReg, MetricsRegisterer: reg})
	e.do(t, "GET", "/pods")
	_, body := e.do(t, "GET", "/metrics")
	for _, want := range []string{
		`kubelet_pod_worker_duration_seconds_count{operation_type="sync"} 1`,
		"kubelet_pleg_relist_duration_seconds_count 1",
		"kubelet_pleg_relist_interval_seconds_count 1",
		"kubelet_running_pods 2",
		`kubelet_running_containers{container_state="running"} 3`,
		`kubelet_running_containers{container_state="exited"} 0`,
		`kubelet_evictions{eviction_signal="memory.available"} 1`,
		`kubelet_http_requests_total{long_running="false",method="GET",path="pods",server_type="readwrite"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if _, body := e.do(t, "GET", "/metrics/probes"); !strings.Contains(body, `prober_probe_total{container="app",namespace="default",pod="web",pod_uid="uid-1",probe_type="Readiness",result="successful"} 1`) {
		t.Fatalf("/metrics/probes:\n%s", body)
	}
}

func TestConfigz(t *testing.T) {
	e := newEnv(t, Config{Configz: map[string]any{"maxPods": 110}})
	if code, body := e.do(t, "GET", "/configz"); code != 200 || body != `{"kubeletconfig":{"maxPods":110}}` {
		t.Fatalf("%d %s", code, body)
	}
}

type fakeCheckpointer struct {
	reqs []*runtimeapi.CheckpointContainerRequest
}

func (f *fakeCheckpointer) CheckpointContainer(_ context.Context, r *runtimeapi.CheckpointContainerRequest) error {
	f.reqs = append(f.reqs, r)
	return nil
}

func TestCheckpoint(t *testing.T) {
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	rt := &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}
	if code, _ := newEnv(t, Config{Pods: pods, Runtime: rt}).do(t, "POST", "/checkpoint/default/web/app"); code != 404 {
		t.Fatalf("disabled checkpoint: %d", code)
	}
	cp := &fakeCheckpointer{}
	e := newEnv(t, Config{Pods: pods, Runtime: rt, Checkpointer: cp, CheckpointDir: "/var/lib/kubelet/checkpoints"})
	code, body := e.do(t, "POST", "/checkpoint/default/web/app?timeout=7")
	if code != 200 || len(cp.reqs) != 1 || cp.reqs[0].ContainerId != "c-app" || cp.reqs[0].Timeout != 7 ||
		!strings.HasPrefix(cp.reqs[0].Location, "/var/lib/kubelet/checkpoints/checkpoint-web_default-app-") ||
		!strings.Contains(body, cp.reqs[0].Location) {
		t.Fatalf("%d %s %+v", code, body, cp.reqs)
	}
	if code, _ := e.do(t, "POST", "/checkpoint/default/web/nope"); code != 404 {
		t.Fatalf("unknown container: %d", code)
	}
}

// echoBackend is a streaming server that switches protocols and echoes
// every byte back, recording the request it got.
func echoBackend(t *testing.T) (*url.URL, <-chan *http.Request) {
	t.Helper()
	got := make(chan *http.Request, 10)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		if r.URL.Query().Get("refuse") != "" {
			http.Error(w, "session expired", http.StatusNotFound)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nhello:", r.Header.Get("Upgrade"))
		buf.Flush()
		_, _ = io.Copy(conn, buf)
	}))
	t.Cleanup(hs.Close)
	u, _ := url.Parse(hs.URL + "/exec/token123")
	return u, got
}

// upgrade sends an upgrade request over TLS and returns the connection
// after the response headers.
func (e *env) upgrade(t *testing.T, method, path, protocol string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	u, _ := url.Parse(e.url)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer t\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", method, path, u.Host, protocol)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, conn, br
}

func TestExecAttachProxy(t *testing.T) {
	backend, got := echoBackend(t)
	st := &fakeStreamer{url: backend}
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	e := newEnv(t, Config{Pods: pods, Runtime: &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}, Streaming: st})

	resp, conn, br := e.upgrade(t, "POST", "/exec/default/web/app?command=sh&command=-c&command=echo+hi&input=1&output=1&error=1", "SPDY/3.1")
	if resp.StatusCode != 101 {
		t.Fatalf("exec: status %d", resp.StatusCode)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("hello:ping"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hello:ping" {
		t.Fatalf("relayed %q %v", buf, err)
	}
	r := <-got
	if r.URL.Path != "/exec/token123" || r.Header.Get("Upgrade") != "SPDY/3.1" || r.Header.Get("Authorization") != "" || r.Header.Get("X-Forwarded-For") == "" {
		t.Fatalf("backend got %s %v", r.URL, r.Header)
	}
	ex := st.execs[0]
	if ex.ContainerId != "c-app" || strings.Join(ex.Cmd, "|") != "sh|-c|echo hi" || !ex.Stdin || !ex.Stdout || !ex.Stderr || ex.Tty {
		t.Fatalf("exec request %+v", ex)
	}

	// Attach takes TTY from the spec and drops stderr with it.
	resp, _, _ = e.upgrade(t, "GET", "/attach/default/web/uid-1/tty?output=1&error=1", "SPDY/3.1")
	if resp.StatusCode != 101 || len(st.atts) != 1 || !st.atts[0].Tty || st.atts[0].Stderr || st.atts[0].ContainerId != "c-tty" {
		t.Fatalf("attach: %d %+v", resp.StatusCode, st.atts)
	}

	cases := []struct {
		name, method, path string
		upgrade            bool
		code               int
	}{
		{"not an upgrade", "POST", "/exec/default/web/app?command=ls&output=1", false, 400},
		{"no streams", "POST", "/exec/default/web/app?command=ls", true, 400},
		{"no command", "POST", "/exec/default/web/app?output=1", true, 400},
		{"unknown pod", "POST", "/exec/default/ghost/app?command=ls&output=1", true, 404},
		{"wrong uid", "POST", "/exec/default/web/other-uid/app?command=ls&output=1", true, 404},
		{"container not running", "POST", "/exec/default/web/init?command=ls&output=1", true, 404},
		{"PUT is not allowed", "PUT", "/exec/default/web/app?command=ls&output=1", true, 405},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.upgrade {
				if resp, _, _ := e.upgrade(t, tc.method, tc.path, "SPDY/3.1"); resp.StatusCode != tc.code {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
				}
				return
			}
			if code, _ := e.do(t, tc.method, tc.path); code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
		})
	}

	// A refusal by the runtime reaches the caller with its status.
	refusing := *backend
	refusing.RawQuery = "refuse=1"
	st.url = &refusing
	if resp, _, br := e.upgrade(t, "POST", "/exec/default/web/app?command=ls&output=1", "SPDY/3.1"); resp.StatusCode != 404 {
		b, _ := io.ReadAll(io.LimitReader(br, 100))
		t.Fatalf("refused upgrade: %d %s", resp.StatusCode, b)
	}

	// Without a streamer there is no streaming.
	e2 := newEnv(t, Config{Pods: pods, Runtime: &fakeRuntime{}})
	if resp, _, _ := e2.upgrade(t, "POST", "/exec/default/web/app?command=ls&output=1", "SPDY/3.1"); resp.StatusCode != 501 {
		t.Fatalf("no streamer: %d", resp.StatusCode)
	}
}

func TestPortForwardProxy(t *testing.T) {
	backend, _ := echoBackend(t)
	st := &fakeStreamer{url: backend}
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	e := newEnv(t, Config{Pods: pods, Runtime: &fakeRuntime{pods: []*nodekit.Pod{runningPod()}}, Streaming: st})
	if resp, _, _ := e.upgrade(t, "POST", "/portForward/default/web", "SPDY/3.1"); resp.StatusCode != 101 {
		t.Fatalf("SPDY port-forward: %d", resp.StatusCode)
	}
	if pf := st.pfs[0]; pf.PodSandboxId != "sb-1" || len(pf.Port) != 0 {
		t.Fatalf("SPDY request %+v", pf)
	}
	if resp, _, _ := e.upgrade(t, "GET", "/portForward/default/web", "websocket"); resp.StatusCode != 400 {
		t.Fatalf("WebSocket without ports: %d", resp.StatusCode)
	}
	if resp, _, _ := e.upgrade(t, "GET", "/portForward/default/web/uid-1?port=80,8080&port=9000", "websocket"); resp.StatusCode != 101 {
		t.Fatalf("WebSocket port-forward: %d", resp.StatusCode)
	}
	if pf := st.pfs[1]; fmt.Sprint(pf.Port) != "[80 8080 9000]" {
		t.Fatalf("WebSocket ports %v", pf.Port)
	}
}

func TestReadOnlyHandler(t *testing.T) {
	s, err := New(Config{NodeName: "n", Authorizer: AlwaysAllow{}, Pods: PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{"/pods": 200, "/healthz": 200, "/metrics": 200, "/exec/default/web/app": 405, "/containerLogs/default/web/app": 405, "/configz": 404, "/stats/summary": 503} {
		w := httptest.NewRecorder()
		s.ReadOnlyHandler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != want {
			t.Errorf("read-only %s: %d, want %d", path, w.Code, want)
		}
	}
	// The secure handler refuses the same request without credentials.
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/pods", nil))
	if w.Code != 401 {
		t.Fatalf("secure /pods without credentials: %d", w.Code)
	}
}

func TestServeAndShutdown(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	if err := os.WriteFile(path, []byte(time.Now().UTC().Format(time.RFC3339Nano)+" stdout F x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pods := PodListerFunc(func() []*v1.Pod { return []*v1.Pod{testPod()} })
	locator := LogLocatorFunc(func(context.Context, *v1.Pod, string, bool) (ContainerLog, error) {
		return ContainerLog{Path: path, Running: func(context.Context) (bool, error) { return true, nil }}, nil
	})
	s, err := New(Config{NodeName: "n", Authorizer: AlwaysAllow{}, AllowAnonymous: true, Pods: pods, Logs: locator})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + l.Addr().String() + "/containerLogs/default/web/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "x\n" {
		t.Fatalf("follow: %q %v", line, err)
	}
	cancel() // ends the follow too
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
}
