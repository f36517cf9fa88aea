package syncloop

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// containersToReset lists every runtime instance of the pod's containers,
// targets before sources and regular before init, as upstream's
// computePodActions; the running ones are killed first.
func TestContainersToReset(t *testing.T) {
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	rule := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "setup"}, {Name: "side", RestartPolicy: &always, RestartPolicyRules: rule}},
		Containers:     []v1.Container{{Name: "source", RestartPolicy: &never, RestartPolicyRules: rule}, {Name: "regular"}},
	}}
	c := func(id, name string, state nodekit.State, code int) *nodekit.ContainerStatus {
		return &nodekit.ContainerStatus{ID: nodekit.ContainerID{Type: "t", ID: id}, Name: name, State: state, ExitCode: code}
	}
	rs := &nodekit.PodStatus{Containers: []*nodekit.ContainerStatus{
		c("side-2", "side", nodekit.StateExited, 42), c("source-1", "source", nodekit.StateExited, 42),
		c("regular-1", "regular", nodekit.StateRunning, 0), c("side-1", "side", nodekit.StateExited, 1),
		c("setup-1", "setup", nodekit.StateExited, 0), c("other-1", "not-in-spec", nodekit.StateRunning, 0),
	}}
	var got []string
	for _, r := range containersToReset(pod, rs) {
		s := r.id.ID
		if r.kill {
			s += "(kill)"
		}
		got = append(got, s)
	}
	want := []string{"regular-1(kill)", "setup-1", "side-1", "source-1", "side-2"}
	if !slices.Equal(got, want) {
		t.Errorf("reset order %v, want %v", got, want)
	}
	if containersToReset(pod, nil) != nil {
		t.Errorf("no runtime status: want nothing to reset")
	}
}
