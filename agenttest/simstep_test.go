package agenttest_test

import (
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
)

// With the evented PLEG a container's exit reaches the loop through the
// fake runtime's event stream, long before the next relist would see it.
func TestSimNodeEventedPLEG(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := agenttest.StartSimNode(t, agenttest.SimOptions{EventedPLEG: true, RelistPeriod: time.Hour})
		p := simPod("web", v1.RestartPolicyAlways)
		n.AddPod(p)
		n.Settle(2 * time.Second)
		if err := n.Runtime().ExitContainer(p.UID, "app", 1); err != nil {
			t.Fatal(err)
		}
		n.Settle(2 * time.Second) // far less than the hour-long relist period
		if cs := mustContainer(t, n, p.UID, "app"); cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 {
			t.Fatalf("app %+v after an exit event, want terminated with exit code 1", cs.State)
		}
	})
}

// A stepped node does nothing until stepped, refuses Run, and reaches
// Running on its fake clock with no goroutine of its own.
func TestSteppedSimNode(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	n := agenttest.StartSimNode(t, agenttest.SimOptions{Clock: clk})
	if err := n.Run(t.Context()); err == nil {
		t.Fatal("a stepped node ran")
	}
	p := simPod("web", v1.RestartPolicyAlways)
	n.AddPod(p)
	if _, ok := n.Status(p.UID); ok {
		t.Fatal("a status before any step")
	}
	if err := n.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := phase(n, p.UID); got != v1.PodPending {
		t.Fatalf("phase %s after one step, want Pending", got)
	}
	if err := n.Advance(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if got := phase(n, p.UID); got != v1.PodRunning || len(n.Published(p.UID)) == 0 {
		t.Fatalf("phase %s (%d published) a second later, want Running and published", got, len(n.Published(p.UID)))
	}
	if !n.Now().Equal(clk.Now()) {
		t.Fatalf("Now %s, the clock says %s", n.Now(), clk.Now())
	}
}
