package syncloop_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agenttest"
)

// TestKillPodEvicts: a node-level policy kills a pod through the pod
// store (as eviction does, built before the loop), on a running SimNode.
func TestKillPodEvicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		pods := n.PodStore()
		victim := pod("u1", v1.RestartPolicyAlways, "app")
		other := pod("u2", v1.RestartPolicyAlways, "app")
		n.AddPod(victim, other)
		n.Settle(3 * time.Second)
		if pods.ShouldPodRuntimeBeRemoved("u1") || pods.ShouldPodContentBeRemoved("u1") {
			t.Fatal("a running pod's runtime or content may be removed")
		}

		errc := make(chan error, 1)
		go func() {
			errc <- pods.KillPod(context.Background(), victim, 0, func(s *v1.PodStatus) {
				s.Phase, s.Reason, s.Message = v1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
				s.Conditions = append(s.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet})
			})
		}()
		n.Settle(3 * time.Second)
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("KillPod: %v", err)
			}
		default:
			t.Fatal("KillPod still blocks after the pod terminated")
		}

		s := simStatus(t, n, "u1")
		if s.Phase != v1.PodFailed || s.Reason != "Evicted" || condition(s, v1.DisruptionTarget) != v1.ConditionTrue {
			t.Fatalf("evicted status: phase=%s reason=%q conditions=%+v", s.Phase, s.Reason, s.Conditions)
		}
		if cs := containerState(t, s, "app"); cs.State.Running != nil {
			t.Fatalf("the evicted pod's container still runs: %+v", cs.State)
		}
		if got := simStatus(t, n, "u2").Phase; got != v1.PodRunning {
			t.Fatalf("the other pod is %s, want Running", got)
		}
		for _, p := range pods.ActivePods() {
			if p.UID == "u1" {
				t.Fatal("an evicted pod is still active")
			}
		}
		if !pods.PodCleanedUp(context.Background(), victim) {
			t.Fatal("the evicted pod is not cleaned up")
		}
		// Evicted: its content may go although its API object stays; the
		// other pod's may not.
		if !pods.ShouldPodContentBeRemoved("u1") || !pods.ShouldPodRuntimeBeRemoved("u1") {
			t.Fatal("an evicted, terminated pod's content is kept")
		}
		if pods.ShouldPodContentBeRemoved("u2") {
			t.Fatal("a running pod's content may be removed")
		}
		// A later sync keeps the verdict.
		n.UpdatePod(victim)
		n.Settle(2 * time.Second)
		if s := simStatus(t, n, "u1"); s.Phase != v1.PodFailed || s.Reason != "Evicted" {
			t.Fatalf("after an update: phase=%s reason=%q", s.Phase, s.Reason)
		}
		// Killing it again returns at once.
		if err := pods.KillPod(context.Background(), victim, 0, nil); err != nil {
			t.Fatalf("second KillPod: %v", err)
		}
	})
}

func TestTerminatedPodRuntimeRemovable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{})
		rt, pods := n.Runtime(), n.PodStore()
		p := pod("u1", v1.RestartPolicyNever, "app")
		n.AddPod(p)
		n.Settle(2 * time.Second)
		_ = rt.ExitContainer("u1", "app", 0)
		n.Settle(3 * time.Second)
		// Succeeded but not deleted: containers may go, logs stay.
		if !pods.ShouldPodRuntimeBeRemoved("u1") {
			t.Fatal("a terminated pod's runtime is kept")
		}
		if pods.ShouldPodContentBeRemoved("u1") {
			t.Fatal("the content of a terminated, not deleted pod may be removed")
		}
		// Unknown pods are gone once every source has been seen and handled.
		if !pods.ShouldPodContentBeRemoved("nobody") {
			t.Fatal("an unknown pod's content is kept")
		}
	})
}
