package shutdown_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/shutdown"
)

func Example() {
	groups, err := shutdown.Groups(shutdown.GracePeriodConfig{
		ShutdownGracePeriod:             30 * time.Second,
		ShutdownGracePeriodCriticalPods: 10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("groups:", groups)

	pods := []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dns"},
			Spec: v1.PodSpec{Priority: ptr.To[int32](2000001000), TerminationGracePeriodSeconds: ptr.To[int64](30)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60)}},
	}
	// A killer that stops pods at once; the agent passes its loop's KillPod.
	killer := shutdown.PodKillerFunc(func(_ context.Context, pod *v1.Pod, grace int64, status func(*v1.PodStatus)) error {
		var st v1.PodStatus
		status(&st)
		fmt.Printf("kill %s/%s grace=%ds: %s %s\n", pod.Namespace, pod.Name, grace, st.Phase, st.Reason)
		return nil
	})
	m, err := shutdown.New(shutdown.Config{Groups: groups, ActivePods: func() []*v1.Pod { return pods }, Killer: killer})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := m.Shutdown(ctx); err != nil {
		fmt.Println(err)
		return
	}
	d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pods[1]})
	fmt.Printf("admit=%v reason=%s message=%q\n", d.Admit, d.Reason, d.Message)
	fmt.Println("ready:", m.Ready(ctx))

	_, err = shutdown.Groups(shutdown.GracePeriodConfig{ShutdownGracePeriod: 10 * time.Second, ShutdownGracePeriodCriticalPods: 20 * time.Second})
	fmt.Println(err)
	// Output:
	// groups: [{0 20} {2000000000 10}]
	// kill default/web grace=20s: Failed Terminated
	// kill kube-system/dns grace=10s: Failed Terminated
	// admit=false reason=NodeShutdown message="Pod was rejected as the node is shutting down."
	// ready: node is shutting down
	// shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s
}
