package syncloop_test

// The loop's behaviour on a running SimNode (agenttest): the real loop,
// PLEG and status manager over the fake runtime, inside a synctest bubble
// (Settle lets fake time pass and everything react). The tests that need
// a seam SimNode fixes (a runtime that blocks, a status manager that
// counts, sources that are not ready) build their own node in
// loop_test.go.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
)

// simStatus is the pod's status as the node holds it.
func simStatus(t *testing.T, n *agenttest.SimNode, uid types.UID) v1.PodStatus {
	t.Helper()
	s, ok := n.Status(uid)
	if !ok {
		t.Fatalf("no status for pod %s", uid)
	}
	return s
}

func TestPodRunsThenSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyNever, "app")
		n.AddPod(p)
		n.Settle(3 * time.Second)

		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodRunning || s.PodIP == "" || s.HostIP != "192.0.2.10" || s.StartTime == nil || s.QOSClass != v1.PodQOSBestEffort {
			t.Fatalf("running status wrong: %+v", s)
		}
		cs := containerState(t, s, "app")
		if cs.State.Running == nil || !cs.Ready || cs.ContainerID == "" {
			t.Fatalf("container status: %+v", cs)
		}
		if condition(s, v1.PodReady) != v1.ConditionTrue || condition(s, v1.PodReadyToStartContainers) != v1.ConditionTrue {
			t.Fatalf("conditions: %+v", s.Conditions)
		}

		if err := rt.ExitContainer("u1", "app", 0); err != nil {
			t.Fatal(err)
		}
		n.Settle(3 * time.Second)
		s = simStatus(t, n, "u1")
		if s.Phase != v1.PodSucceeded {
			t.Fatalf("phase = %s, want Succeeded", s.Phase)
		}
		if cs := containerState(t, s, "app"); cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
			t.Fatalf("terminated state: %+v", cs.State)
		}
		if condition(s, v1.PodReady) != v1.ConditionFalse {
			t.Fatalf("Ready after completion: %+v", s.Conditions)
		}
	})
}

func TestNeverPodFailsWithExitCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		n.AddPod(pod("u1", v1.RestartPolicyNever, "app"))
		n.Settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "app", 3)
		n.Settle(3 * time.Second)
		s := simStatus(t, n, "u1")
		cs := containerState(t, s, "app")
		if s.Phase != v1.PodFailed || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.State.Terminated.Reason != "Error" {
			t.Fatalf("status = %s %+v", s.Phase, cs.State)
		}
		if cs.RestartCount != 0 {
			t.Fatalf("a Never container was restarted: %d", cs.RestartCount)
		}
	})
}

func TestCrashLoopBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		n.AddPod(pod("u1", v1.RestartPolicyAlways, "app"))
		n.Settle(2 * time.Second)

		// The first exit restarts at once.
		_ = rt.ExitContainer("u1", "app", 1)
		n.Settle(2 * time.Second)
		cs := containerState(t, simStatus(t, n, "u1"), "app")
		if cs.RestartCount != 1 || cs.State.Running == nil {
			t.Fatalf("after first exit: restarts=%d state=%+v", cs.RestartCount, cs.State)
		}
		// The second exit waits 10 s in CrashLoopBackOff.
		_ = rt.ExitContainer("u1", "app", 1)
		n.Settle(2 * time.Second)
		cs = containerState(t, simStatus(t, n, "u1"), "app")
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || !strings.Contains(cs.State.Waiting.Message, "back-off 10s") {
			t.Fatalf("want CrashLoopBackOff 10s, have %+v", cs.State)
		}
		if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
			t.Fatalf("last state: %+v", cs.LastTerminationState)
		}
		n.Settle(6 * time.Second) // 8 s after the exit: still waiting
		if cs = containerState(t, simStatus(t, n, "u1"), "app"); cs.RestartCount != 1 {
			t.Fatalf("restarted before the back-off ended: %d", cs.RestartCount)
		}
		n.Settle(4 * time.Second) // 12 s: restarted
		if cs = containerState(t, simStatus(t, n, "u1"), "app"); cs.RestartCount != 2 || cs.State.Running == nil {
			t.Fatalf("not restarted after the back-off: %+v", cs)
		}
		// The next wait doubles.
		_ = rt.ExitContainer("u1", "app", 1)
		n.Settle(2 * time.Second)
		cs = containerState(t, simStatus(t, n, "u1"), "app")
		if cs.State.Waiting == nil || !strings.Contains(cs.State.Waiting.Message, "back-off 20s") {
			t.Fatalf("want back-off 20s, have %+v", cs.State)
		}
		n.Settle(15 * time.Second)
		if cs = containerState(t, simStatus(t, n, "u1"), "app"); cs.RestartCount != 2 {
			t.Fatalf("restarted after 17s of a 20s back-off")
		}
		n.Settle(5 * time.Second)
		if cs = containerState(t, simStatus(t, n, "u1"), "app"); cs.RestartCount != 3 {
			t.Fatalf("not restarted after 22s: %+v", cs)
		}
	})
}

func TestInitContainersRunInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "busybox"}, {Name: "init2", Image: "busybox"}}
		n.AddPod(p)
		n.Settle(2 * time.Second)

		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodPending || condition(s, v1.PodInitialized) != v1.ConditionFalse {
			t.Fatalf("while init1 runs: %s %+v", s.Phase, s.Conditions)
		}
		if w := containerState(t, s, "init2").State.Waiting; w == nil || w.Reason != "PodInitializing" || containerState(t, s, "app").State.Waiting.Reason != "PodInitializing" {
			t.Fatalf("init2/app started early: %+v", s)
		}
		_ = rt.ExitContainer("u1", "init1", 0)
		n.Settle(2 * time.Second)
		s = simStatus(t, n, "u1")
		if containerState(t, s, "init2").State.Running == nil || containerState(t, s, "app").State.Running != nil {
			t.Fatalf("after init1: %+v", s)
		}
		_ = rt.ExitContainer("u1", "init2", 0)
		n.Settle(2 * time.Second)
		s = simStatus(t, n, "u1")
		if s.Phase != v1.PodRunning || containerState(t, s, "app").State.Running == nil || condition(s, v1.PodInitialized) != v1.ConditionTrue {
			t.Fatalf("after init: %s %+v", s.Phase, s)
		}
	})
}

func TestFailingInitContainerBlocksApp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		n.AddPod(p)
		n.Settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "init", 1)
		n.Settle(3 * time.Second)
		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodFailed {
			t.Fatalf("phase = %s, want Failed", s.Phase)
		}
		if app := containerState(t, s, "app"); app.State.Running != nil || app.ContainerID != "" {
			t.Fatalf("app ran despite the failed init container: %+v", app)
		}
	})
}

func TestSidecarRunsAlongside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		always := v1.ContainerRestartPolicyAlways
		p := pod("u1", v1.RestartPolicyNever, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "sidecar", Image: "busybox", RestartPolicy: &always}}
		n.AddPod(p)
		n.Settle(4 * time.Second)
		s := simStatus(t, n, "u1")
		if containerState(t, s, "sidecar").State.Running == nil || containerState(t, s, "app").State.Running == nil || s.Phase != v1.PodRunning {
			t.Fatalf("sidecar and app should both run: %+v", s)
		}
		// The app finishing ends the pod; the sidecar is stopped with it.
		_ = rt.ExitContainer("u1", "app", 0)
		n.Settle(4 * time.Second)
		s = simStatus(t, n, "u1")
		if s.Phase != v1.PodSucceeded {
			t.Fatalf("phase = %s, want Succeeded", s.Phase)
		}
		if st, _ := rt.GetPodStatus(context.Background(), "u1", "", ""); st.FindContainer("sidecar").State == nodekit.StateRunning {
			t.Fatal("sidecar still running after the pod completed")
		}
	})
}

func TestAdmissionRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deny := nodekit.AdmitFunc(func(_ context.Context, r nodekit.AdmitRequest) nodekit.Decision {
			if r.Pod.Labels["team"] == "" {
				return nodekit.Decision{Reason: "MissingTeam", Message: "pods need a team label"}
			}
			return nodekit.Admitted
		})
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Admitters: []nodekit.Admitter{deny}})
		rt := n.Runtime()
		n.AddPod(pod("u1", v1.RestartPolicyAlways, "app"))
		ok := pod("u2", v1.RestartPolicyAlways, "app")
		ok.Labels = map[string]string{"team": "a"}
		n.AddPod(ok)
		n.Settle(3 * time.Second)
		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodFailed || s.Reason != "MissingTeam" || !strings.Contains(s.Message, "pods need a team label") {
			t.Fatalf("rejected pod status: %+v", s)
		}
		for _, c := range rt.Calls() {
			if strings.Contains(c, "pod-u1") {
				t.Fatalf("runtime touched a rejected pod: %s", c)
			}
		}
		if simStatus(t, n, "u2").Phase != v1.PodRunning {
			t.Fatal("admitted pod not running")
		}
	})
}

func TestImageNeverPull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		n.Runtime().FailImage("missing:1", nodekit.ErrImageNeverPull)
		p := pod("u1", v1.RestartPolicyAlways)
		p.Spec.Containers = []v1.Container{{Name: "app", Image: "missing:1"}}
		n.AddPod(p)
		n.Settle(3 * time.Second)
		s := simStatus(t, n, "u1")
		if w := containerState(t, s, "app").State.Waiting; w == nil || w.Reason != "ErrImageNeverPull" || s.Phase != v1.PodPending {
			t.Fatalf("status: %s %+v", s.Phase, w)
		}
	})
}

func TestUnhealthyRuntimePausesSyncing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		n.Settle(2 * time.Second)
		rt.SetUnavailable(errors.New("runtime down"))
		n.Settle(time.Second) // the loop notices at its next iteration
		n.AddPod(pod("u1", v1.RestartPolicyAlways, "app"))
		n.Settle(10 * time.Second)
		if err := n.Healthy(); err == nil {
			t.Fatal("loop reports healthy while the runtime is down")
		}
		if len(rt.Calls()) != 0 {
			t.Fatalf("synced while unhealthy: %v", rt.Calls())
		}
		rt.SetUnavailable(nil)
		n.Settle(10 * time.Second)
		if simStatus(t, n, "u1").Phase != v1.PodRunning {
			t.Fatal("pod not running after the runtime recovered")
		}
	})
}

func TestActiveDeadlineExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyAlways, "app")
		deadline := int64(30)
		p.Spec.ActiveDeadlineSeconds = &deadline
		n.AddPod(p)
		n.Settle(20 * time.Second)
		if s := simStatus(t, n, "u1"); s.Phase != v1.PodRunning {
			t.Fatalf("phase %s before the deadline", s.Phase)
		}
		n.Settle(12 * time.Second)
		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodFailed || s.Reason != "DeadlineExceeded" {
			t.Fatalf("after the deadline: %s %q", s.Phase, s.Reason)
		}
		if pods, _ := rt.ListPods(context.Background(), false); len(pods) != 0 {
			t.Fatal("containers still running after DeadlineExceeded")
		}
	})
}

func TestReadinessGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/ready"}}
		n.AddPod(p)
		n.Settle(3 * time.Second)
		if condition(simStatus(t, n, "u1"), v1.PodReady) != v1.ConditionFalse {
			t.Fatal("Ready before the readiness gate is true")
		}
		// A controller sets the gate's condition on the API object.
		gated := p.DeepCopy()
		gated.Status.Conditions = []v1.PodCondition{{Type: "example.com/ready", Status: v1.ConditionTrue}}
		n.ReconcilePod(gated)
		n.Settle(2 * time.Second)
		s := simStatus(t, n, "u1")
		if condition(s, v1.PodReady) != v1.ConditionTrue || condition(s, "example.com/ready") != v1.ConditionTrue {
			t.Fatalf("conditions after the gate: %+v", s.Conditions)
		}
	})
}

func TestCompletedInitContainerIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyAlways, "app")
		p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "busybox"}}
		n.AddPod(p)
		n.Settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "init", 0)
		n.Settle(3 * time.Second)
		if c := containerState(t, simStatus(t, n, "u1"), "init"); !c.Ready {
			t.Fatalf("completed init container not ready: %+v", c)
		}
	})
}
