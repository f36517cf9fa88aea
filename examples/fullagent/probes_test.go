package main

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
)

// exec runs a command in a pod's container straight through CRI, as a
// user with crictl would.
func (e *env) exec(t *testing.T, p *v1.Pod, container string, cmd ...string) string {
	t.Helper()
	out, code, err := e.tryExec(t, p, container, cmd...)
	if err != nil || code != 0 {
		t.Fatalf("exec %v: code %d, %v, %s", cmd, code, err, out)
	}
	return out
}

// tryExec runs a command and returns its output (stdout then stderr) and
// exit code.
func (e *env) tryExec(t *testing.T, p *v1.Pod, container string, cmd ...string) (string, int, error) {
	t.Helper()
	rt, err := criruntime.New(t.Context(), criruntime.Config{Endpoint: e.cri.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	c := containerStatus(p, container)
	_, id, _ := strings.Cut(c.ContainerID, "://")
	stdout, stderr, code, err := rt.ExecSync(t.Context(), nodekit.ContainerID{ID: id}, cmd, 10*time.Second)
	return string(stdout) + string(stderr), code, err
}

func ready(p *v1.Pod, name string) bool {
	c := containerStatus(p, name)
	return c != nil && c.Ready
}

func execProbe(cmd string, period int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", cmd}}}, PeriodSeconds: period, FailureThreshold: 1}
}

func TestProbesAndHooks(t *testing.T) {
	e := startEnv(t)

	t.Run("httpGet readiness flips with the endpoint", func(t *testing.T) {
		pod := simplePod("netexec", v1.RestartPolicyAlways, "")
		c := &pod.Spec.Containers[0]
		c.Image, c.Command, c.Args = agenttest.AgnhostImage, nil, []string{"netexec", "--http-port=8080", "--delay-shutdown=300"}
		c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1, FailureThreshold: 1}
		e.createPod(t, pod)
		p := e.waitPod(t, "netexec", 60*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
		// SIGTERM makes netexec's /readyz answer 503 while it keeps running.
		e.exec(t, p, "app", "kill", "-TERM", "1")
		p = e.waitPod(t, "netexec", 30*time.Second, "not Ready", func(p *v1.Pod) bool { return !ready(p, "app") })
		if c := containerStatus(p, "app"); c.State.Running == nil || c.RestartCount != 0 {
			t.Fatalf("readiness failure must not restart: %+v", c)
		}
	})

	t.Run("readiness turns false while the pod terminates", func(t *testing.T) {
		pod := simplePod("leaving", v1.RestartPolicyAlways, "trap 'rm -f /tmp/ready; sleep 20; exit 0' TERM; touch /tmp/ready; while true; do sleep 1; done")
		pod.Spec.Containers[0].ReadinessProbe = execProbe("cat /tmp/ready", 1)
		grace := int64(30)
		pod.Spec.TerminationGracePeriodSeconds = &grace
		e.createPod(t, pod)
		e.waitPod(t, "leaving", 60*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
		if err := e.client.CoreV1().Pods("default").Delete(t.Context(), "leaving", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p := e.waitPod(t, "leaving", 10*time.Second, "not Ready while terminating", func(p *v1.Pod) bool { return !ready(p, "app") })
		if p.DeletionTimestamp == nil || containerStatus(p, "app").State.Running == nil {
			t.Fatalf("want a terminating pod with its container still running: %s", describeStatus(p))
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status != v1.ConditionFalse {
				t.Fatalf("pod condition Ready is %s while its container is not ready", c.Status)
			}
		}
	})

	t.Run("tcpSocket and grpc probes", func(t *testing.T) {
		pod := simplePod("tcpgrpc", v1.RestartPolicyAlways, "")
		pod.Spec.Containers = []v1.Container{
			{Name: "tcp", Image: agenttest.AgnhostImage, Args: []string{"netexec", "--http-port=8080", "--udp-port=-1"},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}},
			{Name: "grpc", Image: agenttest.AgnhostImage, Args: []string{"grpc-health-checking", "--port=5000", "--http-port=8081"},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 5000}}, PeriodSeconds: 1}},
		}
		e.createPod(t, pod)
		e.waitPod(t, "tcpgrpc", 60*time.Second, "both Ready", func(p *v1.Pod) bool { return ready(p, "tcp") && ready(p, "grpc") })
	})

	t.Run("exec liveness failure restarts the container", func(t *testing.T) {
		pod := simplePod("liveness", v1.RestartPolicyAlways, "touch /tmp/healthy; sleep 3600")
		pod.Spec.Containers[0].LivenessProbe = execProbe("cat /tmp/healthy", 1)
		e.createPod(t, pod)
		p := e.waitPod(t, "liveness", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.exec(t, p, "app", "rm", "/tmp/healthy")
		e.waitPod(t, "liveness", 60*time.Second, "restarted", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c.RestartCount >= 1
		})
		e.waitEvent(t, "liveness", "Killing", "failed liveness probe")
		e.waitEvent(t, "liveness", "Unhealthy", "Liveness probe failed")
	})

	t.Run("startup probe holds liveness back", func(t *testing.T) {
		pod := simplePod("startup", v1.RestartPolicyAlways, "sleep 3600")
		pod.Spec.Containers[0].StartupProbe = &v1.Probe{ProbeHandler: execProbe("cat /tmp/started", 1).ProbeHandler, PeriodSeconds: 1, FailureThreshold: 120}
		pod.Spec.Containers[0].LivenessProbe = execProbe("false", 1)
		e.createPod(t, pod)
		e.waitPod(t, "startup", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		time.Sleep(5 * time.Second) // a failing liveness probe would have killed it by now
		p, err := e.client.CoreV1().Pods("default").Get(t.Context(), "startup", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := containerStatus(p, "app")
		if c.RestartCount != 0 || c.Started == nil || *c.Started {
			t.Fatalf("before startup succeeded: restarts=%d started=%v", c.RestartCount, c.Started)
		}
		e.exec(t, p, "app", "touch", "/tmp/started")
		e.waitPod(t, "startup", 60*time.Second, "liveness kill after startup", func(p *v1.Pod) bool { return containerStatus(p, "app").RestartCount >= 1 })
	})

	t.Run("postStart hook writes a file the app reads", func(t *testing.T) {
		pod := simplePod("poststart", v1.RestartPolicyAlways, "while [ ! -f /tmp/hooked ]; do sleep 0.1; done; touch /tmp/app-saw-it; sleep 3600")
		c := &pod.Spec.Containers[0]
		c.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo hi > /tmp/hooked"}}}}
		c.ReadinessProbe = execProbe("cat /tmp/app-saw-it", 1)
		e.createPod(t, pod)
		p := e.waitPod(t, "poststart", 60*time.Second, "Ready", func(p *v1.Pod) bool { return ready(p, "app") })
		if containerStatus(p, "app").RestartCount != 0 {
			t.Fatal("restarted")
		}
	})

	t.Run("failing postStart hook kills the container", func(t *testing.T) {
		pod := simplePod("badhook", v1.RestartPolicyAlways, "sleep 3600")
		// sh as PID 1 ignores SIGTERM: keep the kill after the hook short.
		pod.Spec.TerminationGracePeriodSeconds = new(int64)
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "exit 3"}}}}
		e.createPod(t, pod)
		e.waitEvent(t, "badhook", "FailedPostStartHook", "")
		e.waitPod(t, "badhook", 60*time.Second, "killed and restarted", func(p *v1.Pod) bool { return containerStatus(p, "app").RestartCount >= 1 })
	})
}

// waitEvent waits for an event about the pod with the reason and, if not
// empty, a message containing msg.
func (e *env) waitEvent(t *testing.T, pod, reason, msg string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == pod && ev.Reason == reason && strings.Contains(ev.Message, msg) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event with %q for pod %s", reason, msg, pod)
	}
}
