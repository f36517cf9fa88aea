package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestNodeShutdown: with shutdownGracePeriod 20s (10s for critical pods),
// SIGPWR to the agent (standing for a system shutdown) makes the node not
// ready, terminates the regular pod first and the critical one after it,
// both Failed with upstream's reason, message and DisruptionTarget, and
// refuses new pods; the agent itself keeps running.
func TestNodeShutdown(t *testing.T) {
	e := startProcEnvWith(t, "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n")
	e.createPod(t, simplePod("regular", v1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 0.2; done"))
	critical := simplePod("critical", v1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 0.2; done")
	critical.Spec.PriorityClassName = "system-node-critical"
	e.createPod(t, critical)
	for _, name := range []string{"regular", "critical"} {
		e.waitPod(t, name, 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}

	e.agent.signal(syscall.SIGPWR)
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionFalse && strings.Contains(c.Message, "node is shutting down"), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the node did not turn not ready with 'node is shutting down'")
	}
	var finished = map[string]time.Time{}
	for _, name := range []string{"regular", "critical"} {
		p := e.waitPod(t, name, 45*time.Second, "terminated", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if p.Status.Reason != "Terminated" || p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Fatalf("%s: %s", name, describeStatus(p))
		}
		disrupted := false
		for _, c := range p.Status.Conditions {
			disrupted = disrupted || (c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonTerminationByKubelet)
		}
		if !disrupted {
			t.Fatalf("%s has no DisruptionTarget condition: %+v", name, p.Status.Conditions)
		}
		cs := containerStatus(p, "app")
		if cs == nil || cs.State.Terminated == nil {
			t.Fatalf("%s: container not terminated: %s", name, describeStatus(p))
		}
		finished[name] = cs.State.Terminated.FinishedAt.Time
	}
	if !finished["critical"].After(finished["regular"]) {
		t.Fatalf("the critical pod ended at %v, not after the regular one (%v)", finished["critical"], finished["regular"])
	}
	e.createPod(t, simplePod("late", v1.RestartPolicyAlways, "sleep 3600"))
	p := e.waitPod(t, "late", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.Reason != "NodeShutdown" {
		t.Fatalf("a pod created during shutdown: %s", describeStatus(p))
	}
	if !e.agent.running() {
		t.Fatal("the agent exited on SIGPWR")
	}
}
