package agenttest_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agenttest"
)

// A simulated node runs the real sync loop, PLEG and status manager on the
// fake runtime. Tests usually run it in a synctest bubble (StartSimNode and
// Settle); this example runs it on real time, with a fast PLEG, and waits
// for each status.
func ExampleSimNode() {
	n, err := agenttest.NewSimNode(agenttest.SimOptions{RelistPeriod: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			Containers:    []v1.Container{{Name: "app", Image: "nginx"}},
		},
	}
	n.AddPod(pod)
	st, err := n.WaitFor(ctx, pod.UID, func(s v1.PodStatus) bool { return s.Phase == v1.PodRunning })
	fmt.Println(st.Phase, err)

	// The container crashes: the node restarts it.
	if err := n.Runtime().ExitContainer(pod.UID, "app", 2); err != nil {
		panic(err)
	}
	st, err = n.WaitFor(ctx, pod.UID, func(s v1.PodStatus) bool {
		return s.ContainerStatuses[0].RestartCount == 1 && s.ContainerStatuses[0].State.Running != nil
	})
	last := st.ContainerStatuses[0].LastTerminationState.Terminated
	fmt.Println("restarts:", st.ContainerStatuses[0].RestartCount, "last exit:", last.ExitCode, last.Reason, err)

	cancel()
	_ = <-done // the node's Run returns once ctx is cancelled
	// Output:
	// Running <nil>
	// restarts: 1 last exit: 2 Error <nil>
}
