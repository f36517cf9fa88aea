package syncloop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/syncloop"
)

// stepped is a loop with inline workers on a fake clock, driven by the
// test alone.
type stepped struct {
	clk     *testingclock.FakeClock
	rt      *agenttest.FakeRuntime
	relist  *pleg.Generic
	status  *fakeStatus
	updates chan nodekit.PodUpdate
	loop    *syncloop.Loop
}

func newStepped(t *testing.T, edit func(*syncloop.Config)) *stepped {
	t.Helper()
	s := &stepped{clk: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), status: newFakeStatus(),
		updates: make(chan nodekit.PodUpdate, 10)}
	s.rt = agenttest.NewFakeRuntime(s.clk)
	cache := pleg.NewCache()
	s.relist = pleg.NewGeneric(s.rt, cache, pleg.Options{Clock: s.clk})
	cfg := syncloop.Config{Runtime: s.rt, Cache: cache, Status: s.status, Updates: s.updates, Events: s.relist.Events(),
		RootDir: t.TempDir(), Clock: s.clk, InlineWorkers: true}
	if edit != nil {
		edit(&cfg)
	}
	var err error
	if s.loop, err = syncloop.New(cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// add sends the pod and relists once: a pod's first sync, like every
// other, waits for a relist after its last one (none yet).
func (s *stepped) add(t *testing.T, p *v1.Pod) {
	s.updates <- nodekit.PodUpdate{Op: nodekit.ADD, Source: nodekit.SourceAPI, Pods: []*v1.Pod{p}}
	s.relist.Relist(t.Context())
}

func (s *stepped) drain(t *testing.T) {
	t.Helper()
	if err := s.loop.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

func (s *stepped) syncPods() int {
	n := 0
	for _, c := range s.rt.Calls() {
		if strings.HasPrefix(c, "SyncPod ") {
			n++
		}
	}
	return n
}

func webPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
}

// An inline worker never waits for a fresh runtime status: a pod whose
// cache entry is no newer than its last sync keeps its work pending until
// a relist at a later time, and Drain returns meanwhile.
func TestDrainWaitsForANewerStatus(t *testing.T) {
	s := newStepped(t, nil)
	s.add(t, webPod())
	s.drain(t)
	if n := s.syncPods(); n != 1 {
		t.Fatalf("%d runtime syncs after the first Drain, want 1", n)
	}
	s.relist.Relist(t.Context()) // the container started: an event, at the same instant
	s.drain(t)
	if st := s.status.get(t, "uid-web"); st.Phase != v1.PodPending {
		t.Fatalf("phase %s before time passed, want Pending (the event's sync waits for a newer status)", st.Phase)
	}
	s.clk.Step(time.Second)
	s.relist.Relist(t.Context())
	s.drain(t)
	if st := s.status.get(t, "uid-web"); st.Phase != v1.PodRunning {
		t.Fatalf("phase %s after a relist a second later, want Running", st.Phase)
	}
}

// While the runtime is unhealthy Drain does nothing and says why.
func TestDrainUnhealthy(t *testing.T) {
	down := errors.New("runtime down")
	s := newStepped(t, func(c *syncloop.Config) { c.Health = func(context.Context) error { return down } })
	s.add(t, webPod())
	if err := s.loop.Drain(t.Context()); !errors.Is(err, down) {
		t.Fatalf("Drain: %v, want the health error", err)
	}
	if _, ok := s.status.GetPodStatus("uid-web"); ok || s.syncPods() != 0 {
		t.Fatalf("an unhealthy Drain synced the pod (%d runtime syncs)", s.syncPods())
	}
	if !errors.Is(s.loop.Healthy(), down) {
		t.Fatalf("Healthy: %v", s.loop.Healthy())
	}
}

// A closed update channel ends nothing and is not read again.
func TestDrainClosedUpdates(t *testing.T) {
	s := newStepped(t, nil)
	s.add(t, webPod())
	close(s.updates)
	s.drain(t)
	s.drain(t)
	if _, ok := s.status.GetPodStatus("uid-web"); !ok {
		t.Fatal("the update sent before the close was not handled")
	}
}

// With inline workers KillPod steps the pod's worker itself and returns
// once it has terminated.
func TestKillPodInline(t *testing.T) {
	s := newStepped(t, nil)
	s.add(t, webPod())
	s.drain(t)
	s.clk.Step(time.Second)
	s.relist.Relist(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	edited := false
	if err := s.loop.KillPod(ctx, webPod(), 0, func(*v1.PodStatus) { edited = true }); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	if st := s.status.get(t, "uid-web"); !edited || st.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("after KillPod: status edited %v, app %+v; want edited and terminated", edited, st.ContainerStatuses[0].State)
	}
}

// capableStatus and capableVolumes have the optional capabilities
// housekeeping looks for, and record what they were asked to keep.
type capableStatus struct {
	*fakeStatus
	kept map[types.UID]bool
}

func (c *capableStatus) RemoveOrphanedStatuses(keep map[types.UID]bool) { c.kept = keep }

type capableVolumes struct{ kept map[types.UID]bool }

func (*capableVolumes) WaitForAttachAndMount(context.Context, *v1.Pod) error { return nil }
func (*capableVolumes) WaitForUnmount(context.Context, *v1.Pod) error        { return nil }
func (c *capableVolumes) CleanupPods(keep map[types.UID]bool)                { c.kept = keep }

var (
	_ syncloop.OrphanStatusRemover = (*capableStatus)(nil)
	_ syncloop.VolumeCleaner       = (*capableVolumes)(nil)
)

// Housekeeping finds the named optional capabilities and asks them to
// keep exactly the pods the node still has.
func TestHousekeepingUsesCapabilities(t *testing.T) {
	st := &capableStatus{fakeStatus: newFakeStatus()}
	vols := &capableVolumes{}
	s := newStepped(t, func(c *syncloop.Config) { c.Status, c.Volumes = st, vols })
	s.add(t, webPod())
	s.drain(t)
	s.loop.Housekeeping(t.Context())
	for name, kept := range map[string]map[types.UID]bool{"statuses": st.kept, "volumes": vols.kept} {
		if len(kept) != 1 || !kept["uid-web"] {
			t.Errorf("housekeeping kept %s %v, want exactly uid-web", name, kept)
		}
	}
}

// Run with inline workers runs the pods' steps on its own goroutine
// after each event: a pod reaches Running with no worker goroutine.
func TestRunInlineWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := agenttest.NewFakeRuntime(clock.RealClock{})
		cache := pleg.NewCache()
		relist := pleg.NewGeneric(rt, cache, pleg.Options{})
		status := newFakeStatus()
		updates := make(chan nodekit.PodUpdate, 1)
		loop, err := syncloop.New(syncloop.Config{Runtime: rt, Cache: cache, Status: status, Updates: updates,
			Events: relist.Events(), RootDir: t.TempDir(), InlineWorkers: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { _ = relist.Run(ctx) })
		wg.Go(func() { _ = loop.Run(ctx) })
		updates <- nodekit.PodUpdate{Op: nodekit.ADD, Source: nodekit.SourceAPI, Pods: []*v1.Pod{webPod()}}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if st := status.get(t, "uid-web"); st.Phase != v1.PodRunning {
			t.Fatalf("phase %s, want Running", st.Phase)
		}
		cancel()
		wg.Wait()
	})
}
