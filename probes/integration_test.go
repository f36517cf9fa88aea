package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// TestContainerdIntegration probes real containers on a private containerd:
// exec probes and hooks through criruntime's ExecSync, and (with the agnhost
// image) httpGet, tcpSocket and grpc probes over the pod network.
func TestContainerdIntegration(t *testing.T) {
	cri := agenttest.StartContainerd(t)
	ctx := testCtx(t)
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.WithoutCancel(ctx)) })

	t.Run("exec", func(t *testing.T) {
		pod := itPod("exec", agenttest.BusyboxImage, "sh", "-c", "touch /tmp/healthy; exec sleep 3600")
		id := startPod(t, rt, pod)
		rec := &fakeEvents{}
		m, err := NewManager(Config{Status: runtimeStatus(ctx, rt, pod), Execer: rt, Recorder: rec})
		if err != nil {
			t.Fatal(err)
		}
		c := &pod.Spec.Containers[0]
		c.LivenessProbe = &v1.Probe{
			ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
			FailureThreshold: 2,
		}
		c.ReadinessProbe = &v1.Probe{
			ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "5"}}},
			TimeoutSeconds: 1, FailureThreshold: 1,
		}
		key := workerKey{uid: pod.UID, container: "app", kind: Liveness}
		live := newWorker(m, key, pod, c)
		key.kind = Readiness
		ready := newWorker(m, key, pod, c)

		live.step(ctx)
		if r, _ := m.Result(Liveness, id); r != Success {
			t.Fatalf("liveness %v while the file exists", r)
		}
		if _, _, code, err := rt.ExecSync(ctx, id, []string{"rm", "/tmp/healthy"}, 5*time.Second); err != nil || code != 0 {
			t.Fatalf("rm: %d %v", code, err)
		}
		live.step(ctx)
		if r, _ := m.Result(Liveness, id); r != Success {
			t.Fatalf("liveness %v after one failure of two", r)
		}
		live.step(ctx)
		if r, _ := m.Result(Liveness, id); r != Failure {
			t.Fatalf("liveness %v after two failures", r)
		}

		start := time.Now()
		ready.step(ctx)
		took := time.Since(start)
		if r, _ := m.Result(Readiness, id); r != Failure {
			t.Errorf("readiness %v after a timed-out exec", r)
		}
		if took > 4*time.Second {
			t.Errorf("the 1s timeout took %v", took)
		}
		ev := rec.list()
		want := []string{
			"Warning Unhealthy Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory\n",
			"Warning Unhealthy Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory\n",
			`Warning Unhealthy Readiness probe failed: command timed out: "sleep 5" timed out after 1s`,
		}
		if !slices.Equal(ev, want) {
			t.Errorf("events:\n%q\nwant\n%q", ev, want)
		}
		t.Logf("exec liveness passed then failed on %s; a 1s exec timeout failed in %v", id, took.Round(time.Millisecond))
	})

	t.Run("exec liveness through the manager", func(t *testing.T) {
		pod := itPod("managed", agenttest.BusyboxImage, "sh", "-c", "touch /tmp/healthy; exec sleep 3600")
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"test", "-e", "/tmp/healthy"}}},
			PeriodSeconds: 1, FailureThreshold: 2,
		}
		id := startPod(t, rt, pod)
		m, err := NewManager(Config{Status: runtimeStatus(ctx, rt, pod), Execer: rt})
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(mctx) }()
		defer func() {
			cancel()
			_ = <-done
		}()
		m.AddPod(ctx, pod)
		waitResult(t, m, Liveness, id, Success)
		if _, _, _, err := rt.ExecSync(ctx, id, []string{"rm", "/tmp/healthy"}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		waitResult(t, m, Liveness, id, Failure)
	})

	t.Run("hooks", func(t *testing.T) {
		pod := itPod("hooks", agenttest.BusyboxImage, "sleep", "3600")
		id := startPod(t, rt, pod)
		hr := NewHookRunner(HookConfig{Execer: rt})
		c := &pod.Spec.Containers[0]
		ok := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo started > /tmp/poststart"}}}
		if msg, err := hr.Run(ctx, pod, c, id, "", ok); err != nil {
			t.Fatalf("postStart: %s", msg)
		}
		out, _, _, err := rt.ExecSync(ctx, id, []string{"cat", "/tmp/poststart"}, 5*time.Second)
		if err != nil || string(out) != "started\n" {
			t.Fatalf("the hook's file holds %q (%v)", out, err)
		}
		bad := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo oops >&2; exit 3"}}}
		msg, err := hr.Run(ctx, pod, c, id, "", bad)
		if err == nil || !strings.Contains(msg, "exited with 3: oops") {
			t.Fatalf("failing hook: %q, %v", msg, err)
		}
		t.Logf("failing hook: %s", msg)
	})

	t.Run("network probes", func(t *testing.T) {
		if !cri.HasImage(agenttest.AgnhostImage) {
			agenttest.RequireIntegration(t, "the agnhost image", errors.New("not built (make tools)"))
		}
		pod := itPod("net", agenttest.AgnhostImage, "/agnhost", "grpc-health-checking", "--port=5000", "--http-port=8080")
		id := startPod(t, rt, pod)
		st := runtimeStatus(ctx, rt, pod)
		s, _ := st.GetPodStatus(pod.UID)
		ip := s.PodIP
		if !cri.Subnet.Contains(net.ParseIP(ip)) {
			t.Fatalf("pod IP %q not on the test bridge %v", ip, cri.Subnet)
		}
		rec := &fakeEvents{}
		m, err := NewManager(Config{Status: st, Recorder: rec})
		if err != nil {
			t.Fatal(err)
		}
		c := &pod.Spec.Containers[0]
		c.Ports = []v1.ContainerPort{{Name: "grpc", ContainerPort: 5000}, {Name: "http", ContainerPort: 8080}}
		spec := func(h v1.ProbeHandler) *v1.Probe {
			p := withDefaults(v1.Probe{ProbeHandler: h, TimeoutSeconds: 2}, Readiness)
			return &p
		}
		grpcSpec := spec(v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 5000}})
		tcpSpec := spec(v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("grpc")}})
		httpSpec := spec(v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/make-serving"}})

		// The server needs a moment to listen.
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, msg, _ := m.prober.run(ctx, tcpSpec, c, ip, id)
			if out == outSuccess {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tcpSocket probe never passed: %s", msg)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for name, p := range map[string]*v1.Probe{"grpc": grpcSpec, "httpGet": httpSpec} {
			if out, msg, err := m.prober.run(ctx, p, c, ip, id); out != outSuccess {
				t.Errorf("%s probe: %v %q %v", name, out, msg, err)
			}
		}
		// Make the gRPC health service report NOT_SERVING.
		resp, err := http.Get(fmt.Sprintf("http://%s/make-not-serving", net.JoinHostPort(ip, "8080")))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		out, msg, _ := m.prober.run(ctx, grpcSpec, c, ip, id)
		if out != outFailure || !strings.Contains(msg, "NOT_SERVING") {
			t.Errorf("grpc probe after make-not-serving: %v %q", out, msg)
		}
		bad := spec(v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(8080), Path: "/no-such-path"}})
		if out, msg, _ := m.prober.run(ctx, bad, c, ip, id); out != outFailure {
			t.Errorf("httpGet of a missing path: %v %q", out, msg)
		}
		t.Logf("tcpSocket, grpc and httpGet probes against %s on the pod network", ip)
	})
}

func itPod(name, image string, cmd ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("probes-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: image, ImagePullPolicy: v1.PullNever, Command: cmd,
		}}},
	}
}

// startPod runs the pod and returns its container's ID once it runs; the
// pod is stopped and removed when the test ends.
func startPod(t *testing.T, rt *criruntime.Runtime, pod *v1.Pod) nodekit.ContainerID {
	t.Helper()
	ctx := t.Context()
	if err := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}}).Err(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		pods, _ := rt.ListPods(ctx, true)
		for _, p := range pods {
			if p.ID != pod.UID {
				continue
			}
			// sleep as PID 1 ignores SIGTERM: do not wait 30s for it.
			grace := time.Second
			_ = rt.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: p, GracePeriod: &grace})
			for _, c := range p.Containers {
				_ = rt.RemoveContainer(ctx, c.ID)
			}
			for _, sb := range p.Sandboxes {
				_ = rt.RemovePodSandbox(ctx, sb.ID.ID)
			}
		}
	})
	// A real runtime: there is no clock to fake.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.FindContainer("app"); c != nil && c.State == nodekit.StateRunning {
			return c.ID
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("container of %s not running within 30s", pod.Name)
	return nodekit.ContainerID{}
}

// runtimeStatus is a StatusGetter reading the runtime directly, standing in
// for the sync loop and statusmgr.
func runtimeStatus(ctx context.Context, rt *criruntime.Runtime, pod *v1.Pod) StatusGetter {
	return StatusGetterFunc(func(uid types.UID) (v1.PodStatus, bool) {
		st, err := rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil || len(st.Sandboxes) == 0 {
			return v1.PodStatus{}, false
		}
		out := v1.PodStatus{Phase: v1.PodRunning}
		if len(st.IPs) > 0 {
			out.PodIP = st.IPs[0]
		}
		for _, c := range pod.Spec.Containers {
			cs := st.FindContainer(c.Name)
			if cs == nil {
				continue
			}
			s := v1.ContainerStatus{Name: c.Name, ContainerID: cs.ID.String()}
			switch cs.State {
			case nodekit.StateRunning:
				s.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.StartedAt)}
			case nodekit.StateExited:
				s.State.Terminated = &v1.ContainerStateTerminated{ExitCode: int32(cs.ExitCode)}
			default:
				s.State.Waiting = &v1.ContainerStateWaiting{}
			}
			out.ContainerStatuses = append(out.ContainerStatuses, s)
		}
		return out, true
	})
}

// waitResult reads Updates until the container's result is want.
func waitResult(t *testing.T, m *Manager, kind Kind, id nodekit.ContainerID, want Result) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if r, ok := m.Result(kind, id); ok && r == want {
			return
		}
		select {
		case <-m.Updates():
		case <-timeout:
			r, ok := m.Result(kind, id)
			t.Fatalf("%s result of %s is %v (%v), want %v within 30s", kind, id, r, ok, want)
		}
	}
}
