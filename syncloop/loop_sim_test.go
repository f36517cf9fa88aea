package syncloop_test

// The loop's behaviour on a running SimNode (agenttest): the real loop,
// PLEG and status manager over the fake runtime, inside a synctest bubble
// (Settle lets fake time pass and everything react). A test that needs a
// runtime that blocks or counts wraps the fake (SimOptions.Runtime).

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// TestDeleteTerminatesOnce: repeated graceful deletions kill the pod
// once, its final status is published once and the pod is deleted; a
// terminated pod never syncs again.
func TestDeleteTerminatesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyAlways, "app")
		n.AddPod(p)
		n.Settle(2 * time.Second)

		for range 5 {
			n.DeletePod(p)
		}
		n.Settle(3 * time.Second)
		if kills := countCalls(rt, "KillPod"); kills != 1 {
			t.Fatalf("KillPod called %d times, want 1: %v", kills, rt.Calls())
		}
		if !n.Deleted("u1") {
			t.Fatal("the terminated pod was not deleted (its resources never reclaimed)")
		}
		terminal := 0
		for _, st := range n.Published("u1") {
			if st.Phase == v1.PodFailed || st.Phase == v1.PodSucceeded {
				terminal++
			}
		}
		if terminal == 0 {
			t.Fatal("no terminal status was published for the deleted pod")
		}
		// A terminating pod never syncs (starts containers) again.
		syncs := countCalls(rt, "SyncPod")
		n.Settle(70 * time.Second)
		if after := countCalls(rt, "SyncPod"); after != syncs {
			t.Fatalf("SyncPod ran %d more times after termination", after-syncs)
		}
	})
}

// countCalls counts the runtime calls starting with prefix.
func countCalls(rt *agenttest.FakeRuntime, prefix string) int {
	n := 0
	for _, c := range rt.Calls() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// TestOrphansKilledOnlyAfterSourcesReady: a pod the runtime runs and no
// source names is killed only once every source has been seen and the
// loop has handled an update after that.
func TestOrphansKilledOnlyAfterSourcesReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		ready := false
		n := agenttest.StartSimNode(t, agenttest.SimOptions{SourcesReady: func() bool { mu.Lock(); defer mu.Unlock(); return ready }})
		rt := n.Runtime()
		orphan := pod("orphan", v1.RestartPolicyAlways, "app")
		rt.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: orphan, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
		n.AddPod() // one source's first, empty list: the others are not seen yet
		n.Settle(5 * time.Second)
		if pods, _ := rt.ListPods(t.Context(), false); len(pods) != 1 {
			t.Fatal("orphan killed before all sources were seen")
		}
		mu.Lock()
		ready = true
		mu.Unlock()
		n.Settle(5 * time.Second)
		if pods, _ := rt.ListPods(t.Context(), false); len(pods) != 1 {
			t.Fatal("orphan killed before the loop handled the last source's first update")
		}
		if n.PodStore().ShouldPodContentBeRemoved("nobody") {
			t.Fatal("content removable before the sources' pods were handled")
		}
		n.AddPod() // what podconfig sends for a source's first, empty list
		n.Settle(5 * time.Second)
		if pods, _ := rt.ListPods(t.Context(), false); len(pods) != 0 {
			t.Fatalf("orphan still running: %+v", pods[0])
		}
	})
}

// TestStaticPodWaitsForItsPredecessor: a static pod's new version starts
// only once its old version (same full name) has finished terminating.
func TestStaticPodWaitsForItsPredecessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rt *blockingKill
		n := agenttest.StartSimNode(t, agenttest.SimOptions{Runtime: func(f *agenttest.FakeRuntime) nodekit.Runtime {
			rt = &blockingKill{FakeRuntime: f, gate: make(chan struct{})}
			return rt
		}})
		static := func(uid string) *v1.Pod {
			p := pod(uid, v1.RestartPolicyAlways, "app")
			p.Name = "web-node"
			return p
		}
		n.AddStaticPod(static("old"))
		n.Settle(2 * time.Second)
		// The manifest changed: the old version is removed and the new one
		// added at once. The old one's termination is held up.
		n.RemoveStaticPod(static("old"))
		n.AddStaticPod(static("new"))
		n.Settle(5 * time.Second)
		if _, ok := n.Status("new"); ok {
			t.Fatal("the new version started while the old one was still terminating")
		}
		close(rt.gate)
		n.Settle(3 * time.Second)
		if s, ok := n.Status("new"); !ok || s.Phase != v1.PodRunning {
			t.Fatalf("new version not running after the old one finished: %+v", s)
		}
	})
}

// blockingKill holds KillPod until its gate is closed.
type blockingKill struct {
	*agenttest.FakeRuntime
	gate chan struct{}
}

func (b *blockingKill) KillPod(ctx context.Context, req nodekit.KillPodRequest) error {
	<-b.gate
	return b.FakeRuntime.KillPod(ctx, req)
}

// A new image is a new container: its crash-loop back-off starts afresh,
// as upstream keys the back-off by the container's hash.
func TestCrashLoopBackOffResetOnImageUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hash := func(c *v1.Container) uint64 { return uint64(len(c.Image)) }
		n := agenttest.StartSimNode(t, agenttest.SimOptions{ContainerHash: hash})
		rt := n.Runtime()
		p := pod("u1", v1.RestartPolicyAlways, "app")
		n.AddPod(p)
		n.Settle(2 * time.Second)
		for range 3 { // exits at once, then after 10 s and 20 s back-offs
			_ = rt.ExitContainer("u1", "app", 1)
			n.Settle(25 * time.Second)
		}
		_ = rt.ExitContainer("u1", "app", 1)
		n.Settle(2 * time.Second)
		cs := containerState(t, simStatus(t, n, "u1"), "app")
		if cs.State.Waiting == nil || !strings.Contains(cs.State.Waiting.Message, "back-off 40s") {
			t.Fatalf("want a 40s back-off before the update, have %+v", cs.State)
		}
		updated := p.DeepCopy()
		updated.Spec.Containers[0].Image = "busybox:newer"
		n.UpdatePod(updated)
		n.Settle(3 * time.Second)
		cs = containerState(t, simStatus(t, n, "u1"), "app")
		if cs.State.Running == nil || cs.Image != "busybox:newer" {
			t.Fatalf("the updated container did not start at once: %+v", cs)
		}
	})
}
