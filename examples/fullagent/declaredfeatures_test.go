package main

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/kubeletconfig"
)

// fullagent declares kubelet v1.37.2's list for its gates less what it
// does not act on, and its admitter refuses a pod needing a feature left
// out, with upstream's reason and message.
func TestDeclaredFeaturesFollowGates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates map[string]bool
		want  []string
	}{
		{"default", nil, []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}},
		{"websockets off", map[string]bool{"ExtendWebSocketsToKubelet": false}, []string{"InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}},
		{"restart all off", map[string]bool{"RestartAllContainersOnContainerExits": false}, []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers"}},
		{"pod-level resize off", map[string]bool{"InPlacePodLevelResourcesVerticalScaling": false}, []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}},
		{"not implemented though on", map[string]bool{"InPlacePodVerticalScalingMemoryBackedVolumes": true, "DRAOptionalNodeOperations": true},
			[]string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gates, err := kubeletconfig.NewGates(t.Context(), tc.gates)
			if err != nil {
				t.Fatal(err)
			}
			a := &agent{gates: gates}
			list, ad, err := a.declaredFeatures()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(list, tc.want) {
				t.Errorf("declared %v, want %v", list, tc.want)
			}
			no := false
			p := &v1.Pod{Spec: v1.PodSpec{HostNetwork: true, HostUsers: &no, Containers: []v1.Container{{Name: "c"}}}}
			want := nodekit.Decision{Reason: "PodFeatureUnsupported", Message: "Pod requires node features that are not available: UserNamespacesHostNetworkSupport"}
			if got := ad.Admit(context.Background(), nodekit.AdmitRequest{Pod: p}); got != want {
				t.Errorf("hostNetwork pod in a user namespace: %+v, want %+v", got, want)
			}
		})
	}
}

// TestRestartAllGate: with RestartAllContainersOnContainerExits on (the
// default) the built-in admitters take a pod with a RestartAllContainers
// rule; with it off in the configuration they refuse it, naming the gate.
func TestRestartAllGate(t *testing.T) {
	never := v1.ContainerRestartPolicyNever
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", RestartPolicy: &never,
		RestartPolicyRules: []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}
	for _, tc := range []struct {
		name  string
		gates map[string]bool
		want  nodekit.Decision
	}{
		{"default", nil, nodekit.Admitted},
		{"gate off", map[string]bool{"RestartAllContainersOnContainerExits": false}, nodekit.Decision{Reason: "PodFeatureUnsupported",
			Message: `Pod requires node features that are not available: RestartAllContainersOnContainerExits (container "c" restartPolicyRules[0] has action RestartAllContainers: this node does not restart all containers in place)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gates, err := kubeletconfig.NewGates(t.Context(), tc.gates)
			if err != nil {
				t.Fatal(err)
			}
			var pf nodekit.Admitter
			for _, ad := range builtins(nil, nil, gates, false) {
				if _, ok := ad.(*admission.PodFeatures); ok {
					pf = ad
				}
			}
			if pf == nil {
				t.Fatal("no PodFeatures admitter among the built-ins")
			}
			if got := pf.Admit(t.Context(), nodekit.AdmitRequest{Pod: p}); got != tc.want {
				t.Errorf("decision %+v, want %+v", got, tc.want)
			}
		})
	}
}
