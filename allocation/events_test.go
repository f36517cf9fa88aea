package allocation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/allocation"
)

// TestManagerResizeEvents: the events of a resize, as upstream kubelet
// records them — none on creation; ResizeDeferred once per generation
// while the resize waits; ResizeStarted when it is allocated, with the
// spec's resources and the generation as JSON; ResizeCompleted once the
// containers run at it; ResizeError once for a repeated failure;
// ResizeInfeasible for a resize the node never allocates.
func TestManagerResizeEvents(t *testing.T) {
	ctx := context.Background()
	events := record.NewFakeRecorder(20)
	rec := &recorder{usage: map[string]uint64{}}
	var pods []*v1.Pod
	m, err := allocation.New(allocation.Config{Fit: fitOn("cpu=2,memory=4Gi"), Pods: func() []*v1.Pod { return pods },
		Containers: rec, Recorder: events, Clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		select {
		case e := <-events.Events:
			return e
		default:
			return ""
		}
	}
	allocate := func(p *v1.Pod) *v1.Pod {
		t.Helper()
		got, err := m.Allocate(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	pod := podOf("p", ctr("c", reqs("cpu=500m", "cpu=500m")))
	hog := podOf("hog", ctr("h", reqs("cpu=1", "")))
	pods = []*v1.Pod{pod, hog}
	for _, p := range pods {
		got := allocate(p)
		if _, _, err := m.Actuate(ctx, got, running(got, got.Spec.Containers[0].Name)); err != nil {
			t.Fatal(err)
		}
	}
	if e := next(); e != "" {
		t.Fatalf("event on creation: %q", e)
	}

	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Containers[0].Resources = reqs("cpu=1500m", "cpu=1500m")
	allocate(resized)
	if e := next(); !strings.HasPrefix(e, "Warning ResizeDeferred Pod resize Deferred: ") || !strings.Contains(e, `"generation":2`) {
		t.Fatalf("deferred: %q", e)
	}
	allocate(resized)
	if e := next(); e != "" {
		t.Fatalf("a second event for the same deferred generation: %q", e)
	}

	pods = []*v1.Pod{resized}
	if err := m.Forget(hog.UID); err != nil {
		t.Fatal(err)
	}
	got := allocate(resized)
	want := `Normal ResizeStarted Pod resize started: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1500m"},"requests":{"cpu":"1500m"}}}],"generation":2}`
	if e := next(); e != want {
		t.Fatalf("started:\n got %q\nwant %q", e, want)
	}
	if _, _, err := m.Actuate(ctx, got, running(got, "c")); err != nil {
		t.Fatal(err)
	}
	if e := next(); !strings.HasPrefix(e, "Normal ResizeCompleted Pod resize completed: ") || !strings.Contains(e, `"generation":2`) {
		t.Fatalf("completed: %q", e)
	}
	if _, _, err := m.Actuate(ctx, got, running(got, "c")); err != nil || next() != "" {
		t.Fatalf("a second Actuate with nothing to do: %v, or an event", err)
	}

	rec.failOn = "id-c"
	failing := resized.DeepCopy()
	failing.Generation = 3
	failing.Spec.Containers[0].Resources = reqs("cpu=1", "cpu=1")
	got = allocate(failing)
	if e := next(); !strings.HasPrefix(e, "Normal ResizeStarted") {
		t.Fatalf("started at generation 3: %q", e)
	}
	for range 2 {
		if _, _, err := m.Actuate(ctx, got, running(got, "c")); err == nil {
			t.Fatal("Actuate succeeded with a refusing runtime")
		}
	}
	if e := next(); !strings.HasPrefix(e, "Warning ResizeError Pod resize error: ") || !strings.Contains(e, "runtime refused") {
		t.Fatalf("error: %q", e)
	}
	if e := next(); e != "" {
		t.Fatalf("a second event for the same error: %q", e)
	}

	// Under the static CPU manager a Guaranteed pod's CPU cannot change.
	static, err := allocation.New(allocation.Config{Containers: rec, Recorder: events, Node: allocation.NodeConfig{CPUManagerStatic: true},
		Clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	g := podOf("g", ctr("c", reqs("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")))
	if _, err := static.Allocate(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = g.DeepCopy()
	g.Generation = 4
	g.Spec.Containers[0].Resources = reqs("cpu=2,memory=1Gi", "cpu=2,memory=1Gi")
	if _, err := static.Allocate(ctx, g); err != nil {
		t.Fatal(err)
	}
	if e := next(); !strings.HasPrefix(e, "Warning ResizeInfeasible Pod resize Infeasible: ") || !strings.Contains(e, `"generation":4`) {
		t.Fatalf("infeasible: %q", e)
	}
}
