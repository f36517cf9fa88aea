package statusmgr_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/statusmgr"
)

// printSink is a nodekit.StatusSink that prints what it is given, as a
// vendor sink might write JSON lines.
type printSink struct{}

func (printSink) SetPodStatus(_ context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	ready := v1.ConditionUnknown
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady {
			ready = c.Status
		}
	}
	fmt.Printf("%s/%s: %s, ready %s\n", pod.Namespace, pod.Name, st.Phase, ready)
	return nil
}

func (printSink) DeletePod(_ context.Context, pod *v1.Pod) error {
	fmt.Printf("%s/%s: deleted\n", pod.Namespace, pod.Name)
	return nil
}

var _ nodekit.StatusSink = printSink{}

func Example() {
	ctx := context.Background()
	m, err := statusmgr.NewManager(statusmgr.Config{Sink: printSink{}})
	if err != nil {
		panic(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{Name: "app"}}},
	}
	id := nodekit.ContainerID{Type: "containerd", ID: "abc"}
	status := v1.PodStatus{
		Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", ContainerID: id.String(),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
	}

	// A worker reports the pod running; the sync step publishes it.
	_ = m.SetPodStatus(pod, status)
	_ = m.SyncOnce(ctx)

	// The readiness probe succeeds: Ready is recomputed and published.
	_ = m.SetContainerReadiness(pod.UID, id, true)
	_ = m.SyncOnce(ctx)

	// Nothing changed: nothing is published.
	_ = m.SyncOnce(ctx)

	// The pod is deleted; the worker stops it and releases its resources.
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	_ = m.TerminatePod(deleting)
	_ = m.PodResourcesReclaimed(pod.UID)
	_ = m.SyncOnce(ctx)
	_ = m.SyncOnce(ctx)

	// Output:
	// default/web: Running, ready Unknown
	// default/web: Running, ready True
	// default/web: Failed, ready False
	// default/web: deleted
}
