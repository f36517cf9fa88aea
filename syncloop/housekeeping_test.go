package syncloop_test

import (
	"context"
	"os"
	"path/filepath"
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

// mountList is a MountLister over a fixed list.
type mountList []string

func (m mountList) MountPaths(context.Context) ([]string, error) { return m, nil }

var _ syncloop.MountLister = mountList(nil)

// TestHousekeepingPodDirs: housekeeping removes ROOT/pods/UID of a pod
// the loop does not know, unless something is still mounted below it
// (Config.Mounts); the directory of a pod it runs stays.
func TestHousekeepingPodDirs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	relist := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	updates := make(chan nodekit.PodUpdate, 10)
	mounted := filepath.Join(syncloop.PodDir(root, "mounted"), "volumes", "kubernetes.io~empty-dir", "data")
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Cache: cache, Status: newFakeStatus(), Updates: updates,
		RootDir: root, Clock: clk, InlineWorkers: true, Mounts: mountList{"/", mounted},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := pod("running", v1.RestartPolicyAlways, "app")
	for _, uid := range []string{"running", "gone", "mounted"} {
		if err := os.MkdirAll(filepath.Join(syncloop.PodDir(root, types.UID(uid)), "volumes"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	updates <- nodekit.PodUpdate{Op: nodekit.ADD, Pods: []*v1.Pod{p}, Source: nodekit.SourceAPI}
	relist.Relist(ctx)
	if err := loop.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if !loop.SourcesReady() {
		t.Fatal("sources not ready after the first update")
	}
	loop.Housekeeping(ctx)
	for uid, want := range map[string]bool{"running": true, "gone": false, "mounted": true} {
		_, err := os.Stat(syncloop.PodDir(root, types.UID(uid)))
		if exists := err == nil; exists != want {
			t.Errorf("pod dir %s exists = %v, want %v", uid, exists, want)
		}
	}
}

// listingFunc is a PodLister over a function.
type listingFunc func() []*nodekit.Pod

func (f listingFunc) ListPods(context.Context, bool) ([]*nodekit.Pod, error) { return f(), nil }

var _ syncloop.PodLister = listingFunc(nil)

// TestHousekeepingListsThroughListing: with Config.Listing, housekeeping
// finds the pods to kill in its answer, not in the runtime's: an orphan
// the listing does not show yet is left for the next pass.
func TestHousekeepingListsThroughListing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rt := agenttest.NewFakeRuntime(clk)
	orphan := pod("orphan", v1.RestartPolicyAlways, "app")
	rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: orphan, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}}})
	var listed []*nodekit.Pod // what the listing shows: nothing yet
	updates := make(chan nodekit.PodUpdate, 10)
	cache := pleg.NewCache()
	relist := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Cache: cache, Status: newFakeStatus(), Updates: updates,
		RootDir: t.TempDir(), Clock: clk, InlineWorkers: true, Mounts: mountList{"/"},
		Listing: listingFunc(func() []*nodekit.Pod { return listed }),
	})
	if err != nil {
		t.Fatal(err)
	}
	updates <- nodekit.PodUpdate{Op: nodekit.SET, Source: nodekit.SourceAPI}
	if err := loop.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// housekeep runs one housekeeping pass, a relist a second later, and
	// what they queue.
	housekeep := func() {
		t.Helper()
		loop.Housekeeping(ctx)
		clk.Step(time.Second)
		relist.Relist(ctx)
		if err := loop.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	housekeep()
	if n := countCalls(rt, "KillPod"); n != 0 {
		t.Fatalf("%d kills of a pod the listing does not show", n)
	}
	listed, _ = rt.ListPods(ctx, false)
	housekeep()
	if n := countCalls(rt, "KillPod default/pod-orphan"); n != 1 {
		t.Fatalf("%d kills of the orphan once listed (calls %v), want 1", n, rt.Calls())
	}
}
