package agenttest_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
)

// TestControlPlaneControllers runs the controller manager and the
// scheduler: a new namespace gets its default service account (the
// service-account controller), and a pod is bound to the only Ready node
// (the scheduler).
func TestControlPlaneControllers(t *testing.T) {
	cp := agenttest.StartControlPlane(t, agenttest.WithControllerManager(), agenttest.WithScheduler())
	admin := cp.AdminClient()
	ctx := t.Context()

	ns, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcm-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s never got its default service account: %v", ns.Name, err)
	}

	node, err := admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("10")}
	node.Status = v1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []v1.NodeCondition{{
		Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns.Name).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func(ctx context.Context) (bool, error) {
		p, err := admin.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "n1", nil
	}); err != nil {
		t.Fatalf("pod was never bound to n1: %v", err)
	}
}

func poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, cond)
}
