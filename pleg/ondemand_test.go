package pleg_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

// TestRequestRelist: a pod relisted on demand has its status in the cache
// and its events sent at once, long before the periodic relist (an hour
// here); the record it leaves is the one a relist makes, so the next
// periodic relist sends no event again.
func TestRequestRelist(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk, RelistPeriod: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
	waitFor := func(n int) []string {
		t.Helper()
		var got []string
		deadline := time.After(5 * time.Second)
		for len(got) < n {
			select {
			case ev := <-g.Events():
				got = append(got, string(ev.Type))
			case <-deadline:
				t.Fatalf("events %v, want %d", got, n)
			}
		}
		sort.Strings(got)
		return got
	}
	// The first relist ran (the cache has a time) before the pod starts.
	if _, err := cache.GetNewerThan(t.Context(), "none", time.Unix(999, 0)); err != nil {
		t.Fatal(err)
	}

	pod := testPod("u1", "a", "b")
	startAll(t, rt, pod)
	clk.Step(time.Second)
	g.RequestRelist(ctx, pod.UID, pod.Name, pod.Namespace)
	if got, want := waitFor(3), []string{"ContainerStarted", "ContainerStarted", "ContainerStarted"}; !equal(got, want) {
		t.Fatalf("on demand: %v, want %v", got, want)
	}
	st, err := cache.Get(pod.UID)
	if err != nil || st == nil || len(st.Containers) != 2 {
		t.Fatalf("cache after the on-demand relist: %+v, %v", st, err)
	}

	clk.Step(time.Second)
	g.Relist(ctx)
	if got := drain(g); len(got) != 0 {
		t.Fatalf("the periodic relist after it sent %v again", got)
	}

	if err := rt.ExitContainer("u1", "a", 1); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	g.RequestRelist(ctx, pod.UID, pod.Name, pod.Namespace)
	if got := waitFor(1); !equal(got, []string{"ContainerDied"}) {
		t.Fatalf("after an exit: %v, want ContainerDied", got)
	}
}
