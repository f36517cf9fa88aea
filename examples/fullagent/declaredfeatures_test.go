package main

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
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
		{"default", nil, []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"}},
		{"websockets off", map[string]bool{"ExtendWebSocketsToKubelet": false}, []string{"InPlacePodVerticalScalingInitContainers"}},
		{"not implemented though on", map[string]bool{"InPlacePodVerticalScalingMemoryBackedVolumes": true, "DRAOptionalNodeOperations": true},
			[]string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"}},
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
