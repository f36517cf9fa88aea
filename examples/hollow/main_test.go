package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest"
)

const testNode = "hollow-0"

// TestHollowNode runs the hollow agent in-process against a private API
// server: the node turns Ready, pods bound to it run with a pod IP, and a
// deleted pod goes away.
func TestHollowNode(t *testing.T) {
	cp := agenttest.StartControlPlane(t)
	cp.SeedNamespace(t, "default")
	client := cp.AdminClient()

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{kubeconfig: cp.NodeKubeconfig(testNode), nodeName: testNode, nodeIP: "198.18.0.1",
			maxPods: 110, qps: 5, burst: 10, rootDir: t.TempDir()})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("hollow agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("hollow agent did not stop within 30s")
		}
	})

	poll := func(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, cond); err != nil {
			t.Fatalf("%s: not reached within %v: %v", what, timeout, err)
		}
	}
	var node *v1.Node
	poll("node Ready", time.Minute, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if cpu := node.Status.Capacity[v1.ResourceCPU]; cpu.Value() != 4 {
		t.Errorf("node cpu capacity = %v, want the fake machine's 4", cpu.String())
	}
	poll("node Lease", 30*time.Second, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, testNode, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil, nil
	})

	pods := client.CoreV1().Pods("default")
	for i := range 3 {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hollow-pod-%d", i)},
			Spec: v1.PodSpec{NodeName: testNode, Containers: []v1.Container{{
				Name: "app", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", Command: []string{"sleep", "3600"},
			}}},
		}
		if _, err := pods.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		name := fmt.Sprintf("hollow-pod-%d", i)
		poll("pod "+name+" Running with a pod IP", time.Minute, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ready := len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
			return p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" && p.Status.HostIP == "198.18.0.1" && ready, nil
		})
	}

	if err := pods.Delete(t.Context(), "hollow-pod-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("deleted pod gone", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "hollow-pod-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	for _, name := range []string{"hollow-pod-0", "hollow-pod-2"} {
		p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s after another was deleted: %v", name, err)
		} else if p.Status.Phase != v1.PodRunning {
			t.Errorf("pod %s after another was deleted: phase %q, want Running", name, p.Status.Phase)
		}
	}
}
