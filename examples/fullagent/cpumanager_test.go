package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/agenttest"
)

// TestStaticCPUManager: with cpuManagerPolicy static and CPU 0 reserved, a
// Guaranteed pod asking for one whole CPU runs alone on another CPU (read
// from the container's own view of its cgroup cpuset), a BestEffort pod is
// kept off it, the assignment is in the checkpoint, and a Guaranteed pod
// asking for more CPUs than remain is rejected at admission.
func TestStaticCPUManager(t *testing.T) {
	if runtime.NumCPU() < 2 {
		agenttest.RequireIntegration(t, "a machine of 2 CPUs", fmt.Errorf("the machine has %d", runtime.NumCPU()))
	}
	e := startEnv(t, envOption{config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 2s\n"})
	one := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("32Mi")}
	exclusive := simplePod("exclusive", v1.RestartPolicyAlways, "sleep 3600")
	exclusive.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: one, Limits: one}
	shared := simplePod("shared", v1.RestartPolicyAlways, "sleep 3600")
	e.createPod(t, exclusive)
	e.createPod(t, shared)

	isRunning := func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }
	ex := e.waitPod(t, "exclusive", 60*time.Second, "Running", isRunning)
	sh := e.waitPod(t, "shared", 60*time.Second, "Running", isRunning)
	cpusOf := func(p *v1.Pod) cpuset.CPUSet {
		out := e.exec(t, p, "app", "cat", "/sys/fs/cgroup/cpuset/cpuset.cpus")
		set, err := cpuset.Parse(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("%s: cpuset.cpus %q: %v", p.Name, out, err)
		}
		return set
	}
	exSet, shSet := cpusOf(ex), cpusOf(sh)
	if exSet.Size() != 1 || exSet.Contains(0) {
		t.Fatalf("the Guaranteed container runs on %v; want one CPU other than the reserved 0", exSet)
	}
	if shSet.Intersection(exSet).Size() != 0 || !shSet.Contains(0) {
		t.Fatalf("the BestEffort container runs on %v, overlapping the exclusive %v", shSet, exSet)
	}

	var st struct {
		PolicyName string                       `json:"policyName"`
		Entries    map[string]map[string]string `json:"entries"`
	}
	b, err := os.ReadFile(filepath.Join(e.rootDir, "cpu_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Entries[string(ex.UID)]["app"]; st.PolicyName != "static" || got != exSet.String() {
		t.Fatalf("checkpoint: policy %q, entry %q; want static, %q (%s)", st.PolicyName, got, exSet, b)
	}

	// Nothing left to give exclusively on this machine.
	all := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("32Mi")}
	greedy := simplePod("greedy", v1.RestartPolicyAlways, "sleep 3600")
	greedy.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: all, Limits: all}
	if runtime.NumCPU() == 2 {
		e.createPod(t, greedy)
		p := e.waitPod(t, "greedy", 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if p.Status.Reason != "UnexpectedAdmissionError" || !strings.Contains(p.Status.Message, "not enough cpus available to satisfy request") {
			t.Fatalf("greedy pod: %s", describeStatus(p))
		}
	}
}
