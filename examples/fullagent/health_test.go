package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/statusmgr"
)

// The node's Ready condition follows the runtime and the PLEG: a relist
// that has not completed for 3 minutes, or a runtime that is down, makes
// it False with a message saying why, and it comes back.
func TestReadyConditionFollowsPLEGAndRuntime(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	g := pleg.NewGeneric(rt, pleg.NewCache(), pleg.Options{Clock: clk})
	down := error(nil)
	cond := readyCondition(statusmgr.ReadinessFunc(func(context.Context) error { return down }), g)

	if st := cond.NodeCondition(ctx); st.Status != v1.ConditionFalse || !strings.Contains(st.Message, "PLEG is not healthy") {
		t.Fatalf("before the first relist: %+v", st)
	}
	g.Relist(ctx)
	if st := cond.NodeCondition(ctx); st.Status != v1.ConditionTrue {
		t.Fatalf("after a relist: %+v", st)
	}
	// The runtime stops answering: relists fail, time passes.
	rt.SetUnavailable(errors.New("socket gone"))
	for i := 0; i < 181; i++ {
		clk.Step(time.Second)
		g.Relist(ctx)
	}
	st := cond.NodeCondition(ctx)
	if st.Status != v1.ConditionFalse || st.Reason != "KubeletNotReady" || !strings.Contains(st.Message, "pleg was last seen active 3m1s ago") {
		t.Fatalf("stalled relist: %+v", st)
	}
	rt.SetUnavailable(nil)
	g.Relist(ctx)
	if st := cond.NodeCondition(ctx); st.Status != v1.ConditionTrue {
		t.Fatalf("after recovery: %+v", st)
	}
	down = errors.New("RuntimeReady is false")
	if st := cond.NodeCondition(ctx); st.Status != v1.ConditionFalse || !strings.Contains(st.Message, "container runtime is not ready") {
		t.Fatalf("runtime down: %+v", st)
	}
}
