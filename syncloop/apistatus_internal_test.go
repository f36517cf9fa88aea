package syncloop

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
)

// TestAPIStatusUsesTheGenerator: the loop's status takes phase, reason and
// conditions from internal/podstatus, fed with the container statuses it
// built, the API status's conditions, the last status and the caller's
// extra conditions.
func TestAPIStatusUsesTheGenerator(t *testing.T) {
	const lb = v1.PodConditionType("example.com/lb")
	now := time.Unix(1700000000, 0)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u", Generation: 5},
		Spec: v1.PodSpec{
			Containers:     []v1.Container{{Name: "app", Image: "busybox"}},
			ReadinessGates: []v1.PodReadinessGate{{ConditionType: lb}},
		},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: lb, Status: v1.ConditionFalse}}},
	}
	rt := &nodekit.PodStatus{ID: "u",
		Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}},
		Containers: []*nodekit.ContainerStatus{{ID: nodekit.ContainerID{Type: "fake", ID: "1"}, Name: "app",
			State: nodekit.StateRunning, CreatedAt: now, StartedAt: now}}}
	resize := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: "Deferred", ObservedGeneration: 4}
	old := v1.PodStatus{Phase: v1.PodPending, Reason: "Waiting"}

	s := apiStatus(statusInput{pod: pod, runtime: rt, old: old, extra: []v1.PodCondition{resize}, now: now})
	if s.Phase != v1.PodRunning || s.Reason != "" {
		t.Errorf("phase = %s %q, want Running without the Pending phase's reason", s.Phase, s.Reason)
	}
	ready := podstatus.Find(s.Conditions, v1.PodReady)
	wantMsg := `the status of pod readiness gate "example.com/lb" is not "True", but False`
	if ready == nil || ready.Reason != podstatus.ReasonReadinessGatesNotReady || ready.Message != wantMsg || ready.ObservedGeneration != 5 {
		t.Errorf("Ready = %+v, want %s %q observedGeneration 5", ready, podstatus.ReasonReadinessGatesNotReady, wantMsg)
	}
	if c := podstatus.Find(s.Conditions, v1.PodResizePending); c == nil || *c != resize {
		t.Errorf("extra condition = %+v, want %+v as given", c, resize)
	}

	// Before the runtime has a sandbox: containers wait, the pod cannot
	// start them yet, and the generator says why.
	s = apiStatus(statusInput{pod: pod, now: now})
	if s.Phase != v1.PodPending || s.ContainerStatuses[0].State.Waiting == nil || s.ContainerStatuses[0].State.Waiting.Reason != podstatus.ReasonContainerCreating {
		t.Errorf("no runtime: phase %s, container %+v; want Pending, waiting ContainerCreating", s.Phase, s.ContainerStatuses[0].State)
	}
	c := podstatus.Find(s.Conditions, v1.PodReadyToStartContainers)
	if c == nil || c.Status != v1.ConditionFalse || c.Reason != podstatus.ReasonPodSandboxNotReady || c.Message != podstatus.MessageNoSandbox {
		t.Errorf("PodReadyToStartContainers = %+v, want False %s %q", c, podstatus.ReasonPodSandboxNotReady, podstatus.MessageNoSandbox)
	}
}

// Every container status says whether the container has started, as
// upstream's prober manager sets it: false for one the runtime does not
// have yet (init or regular, waiting with PodInitializing) and for one
// that ended, true for one running without a startup probe. e2e specs
// dereference it.
func TestContainerStatusesStarted(t *testing.T) {
	now := time.Unix(1700000000, 0)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "done", Image: "busybox"}, {Name: "waiting", Image: "busybox"}},
			Containers:     []v1.Container{{Name: "app", Image: "busybox"}},
		},
	}
	rt := &nodekit.PodStatus{ID: "u",
		Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}},
		Containers: []*nodekit.ContainerStatus{{ID: nodekit.ContainerID{Type: "fake", ID: "1"}, Name: "done",
			State: nodekit.StateExited, CreatedAt: now, StartedAt: now, FinishedAt: now}}}
	for _, in := range []statusInput{{pod: pod, now: now}, {pod: pod, runtime: rt, now: now}} {
		s := apiStatus(in)
		for _, cs := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
			if cs.Started == nil || *cs.Started {
				t.Errorf("runtime %v: container %s (%+v) started = %v, want false", in.runtime != nil, cs.Name, cs.State, cs.Started)
			}
		}
	}
	rt.Containers = append(rt.Containers, &nodekit.ContainerStatus{ID: nodekit.ContainerID{Type: "fake", ID: "2"}, Name: "app",
		State: nodekit.StateRunning, CreatedAt: now, StartedAt: now})
	s := apiStatus(statusInput{pod: pod, runtime: rt, now: now})
	if cs := s.ContainerStatuses[0]; cs.Started == nil || !*cs.Started {
		t.Errorf("running app without a startup probe: started = %v, want true", cs.Started)
	}
}
