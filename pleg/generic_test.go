package pleg_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

func testPod(uid types.UID, names ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "ns", UID: uid}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "busybox"})
	}
	return p
}

func startAll(t *testing.T, rt nodekit.Runtime, pod *v1.Pod) {
	t.Helper()
	var idx []int
	for i := range pod.Spec.Containers {
		idx = append(idx, i)
	}
	if err := rt.SyncPod(t.Context(), nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: idx}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// drain returns the event types sent so far, sorted for comparison.
func drain(g *pleg.Generic) []string {
	var out []string
	for {
		select {
		case ev := <-g.Events():
			out = append(out, string(ev.Type))
		default:
			sort.Strings(out)
			return out
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRelistEvents(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	ctx := t.Context()

	g.Relist(ctx)
	if got := drain(g); len(got) != 0 {
		t.Fatalf("empty runtime produced events %v", got)
	}

	pod := testPod("u1", "a", "b")
	startAll(t, rt, pod)
	clk.Step(time.Second)
	g.Relist(ctx)
	// sandbox + two containers started
	if got, want := drain(g), []string{"ContainerStarted", "ContainerStarted", "ContainerStarted"}; !equal(got, want) {
		t.Fatalf("after start: %v, want %v", got, want)
	}
	st, err := cache.Get("u1")
	if err != nil || len(st.Containers) != 2 || st.TimeStamp != clk.Now() {
		t.Fatalf("cache = %+v, %v", st, err)
	}

	// Nothing changed: no events.
	clk.Step(time.Second)
	g.Relist(ctx)
	if got := drain(g); len(got) != 0 {
		t.Fatalf("idle relist produced %v", got)
	}

	if err := rt.ExitContainer("u1", "a", 3); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	g.Relist(ctx)
	if got, want := drain(g), []string{"ContainerDied"}; !equal(got, want) {
		t.Fatalf("after exit: %v, want %v", got, want)
	}
	st, _ = cache.Get("u1")
	if c := st.FindContainer("a"); c.State != nodekit.StateExited || c.ExitCode != 3 {
		t.Fatalf("cache has %+v for a", c)
	}

	// Removing the exited container: Removed only. Killing and removing the
	// pod: Died for what was running, Removed for everything.
	a := st.FindContainer("a").ID
	if err := rt.RemoveContainer(ctx, a); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	g.Relist(ctx)
	if got, want := drain(g), []string{"ContainerRemoved"}; !equal(got, want) {
		t.Fatalf("after remove: %v, want %v", got, want)
	}
}

func TestPodGoneWithoutBeingSeenExited(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	pod := testPod("u1", "a")
	startAll(t, rt, pod)
	g.Relist(t.Context())
	drain(g)

	st, _ := cache.Get("u1")
	_ = rt.KillPod(t.Context(), nodekit.KillPodRequest{Running: &nodekit.Pod{ID: "u1"}})
	_ = rt.RemoveContainer(t.Context(), st.Containers[0].ID)
	_ = rt.RemovePodSandbox(t.Context(), st.Sandboxes[0].ID)
	clk.Step(time.Second)
	g.Relist(t.Context())
	want := []string{"ContainerDied", "ContainerDied", "ContainerRemoved", "ContainerRemoved"}
	if got := drain(g); !equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if st, _ := cache.Get("u1"); len(st.Containers) != 0 {
		t.Fatalf("gone pod still cached: %+v", st)
	}
}

// flaky fails GetPodStatus while fail is set.
type flaky struct {
	*agenttest.FakeRuntime
	fail bool
}

func (f *flaky) GetPodStatus(ctx context.Context, uid types.UID, name, ns string) (*nodekit.PodStatus, error) {
	if f.fail {
		return nil, errors.New("inspect failed")
	}
	return f.FakeRuntime.GetPodStatus(ctx, uid, name, ns)
}

func TestFailedInspectionIsRetried(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &flaky{FakeRuntime: agenttest.NewFakeRuntime(clk), fail: true}
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	startAll(t, rt, testPod("u1", "a"))

	g.Relist(t.Context())
	if got := drain(g); len(got) != 0 {
		t.Fatalf("events sent for a pod that could not be inspected: %v", got)
	}
	if _, err := cache.Get("u1"); err == nil {
		t.Fatal("cache does not hold the inspection error")
	}
	rt.fail = false
	clk.Step(time.Second)
	g.Relist(t.Context())
	if got := drain(g); len(got) != 2 {
		t.Fatalf("retry after failure sent %v, want the two ContainerStarted events", got)
	}
	if st, err := cache.Get("u1"); err != nil || len(st.Containers) != 1 {
		t.Fatalf("cache after retry = %+v, %v", st, err)
	}
}

func TestHealthy(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	g := pleg.NewGeneric(rt, pleg.NewCache(), pleg.Options{Clock: clk})
	if g.Healthy() == nil {
		t.Fatal("healthy before the first relist")
	}
	g.Relist(t.Context())
	if err := g.Healthy(); err != nil {
		t.Fatal(err)
	}
	rt.SetUnavailable(errors.New("socket gone"))
	clk.Step(2 * time.Minute)
	g.Relist(t.Context())
	if err := g.Healthy(); err != nil {
		t.Fatalf("unhealthy after 2m: %v", err)
	}
	clk.Step(90 * time.Second)
	g.Relist(t.Context())
	if g.Healthy() == nil {
		t.Fatal("still healthy 3m30s after the last successful relist")
	}
	rt.SetUnavailable(nil)
	g.Relist(t.Context())
	if err := g.Healthy(); err != nil {
		t.Fatalf("not healthy after recovery: %v", err)
	}
}

func TestCacheGetNewerThan(t *testing.T) {
	c := pleg.NewCache()
	t0 := time.Unix(100, 0)
	c.Set("u1", &nodekit.PodStatus{ID: "u1", Name: "old"}, nil, t0)

	got := make(chan *nodekit.PodStatus, 1)
	go func() {
		st, _ := c.GetNewerThan(context.Background(), "u1", t0)
		got <- st
	}()
	select {
	case st := <-got:
		t.Fatalf("returned %q without a newer status", st.Name)
	case <-time.After(20 * time.Millisecond):
	}
	c.Set("u1", &nodekit.PodStatus{ID: "u1", Name: "new"}, nil, t0.Add(time.Second))
	if st := <-got; st.Name != "new" {
		t.Fatalf("got %q", st.Name)
	}

	// A global relist time newer than min also answers, with what is held.
	go func() {
		st, _ := c.GetNewerThan(context.Background(), "u2", t0)
		got <- st
	}()
	c.UpdateTime(t0.Add(2 * time.Second))
	if st := <-got; st.ID != "u2" || len(st.Containers) != 0 {
		t.Fatalf("unknown pod: %+v", st)
	}

	// An older write never replaces a newer one.
	c.Set("u1", &nodekit.PodStatus{ID: "u1", Name: "stale"}, nil, t0)
	if st, _ := c.Get("u1"); st.Name != "new" {
		t.Fatalf("stale write replaced the entry: %q", st.Name)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetNewerThan(ctx, "u1", t0.Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait returned %v", err)
	}
}

func TestFullChannelDropsInsteadOfBlocking(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	g := pleg.NewGeneric(rt, pleg.NewCache(), pleg.Options{Clock: clk})
	// 400 pods x (sandbox + 2 containers) = 1200 events > capacity 1000.
	for i := 0; i < 400; i++ {
		startAll(t, rt, testPod(types.UID("u"+string(rune('a'+i%26))+string(rune('a'+i/26))), "a", "b"))
	}
	done := make(chan struct{})
	go func() { g.Relist(t.Context()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Relist blocked on a full event channel")
	}
	if n := len(drain(g)); n != 1000 {
		t.Fatalf("%d events queued, want the channel's capacity 1000", n)
	}
}

// counting counts GetPodStatus calls per pod.
type counting struct {
	*agenttest.FakeRuntime
	calls map[types.UID]int
}

func (c *counting) GetPodStatus(ctx context.Context, uid types.UID, name, ns string) (*nodekit.PodStatus, error) {
	c.calls[uid]++
	return c.FakeRuntime.GetPodStatus(ctx, uid, name, ns)
}

func TestRelistInspectsOnlyChangedPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &counting{FakeRuntime: agenttest.NewFakeRuntime(clk), calls: map[types.UID]int{}}
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	startAll(t, rt, testPod("u1", "a"))
	g.Relist(t.Context())
	drain(g)
	startAll(t, rt, testPod("u2", "b"))
	clk.Step(time.Second)
	g.Relist(t.Context())
	if got := drain(g); len(got) != 2 {
		t.Fatalf("second relist sent %v, want u2's sandbox and container starts", got)
	}
	if rt.calls["u1"] != 1 || rt.calls["u2"] != 1 {
		t.Fatalf("GetPodStatus calls = %v, want one each: the unchanged u1 is not inspected again", rt.calls)
	}
	// The unchanged pod's cache entry is still fresh for its worker.
	clk.Step(time.Second)
	g.Relist(t.Context())
	if _, err := cache.GetNewerThan(t.Context(), "u1", clk.Now().Add(-time.Millisecond)); err != nil {
		t.Fatalf("u1's cache entry after a relist without changes: %v", err)
	}
	if rt.calls["u1"] != 1 {
		t.Fatalf("u1 inspected %d times, want 1", rt.calls["u1"])
	}
}

// TestOnListGetsEachListing checks the hook runtimecache feeds on: every
// successful relist hands over its listing and start time, a failed one
// nothing.
func TestOnListGetsEachListing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := agenttest.NewFakeRuntime(clk)
	var got [][]*nodekit.Pod
	var at []time.Time
	g := pleg.NewGeneric(rt, pleg.NewCache(), pleg.Options{Clock: clk, OnList: func(pods []*nodekit.Pod, t time.Time) {
		got, at = append(got, pods), append(at, t)
	}})
	startAll(t, rt, testPod("u1", "a"))
	g.Relist(t.Context())
	if len(got) != 1 || len(got[0]) != 1 || got[0][0].ID != "u1" || len(got[0][0].Containers) != 1 || !at[0].Equal(clk.Now()) {
		t.Fatalf("OnList after one relist: %d calls, listing %+v at %v; want pod u1 with its container at %v", len(got), got, at, clk.Now())
	}
	rt.SetUnavailable(errors.New("runtime down"))
	clk.Step(time.Second)
	g.Relist(t.Context())
	if len(got) != 1 {
		t.Fatalf("OnList called %d times; a failed listing must not be handed over", len(got))
	}
}
