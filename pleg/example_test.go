package pleg_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pleg"
)

func Example() {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	rt := agenttest.NewFakeRuntime(clk)
	cache := pleg.NewCache()
	g := pleg.NewGeneric(rt, cache, pleg.Options{Clock: clk})

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
	rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: nodekit.PodActions{ContainersToStart: []int{0}, CreateSandbox: true}})
	g.Relist(ctx)
	fmt.Println(len(g.Events()), "events after the pod started")

	_ = rt.ExitContainer("uid-1", "app", 1)
	g.Relist(ctx)
	ev := <-g.Events()
	for len(g.Events()) > 0 {
		ev = <-g.Events()
	}
	st, _ := cache.Get("uid-1")
	fmt.Println(ev.Type, "exit code", st.FindContainer("app").ExitCode)
	// Output:
	// 2 events after the pod started
	// ContainerDied exit code 1
}
