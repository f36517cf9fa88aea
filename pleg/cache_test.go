package pleg

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit"
)

// waitingOn returns once n GetNewerThan calls wait on the pod.
func waitingOn(t *testing.T, c *Cache, uid types.UID, n int) []*waiter {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		ws := append([]*waiter(nil), c.waiting[uid]...)
		c.mu.Unlock()
		if len(ws) == n {
			return ws
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d calls never waited on %s", n, uid)
	return nil
}

func woken(w *waiter) bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// TestCacheWakesOnlyTheWaitersItSatisfies: a Set wakes its own pod's
// waiters, not another pod's; a relist time wakes only the waiters whose
// min it passes; a call that gives up leaves nothing behind.
func TestCacheWakesOnlyTheWaitersItSatisfies(t *testing.T) {
	c := NewCache()
	t0 := time.Unix(100, 0)
	got := make(chan *nodekit.PodStatus, 2)
	wait := func(ctx context.Context, uid types.UID, min time.Time) {
		go func() {
			st, _ := c.GetNewerThan(ctx, uid, min)
			got <- st
		}()
	}
	wait(t.Context(), "u1", t0)
	w1 := waitingOn(t, c, "u1", 1)[0]

	c.Set("u2", &nodekit.PodStatus{ID: "u2"}, nil, t0.Add(time.Second))
	if woken(w1) {
		t.Fatal("a Set of u2 woke u1's waiter")
	}
	c.Set("u1", &nodekit.PodStatus{ID: "u1", Name: "old"}, nil, t0)
	if woken(w1) {
		t.Fatal("a status of u1 read at min woke its waiter (it waits for one read after min)")
	}
	c.UpdateTime(t0)
	if woken(w1) {
		t.Fatal("a relist started at min woke u1's waiter")
	}
	c.UpdateTime(t0.Add(time.Second))
	if st := <-got; st.Name != "old" {
		t.Fatalf("after a newer relist the waiter got %+v, want u1's entry", st)
	}

	ctx, cancel := context.WithCancel(t.Context())
	wait(ctx, "u3", t0.Add(time.Hour))
	waitingOn(t, c, "u3", 1)
	cancel()
	<-got
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) != 0 {
		t.Fatalf("waiters left after every call returned: %v", c.waiting)
	}
}
