package syncloop_test

import (
	"context"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
	"github.com/nodekit/nodekit/syncloop"
)

// A loop on the fake runtime: pods arrive as updates, the runtime runs
// them, the PLEG reports back, and statuses land in the StatusManager.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := agenttest.NewFakeRuntime(clock.RealClock{})
	cache := pleg.NewCache()
	relist := pleg.NewGeneric(rt, cache, pleg.Options{RelistPeriod: 50 * time.Millisecond})
	status := newFakeStatus()
	updates := make(chan nodekit.PodUpdate, 1)
	root, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(root)
	loop, err := syncloop.New(syncloop.Config{
		Runtime: rt, Cache: cache, Status: status, Updates: updates, Events: relist.Events(), RootDir: root,
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = relist.Run(ctx) }() // both return once ctx is cancelled
	go func() { _ = loop.Run(ctx) }()

	updates <- nodekit.PodUpdate{Op: nodekit.ADD, Source: nodekit.SourceAPI, Pods: []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}}}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s, ok := status.GetPodStatus("uid-1"); ok && s.Phase == v1.PodRunning {
			fmt.Println(s.Phase, s.ContainerStatuses[0].Name, s.ContainerStatuses[0].Ready)
			return
		}
	}
	fmt.Println("not running")
	// Output: Running app true
}
