package syncloop_test

import (
	"context"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/syncloop"
)

// A loop on the fake runtime, driven step by step: pods arrive as updates,
// Drain admits them and runs their workers inline, the runtime runs them,
// a relist reports back, and statuses land in the StatusManager. No
// goroutine runs and nothing sleeps; time passes when the test says so.
func Example() {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	relist := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})
	store := syncloop.NewPodStore() // built first, handed to every reader
	status := newFakeStatus()
	updates := make(chan nodekit.PodUpdate, 1)
	root, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(root)
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Pods: store, Cache: cache, Status: status, Updates: updates, Events: relist.Events(),
		RootDir: root, Clock: clk, InlineWorkers: true,
	})
	if err != nil {
		panic(err)
	}
	show := func() {
		s, _ := status.GetPodStatus("uid-1")
		fmt.Println(s.Phase, s.ContainerStatuses[0].Name, s.ContainerStatuses[0].Ready)
	}

	updates <- nodekit.PodUpdate{Op: nodekit.ADD, Source: nodekit.SourceAPI, Pods: []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}}}
	relist.Relist(ctx)
	_ = loop.Drain(ctx) // admitted; sandbox and container started
	show()
	clk.Step(time.Second) // the PLEG's period
	relist.Relist(ctx)    // sees the container running: an event
	_ = loop.Drain(ctx)   // the worker syncs again on the new status
	show()
	_, known := store.GetPodByUID("uid-1")
	fmt.Println("in the store:", known)
	// Output:
	// Pending app false
	// Running app true
	// in the store: true
}
