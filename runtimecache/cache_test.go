package runtimecache_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/runtimecache"
)

// countingLister returns pods and counts its calls, each of them a full
// listing (the cache never asks for less).
type countingLister struct {
	pods  []*nodekit.Pod
	err   error
	calls int
	alls  []bool
}

func (l *countingLister) ListPods(_ context.Context, all bool) ([]*nodekit.Pod, error) {
	l.calls++
	l.alls = append(l.alls, all)
	return l.pods, l.err
}

func ctr(id string, state nodekit.State, created int64) *nodekit.Container {
	return &nodekit.Container{ID: nodekit.ContainerID{Type: "fake", ID: id}, Name: id, State: state, CreatedAt: time.Unix(created, 0)}
}

// listing is two pods: "run" with an exited old sandbox, a ready new one
// and a running and an exited container; "done" with only exited ones.
func listing() []*nodekit.Pod {
	return []*nodekit.Pod{
		{ID: "run", Name: "run", Namespace: "ns", CreatedAt: time.Unix(20, 0),
			Sandboxes:  []*nodekit.Container{ctr("sb-old", nodekit.StateExited, 10), ctr("sb-new", nodekit.StateRunning, 20)},
			Containers: []*nodekit.Container{ctr("c-run", nodekit.StateRunning, 21), ctr("c-exit", nodekit.StateExited, 11)}},
		{ID: "done", Name: "done", Namespace: "ns", CreatedAt: time.Unix(30, 0),
			Sandboxes:  []*nodekit.Container{ctr("sb-done", nodekit.StateExited, 30)},
			Containers: []*nodekit.Container{ctr("c-done", nodekit.StateExited, 31)}},
	}
}

func ids(cs []*nodekit.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID.ID)
	}
	return out
}

func TestServesTheObservedListingWhileFresh(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	rt := &countingLister{}
	c := runtimecache.New(runtimecache.Config{Runtime: rt, Clock: clk})
	c.Observe(listing(), clk.Now())
	clk.SetTime(clk.Now().Add(runtimecache.DefaultMaxAge))

	all, err := c.ListPods(t.Context(), true)
	if err != nil || rt.calls != 0 {
		t.Fatalf("ListPods(all) = %v, runtime asked %d times; want the observed listing, no call", err, rt.calls)
	}
	if len(all) != 2 || !slices.Equal(ids(all[0].Containers), []string{"c-run", "c-exit"}) || !slices.Equal(ids(all[1].Sandboxes), []string{"sb-done"}) {
		t.Fatalf("ListPods(all) = %+v, want the observed two pods whole", all)
	}

	running, err := c.ListPods(t.Context(), false)
	if err != nil || rt.calls != 0 {
		t.Fatalf("ListPods(running) = %v, runtime asked %d times", err, rt.calls)
	}
	if len(running) != 1 || running[0].ID != types.UID("run") {
		t.Fatalf("running pods = %+v, want only %q (the other has nothing running)", running, "run")
	}
	r := running[0]
	if !slices.Equal(ids(r.Sandboxes), []string{"sb-new"}) || !slices.Equal(ids(r.Containers), []string{"c-run"}) || !r.CreatedAt.Equal(time.Unix(20, 0)) {
		t.Fatalf("running pod = sandboxes %v, containers %v, created %v; want sb-new, c-run, created with sb-new", ids(r.Sandboxes), ids(r.Containers), r.CreatedAt)
	}
}

func TestListsWhenTheListingIsOld(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	rt := &countingLister{pods: listing()[:1]}
	c := runtimecache.New(runtimecache.Config{Runtime: rt, Clock: clk, MaxAge: time.Second})

	if _, err := c.ListPods(t.Context(), false); err != nil || rt.calls != 1 || !rt.alls[0] {
		t.Fatalf("empty cache: err %v, %d calls with all=%v; want one full listing", err, rt.calls, rt.alls)
	}
	if _, err := c.ListPods(t.Context(), true); err != nil || rt.calls != 1 {
		t.Fatalf("a reader right after: %d calls, want the kept listing", rt.calls)
	}

	c.Observe(listing(), clk.Now())
	clk.SetTime(clk.Now().Add(time.Second + time.Millisecond))
	got, err := c.ListPods(t.Context(), true)
	if err != nil || rt.calls != 2 || len(got) != 1 {
		t.Fatalf("listing past MaxAge: %d pods, %d calls, %v; want the runtime's one pod from a second call", len(got), rt.calls, err)
	}
}

// An empty node's listing (a nil slice) is a listing like any other: kept
// and served, not taken for no listing at all.
func TestAnEmptyListingIsKept(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	rt := &countingLister{}
	c := runtimecache.New(runtimecache.Config{Runtime: rt, Clock: clk})
	for range 2 {
		if got, err := c.ListPods(t.Context(), true); err != nil || len(got) != 0 {
			t.Fatalf("empty node: %d pods, %v", len(got), err)
		}
	}
	if rt.calls != 1 {
		t.Fatalf("two readers of an empty node: %d runtime listings, want 1", rt.calls)
	}
}

func TestRuntimeErrorIsReturnedAndNothingKept(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	boom := errors.New("runtime down")
	rt := &countingLister{err: boom}
	c := runtimecache.New(runtimecache.Config{Runtime: rt, Clock: clk})
	if _, err := c.ListPods(t.Context(), true); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the runtime's", err)
	}
	rt.err, rt.pods = nil, listing()
	if got, err := c.ListPods(t.Context(), true); err != nil || len(got) != 2 || rt.calls != 2 {
		t.Fatalf("after the error: %d pods, %d calls, %v; want a new listing", len(got), rt.calls, err)
	}
}

func TestAnOlderListingDoesNotReplaceANewerOne(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	c := runtimecache.New(runtimecache.Config{Runtime: &countingLister{}, Clock: clk})
	c.Observe(listing(), clk.Now())
	c.Observe(listing()[:1], clk.Now().Add(-time.Millisecond)) // a slow listing that began earlier
	if got, _ := c.ListPods(t.Context(), true); len(got) != 2 {
		t.Fatalf("served %d pods, want the newer listing's 2", len(got))
	}
}

// TestReadersGetCopies checks that a reader sorting or trimming what it
// got does not reach the kept listing, which the PLEG also holds.
func TestReadersGetCopies(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	c := runtimecache.New(runtimecache.Config{Runtime: &countingLister{}, Clock: clk})
	kept := listing()
	c.Observe(kept, clk.Now())
	got, _ := c.ListPods(t.Context(), true)
	slices.Reverse(got[0].Sandboxes)
	got[0].Containers = got[0].Containers[:0]
	got[1].Name = "changed"
	if !slices.Equal(ids(kept[0].Sandboxes), []string{"sb-old", "sb-new"}) || len(kept[0].Containers) != 2 || kept[1].Name != "done" {
		t.Fatalf("the kept listing changed with a reader's copy: %v, %d containers, name %q", ids(kept[0].Sandboxes), len(kept[0].Containers), kept[1].Name)
	}
}
