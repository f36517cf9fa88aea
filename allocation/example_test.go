package allocation_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/allocation"
)

// A pod asks for more CPU than the node can give beside another pod: the
// resize is deferred and the pod keeps running at its allocation.
func Example() {
	ctx := context.Background()
	pod := podOf("web", ctr("app", reqs("cpu=500m", "cpu=500m")))
	other := podOf("batch", ctr("job", reqs("cpu=1", "")))
	m, _ := allocation.New(allocation.Config{
		Fit:        fitOn("cpu=2,memory=4Gi"),
		Pods:       func() []*v1.Pod { return []*v1.Pod{pod, other} },
		Containers: &recorder{},
	})
	_, _ = m.Allocate(ctx, pod) // admitted: allocated at its spec
	_, _ = m.Allocate(ctx, other)

	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources = reqs("cpu=1500m", "cpu=1500m")
	running, _ := m.Allocate(ctx, resized)
	fmt.Println("runs with cpu limit", running.Spec.Containers[0].Resources.Limits.Cpu())
	c := m.Pending(pod.UID)
	fmt.Println(c.Type, c.Reason)
	fmt.Println(c.Message)
	// Output:
	// runs with cpu limit 500m
	// PodResizePending Deferred
	// Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000
}
