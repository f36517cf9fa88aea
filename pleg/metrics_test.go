package pleg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

type relistMetrics struct {
	durations, intervals []time.Duration
	lastSeen             time.Time
	pods                 int
	containers           map[string]int
}

func (m *relistMetrics) ObserveRelist(d, i time.Duration) {
	m.durations, m.intervals = append(m.durations, d), append(m.intervals, i)
}
func (m *relistMetrics) SetPLEGLastSeen(t time.Time) { m.lastSeen = t }
func (m *relistMetrics) SetRunning(pods int, containers map[string]int) {
	m.pods, m.containers = pods, containers
}

var _ pleg.Metrics = (*relistMetrics)(nil)

// failingList fails ListPods while fail is set.
type failingList struct {
	*agenttest.FakeRuntime
	fail bool
}

func (f *failingList) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	if f.fail {
		return nil, errors.New("runtime down")
	}
	return f.FakeRuntime.ListPods(ctx, all)
}

func TestRelistMetrics(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &failingList{FakeRuntime: agenttest.NewFakeRuntime(clk)}
	m := &relistMetrics{}
	g := pleg.NewGeneric(rt, pleg.NewCache(), pleg.Options{Clock: clk, Metrics: m})

	startAll(t, rt, testPod("u1", "a", "b"))
	startAll(t, rt, testPod("u2", "c"))
	if err := rt.ExitContainer("u2", "c", 1); err != nil {
		t.Fatal(err)
	}
	g.Relist(t.Context())
	if len(m.durations) != 1 || m.intervals[0] != 0 {
		t.Fatalf("first relist: durations %v intervals %v, want one with no interval", m.durations, m.intervals)
	}
	if m.pods != 2 || m.containers["running"] != 2 || m.containers["exited"] != 1 {
		t.Fatalf("running pods %d, containers %v; want 2 pods, 2 running and 1 exited", m.pods, m.containers)
	}
	if !m.lastSeen.Equal(time.Unix(1000, 0)) {
		t.Fatalf("last seen %v", m.lastSeen)
	}

	// A failed listing is timed, measured from the last good relist, and
	// leaves last-seen where it was.
	clk.Step(2 * time.Second)
	rt.fail = true
	g.Relist(t.Context())
	clk.Step(3 * time.Second)
	rt.fail = false
	g.Relist(t.Context())
	if len(m.durations) != 3 || m.intervals[1] != 2*time.Second || m.intervals[2] != 5*time.Second {
		t.Fatalf("intervals %v, want [0 2s 5s]", m.intervals)
	}
	if !m.lastSeen.Equal(time.Unix(1005, 0)) {
		t.Fatalf("last seen %v, want the third relist's start", m.lastSeen)
	}
}
