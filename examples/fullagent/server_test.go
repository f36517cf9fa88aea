package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// TestNodeAPI reaches the agent's node API through the API server, as
// kubectl logs and kubectl get --raw .../proxy/... do.
func TestNodeAPI(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()
	e.createPod(t, simplePod("talk", v1.RestartPolicyNever, "echo hello from the node; echo done >&2"))
	e.waitPod(t, "talk", 60*time.Second, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })

	var out string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().Pods("default").GetLogs("talk", &v1.PodLogOptions{Container: "app"}).DoRaw(ctx)
		out, last = string(b), err
		return err == nil, nil
	})
	if err != nil || !strings.Contains(out, "hello from the node\n") || !strings.Contains(out, "done\n") {
		t.Fatalf("logs of a completed pod: %q %v (last error: %v)", out, err, last)
	}
	b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "healthz").DoRaw(ctx)
	if err != nil || string(b) != "ok" {
		t.Fatalf("healthz through the API server: %q %v", b, err)
	}
	b, err = e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "configz").DoRaw(ctx)
	if err != nil || !strings.Contains(string(b), `"kubeletconfig":{"kind":"KubeletConfiguration"`) {
		t.Fatalf("configz: %.200s %v", b, err)
	}
	b, err = e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "pods").DoRaw(ctx)
	if err != nil || !strings.Contains(string(b), `"name":"talk"`) || !strings.Contains(string(b), `"phase":"Succeeded"`) {
		t.Fatalf("pods: %.300s %v", b, err)
	}

	// /stats/summary through the API server: a busy pod shows CPU and
	// memory, and the pressure blocks kubelet v1.37 gives the node, the
	// pod (found through its pod cgroup) and the container (zeros under
	// cgroup v1).
	e.createPod(t, simplePod("busy", v1.RestartPolicyAlways, "while true; do :; done"))
	e.waitPod(t, "busy", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	err = wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := e.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode, "proxy", "stats", "summary").DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		var sum statsv1alpha1.Summary
		if json.Unmarshal(b, &sum) != nil || sum.Node.CPU == nil || sum.Node.Memory == nil || sum.Node.Memory.WorkingSetBytes == nil {
			return false, nil
		}
		for _, ps := range sum.Pods {
			if ps.PodRef.Name != "busy" {
				continue
			}
			for _, c := range ps.Containers {
				if c.CPU != nil && c.CPU.UsageNanoCores != nil && *c.CPU.UsageNanoCores > 0 &&
					c.Memory != nil && c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 0 {
					t.Logf("stats/summary: busy uses %d nanocores and %d bytes", *c.CPU.UsageNanoCores, *c.Memory.WorkingSetBytes)
					if missing := missingPSI(sum.Node.CPU, sum.Node.Memory, ps.CPU, ps.Memory, c.CPU, c.Memory); missing != "" {
						t.Errorf("stats/summary: no pressure block for %s", missing)
					}
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("stats/summary through the API server never showed the busy pod's CPU and memory")
	}
}

// missingPSI names the first of node CPU, node memory, pod CPU, pod memory,
// container CPU and container memory that has no pressure block.
func missingPSI(nodeCPU *statsv1alpha1.CPUStats, nodeMem *statsv1alpha1.MemoryStats, podCPU *statsv1alpha1.CPUStats,
	podMem *statsv1alpha1.MemoryStats, ctrCPU *statsv1alpha1.CPUStats, ctrMem *statsv1alpha1.MemoryStats) string {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"the node's CPU", nodeCPU != nil && nodeCPU.PSI != nil},
		{"the node's memory", nodeMem != nil && nodeMem.PSI != nil},
		{"the pod's CPU", podCPU != nil && podCPU.PSI != nil},
		{"the pod's memory", podMem != nil && podMem.PSI != nil},
		{"the container's CPU", ctrCPU != nil && ctrCPU.PSI != nil},
		{"the container's memory", ctrMem != nil && ctrMem.PSI != nil},
	} {
		if !c.ok {
			return c.name
		}
	}
	return ""
}
