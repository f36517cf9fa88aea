package podstatus_test

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
)

// A pod whose containers are ready waits for its readiness gate.
func ExampleGenerate() {
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers:     []v1.Container{{Name: "web"}},
		ReadinessGates: []v1.PodReadinessGate{{ConditionType: "example.com/lb"}},
	}}
	web := v1.ContainerStatus{Name: "web", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	res := podstatus.Generate(podstatus.Input{
		Pod:         pod,
		Containers:  []v1.ContainerStatus{web},
		Sandboxes:   []*nodekit.SandboxStatus{{State: nodekit.SandboxReady, IPs: []string{"10.88.0.5"}}},
		Initialized: true,
	})
	fmt.Println(res.Phase)
	for _, c := range res.Conditions {
		fmt.Println(strings.TrimSpace(fmt.Sprintln(c.Type, c.Status, c.Reason, c.Message)))
	}
	// Output:
	// Running
	// PodReadyToStartContainers True
	// Initialized True
	// Ready False ReadinessGatesNotReady corresponding condition of pod readiness gate "example.com/lb" does not exist.
	// ContainersReady True
	// PodScheduled True
}
