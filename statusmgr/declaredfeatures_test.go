package statusmgr

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/featuregate"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/kubeletconfig"
)

func gatesFor(t *testing.T, set map[string]bool) featuregate.FeatureGate {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	g, err := kubeletconfig.NewGates(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The list follows kubelet v1.37.2's gates: its defaults, a gate turned
// off or on, a runtime feature some need, the features an agent says it
// does not implement.
func TestDeclaredFeatures(t *testing.T) {
	kubeletDefaults := []string{
		"ExtendWebSocketsToKubelet",
		"InPlacePodLevelResourcesVerticalScaling",
		"InPlacePodVerticalScalingInitContainers",
		"RestartAllContainersOnContainerExits",
	}
	tests := []struct {
		name    string
		gates   map[string]bool
		runtime ndf.RuntimeFeatures
		notImpl []string
		want    []string
	}{
		{name: "kubelet v1.37.2 defaults", want: kubeletDefaults},
		{
			name:  "gates off and on",
			gates: map[string]bool{"RestartAllContainersOnContainerExits": false, "ExtendWebSocketsToKubelet": false, "InPlacePodVerticalScalingMemoryBackedVolumes": true},
			want:  []string{"InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "InPlacePodVerticalScalingMemoryBackedVolumes"},
		},
		{
			name:  "a gate needing a runtime feature the runtime lacks",
			gates: map[string]bool{"UserNamespacesHostNetworkSupport": true},
			want:  kubeletDefaults,
		},
		{
			name:    "a gate needing a runtime feature the runtime has",
			gates:   map[string]bool{"UserNamespacesHostNetworkSupport": true},
			runtime: ndf.RuntimeFeatures{UserNamespacesHostNetwork: true},
			want:    append(slices.Clone(kubeletDefaults), "UserNamespacesHostNetworkSupport"),
		},
		{
			name:    "not implemented left out",
			notImpl: []string{"RestartAllContainersOnContainerExits", "InPlacePodLevelResourcesVerticalScaling", "DRAOptionalNodeOperations"},
			want:    []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"},
		},
		{
			name:    "nothing left",
			gates:   map[string]bool{"RestartAllContainersOnContainerExits": false, "ExtendWebSocketsToKubelet": false, "InPlacePodLevelResourcesVerticalScaling": false},
			notImpl: []string{"InPlacePodVerticalScalingInitContainers"},
			want:    []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeclaredFeatures(DeclaredFeaturesConfig{Gates: gatesFor(t, tc.gates), Runtime: tc.runtime, NotImplemented: tc.notImpl})
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || !slices.Equal(got, tc.want) {
				t.Errorf("declared features\n got: %#v\nwant: %#v", got, tc.want)
			}
		})
	}
}

func TestDeclaredFeaturesErrorsAndGateOff(t *testing.T) {
	if _, err := DeclaredFeatures(DeclaredFeaturesConfig{}); err == nil || !strings.Contains(err.Error(), "Gates") {
		t.Errorf("no gates: err %v, want one naming Gates", err)
	}
	g := gatesFor(t, nil)
	if _, err := DeclaredFeatures(DeclaredFeaturesConfig{Gates: g, NotImplemented: []string{"Teleport"}}); err == nil || !strings.Contains(err.Error(), `NotImplemented "Teleport"`) {
		t.Errorf("unknown feature: err %v, want one naming it", err)
	}
	if _, err := DeclaredFeatures(DeclaredFeaturesConfig{Gates: g, KubeletVersion: "one"}); err == nil || !strings.Contains(err.Error(), "KubeletVersion") {
		t.Errorf("bad version: err %v, want one naming KubeletVersion", err)
	}
	// A gate set without NodeDeclaredFeatures (nor any feature's gate)
	// declares nothing, and does not panic on the unknown gates.
	got, err := DeclaredFeatures(DeclaredFeaturesConfig{Gates: featuregate.NewFeatureGate()})
	if err != nil || got != nil {
		t.Errorf("gate off: %#v, %v; want nil, nil", got, err)
	}
}

// The Node carries the list from registration on; nil leaves what the
// Node has; an unsorted list is refused.
func TestNodeDeclaredFeaturesPublished(t *testing.T) {
	want := []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"}
	f := newNodeFixture(t, NodeConfig{DeclaredFeatures: want})
	if err := f.r.Register(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := f.node(t).Status.DeclaredFeatures; !slices.Equal(got, want) {
		t.Errorf("registered declaredFeatures = %v, want %v", got, want)
	}
	existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1"}, Status: v1.NodeStatus{DeclaredFeatures: []string{"Other"}}}
	kept := newNodeFixture(t, NodeConfig{}, existing)
	if err := kept.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := kept.node(t).Status.DeclaredFeatures; !slices.Equal(got, []string{"Other"}) {
		t.Errorf("with no list configured, declaredFeatures = %v, want the Node's [Other] kept", got)
	}
	changed := newNodeFixture(t, NodeConfig{DeclaredFeatures: want}, existing.DeepCopy())
	if err := changed.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := changed.node(t).Status.DeclaredFeatures; !slices.Equal(got, want) {
		t.Errorf("after a sync, declaredFeatures = %v, want %v", got, want)
	}
	if _, err := NewNodeReporter(clientgo.Wrap(f.cs), NodeConfig{NodeName: "n", DeclaredFeatures: []string{"B", "A"}}); err == nil || !strings.Contains(err.Error(), "NodeConfig.DeclaredFeatures") {
		t.Errorf("unsorted list: err %v, want one naming NodeConfig.DeclaredFeatures", err)
	}
}
