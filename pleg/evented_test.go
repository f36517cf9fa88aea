package pleg_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

// countingRuntime counts relists.
type countingRuntime struct {
	*agenttest.FakeRuntime
	lists atomic.Int64
}

func (c *countingRuntime) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	c.lists.Add(1)
	return c.FakeRuntime.ListPods(ctx, all)
}

func startEvented(t *testing.T, fake *agenttest.FakeRuntime) (*countingRuntime, *pleg.Evented, *pleg.Cache) {
	rt := &countingRuntime{FakeRuntime: fake}
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clock.RealClock{}})
	e := pleg.NewEvented(g, fake)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = e.Run(ctx) }()
	synctest.Wait()
	return rt, e, cache
}

func TestEventedDeliversWithoutRelisting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		rt, e, cache := startEvented(t, fake)
		lists := rt.lists.Load()

		startAll(t, fake, testPod("u1", "a"))
		synctest.Wait()
		select {
		case ev := <-e.Events():
			if ev.Type != pleg.ContainerStarted || ev.PodID != "u1" {
				t.Fatalf("event %+v", ev)
			}
		default:
			t.Fatal("no event after a container started")
		}
		if st, _ := cache.Get("u1"); st.FindContainer("a") == nil {
			t.Fatal("cache not refreshed by the event")
		}
		_ = fake.ExitContainer("u1", "a", 1)
		synctest.Wait()
		if ev := <-e.Events(); ev.Type != pleg.ContainerDied {
			t.Fatalf("event %+v", ev)
		}
		if rt.lists.Load() != lists {
			t.Fatal("the event waited for a relist")
		}
		// Beside the events, the generic relist keeps its period.
		time.Sleep(10*pleg.DefaultRelistPeriod + time.Millisecond)
		synctest.Wait()
		if n := rt.lists.Load() - lists; n != 10 {
			t.Fatalf("%d relists in 10 relist periods, want 10", n)
		}
		if e.FellBack() || e.Healthy() != nil {
			t.Fatal("evented PLEG fell back or is unhealthy")
		}
	})
}

func TestEventedReopensABrokenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		rt, e, _ := startEvented(t, fake)
		lists := rt.lists.Load()
		fake.BreakEvents(errors.New("runtime restarted"))
		synctest.Wait()
		if rt.lists.Load() != lists+1 {
			t.Fatal("no catch-up relist after the stream broke")
		}
		startAll(t, fake, testPod("u2", "a"))
		synctest.Wait()
		if len(e.Events()) == 0 {
			t.Fatal("no events after the stream was reopened")
		}
		if e.FellBack() {
			t.Fatal("fell back after one failure")
		}
	})
}

func TestEventedFallsBackToRelisting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		fake.SetEventsError(errors.New("unimplemented"))
		rt, e, _ := startEvented(t, fake)
		if !e.FellBack() {
			t.Fatalf("still evented after %d stream failures", pleg.MaxStreamFailures)
		}
		lists := rt.lists.Load()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := rt.lists.Load() - lists; n < 9 {
			t.Fatalf("%d relists in 10s after falling back, want one a second", n)
		}
		startAll(t, fake, testPod("u3", "a"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if len(e.Events()) == 0 {
			t.Fatal("the relist fallback sent no events")
		}
	})
}

// TestEventedKeepsWorkersWaitingBriefly: a pod worker waits for a status
// newer than its last sync (Cache.GetNewerThan); a sync that changed
// nothing in the runtime produces no event, so only a relist can answer it.
// As upstream's v1.37 evented PLEG (a hint beside the generic PLEG), the
// relist keeps its one-second period, so the wait is at most that long
// (not the 300 s of a safety-net-only relist).
func TestEventedKeepsWorkersWaitingBriefly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeRuntime(clock.RealClock{})
		_, e, cache := startEvented(t, fake)
		startAll(t, fake, testPod("u4", "a"))
		synctest.Wait()
		<-e.Events()
		time.Sleep(100 * time.Millisecond) // the worker's sync, which changed nothing
		since := time.Now()
		if _, err := cache.GetNewerThan(t.Context(), "u4", since); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(since); waited > pleg.DefaultRelistPeriod {
			t.Fatalf("a worker waited %v for a status newer than its sync, want at most the relist period %v", waited, pleg.DefaultRelistPeriod)
		}
	})
}
