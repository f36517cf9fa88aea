package syncloop_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/syncloop"
)

// TestPodStoreAnswersForItsLoop: parts built before the loop hold the
// store; before the loop exists it reports an empty node, after New it
// answers as the loop does, and a second loop cannot take the store.
func TestPodStoreAnswersForItsLoop(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	store := syncloop.NewPodStore()
	p := pod("u1", v1.RestartPolicyAlways, "app")
	if got := store.ActivePods(); len(got) != 0 {
		t.Errorf("ActivePods before a loop = %d pods, want none", len(got))
	}
	if got := store.NotTerminatedPods(); len(got) != 0 {
		t.Errorf("NotTerminatedPods before a loop = %d pods, want none", len(got))
	}
	if store.SourcesReady() {
		t.Error("SourcesReady before a loop = true")
	}
	if !store.PodCleanedUp(ctx, p) {
		t.Error("PodCleanedUp before a loop = false, want true (no worker has it)")
	}
	if err := store.KillPod(ctx, p, 0, nil); err == nil {
		t.Error("KillPod before a loop succeeded")
	}
	if store.ShouldPodContentBeRemoved(p.UID) || store.ShouldPodRuntimeBeRemoved(p.UID) {
		t.Error("a pod's content or runtime may be removed before a loop runs")
	}

	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	relist := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	updates := make(chan nodekit.PodUpdate, 10)
	cfg := syncloop.Config{
		Runtime: rt, Pods: store, Cache: cache, Status: newFakeStatus(), Updates: updates,
		RootDir: t.TempDir(), Clock: clk, InlineWorkers: true,
	}
	loop, err := syncloop.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syncloop.New(cfg); err == nil {
		t.Error("a second loop on the same store: no error")
	}
	updates <- nodekit.PodUpdate{Op: nodekit.ADD, Pods: []*v1.Pod{p}, Source: nodekit.SourceAPI}
	for range 3 {
		relist.Relist(ctx)
		if err := loop.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
	}
	if got := store.ActivePods(); len(got) != 1 || got[0].UID != p.UID {
		t.Errorf("ActivePods = %v, want the pod", got)
	}
	if got := store.NotTerminatedPods(); len(got) != 1 {
		t.Errorf("NotTerminatedPods = %v, want the pod", got)
	}
	if !store.SourcesReady() {
		t.Error("SourcesReady after the first update = false")
	}
	if store.PodCleanedUp(ctx, p) {
		t.Error("PodCleanedUp of a running pod = true")
	}
	kctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := store.KillPod(kctx, p, 0, nil); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	if got := store.ActivePods(); len(got) != 0 {
		t.Errorf("ActivePods after KillPod = %v, want none", got)
	}
	// Evicted and terminated: the loop lets its content and runtime go.
	if !store.ShouldPodContentBeRemoved(p.UID) || !store.ShouldPodRuntimeBeRemoved(p.UID) {
		t.Error("an evicted, terminated pod's content and runtime are kept")
	}
}

// phaseStatus is a StatusManager with the PhaseGetter capability; while
// *strict is set, a GetPodStatus call fails the test.
type phaseStatus struct {
	*fakeStatus
	t      *testing.T
	strict *bool
}

func (s phaseStatus) GetPodPhase(uid types.UID) (v1.PodPhase, bool) {
	st, ok := s.fakeStatus.GetPodStatus(uid)
	return st.Phase, ok
}

func (s phaseStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	if !*s.strict {
		return s.fakeStatus.GetPodStatus(uid)
	}
	s.t.Errorf("GetPodStatus(%s) called; the loop should ask GetPodPhase", uid)
	return s.fakeStatus.GetPodStatus(uid)
}

// TestActivePodsLeaveOutTerminalStatuses: a pod whose newest status is
// terminal is neither active nor not-terminated while its worker still
// syncs, asked through GetPodPhase when the status manager has it, else
// through GetPodStatus.
func TestActivePodsLeaveOutTerminalStatuses(t *testing.T) {
	for _, withPhase := range []bool{false, true} {
		t.Run(map[bool]string{false: "GetPodStatus", true: "GetPodPhase"}[withPhase], func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			store := syncloop.NewPodStore()
			clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			rt := agenttest.NewFakeRuntime(clk)
			cache := pleg.NewCache()
			fs := newFakeStatus()
			var status syncloop.StatusManager = fs
			strict := false
			if withPhase {
				status = phaseStatus{fs, t, &strict}
			}
			updates := make(chan nodekit.PodUpdate, 10)
			loop, err := syncloop.New(syncloop.Config{Runtime: rt, Pods: store, Cache: cache, Status: status,
				Updates: updates, RootDir: t.TempDir(), Clock: clk, InlineWorkers: true})
			if err != nil {
				t.Fatal(err)
			}
			a, b := pod("a", v1.RestartPolicyAlways, "app"), pod("b", v1.RestartPolicyAlways, "app")
			updates <- nodekit.PodUpdate{Op: nodekit.ADD, Pods: []*v1.Pod{a, b}, Source: nodekit.SourceAPI}
			relist := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
			for range 3 {
				relist.Relist(ctx)
				if err := loop.Drain(ctx); err != nil {
					t.Fatal(err)
				}
				clk.Step(time.Second)
			}
			if got := len(store.ActivePods()); got != 2 {
				t.Fatalf("ActivePods = %d pods, want 2", got)
			}
			fs.mu.Lock()
			st := fs.statuses[b.UID]
			st.Phase = v1.PodSucceeded
			fs.statuses[b.UID] = st
			fs.mu.Unlock()
			strict = true
			for name, got := range map[string][]*v1.Pod{"ActivePods": store.ActivePods(), "NotTerminatedPods": store.NotTerminatedPods()} {
				if len(got) != 1 || got[0].UID != a.UID {
					t.Errorf("%s = %v, want only a (b's status is Succeeded)", name, got)
				}
			}
		})
	}
}
