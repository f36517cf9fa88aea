package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

func hostNetworkUserNS(p *v1.Pod) {
	no := false
	p.Spec.HostNetwork = true
	p.Spec.HostUsers = &no
}

func bindMountOptions(p *v1.Pod) {
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data", BindMountOptions: []string{"nosuid"}}}
}

func restartAllOn42(p *v1.Pod) {
	withRestartRule(0, false, v1.ContainerRestartPolicyNever,
		onExit(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42))(p)
}

// A pod needing a feature the node does not declare is refused with
// upstream's reason and message, naming every missing feature.
func TestDeclaredFeatures(t *testing.T) {
	const prefix = "Pod requires node features that are not available: "
	defaults := []string{"ExtendWebSocketsToKubelet", "InPlacePodVerticalScalingInitContainers"}
	tests := []struct {
		name     string
		declared []string
		pod      *v1.Pod
		want     nodekit.Decision
	}{
		{name: "a pod needing nothing", declared: defaults, pod: pod("p", "cpu=1"), want: nodekit.Admitted},
		{name: "nothing declared, a pod needing nothing", declared: nil, pod: pod("p", "cpu=1"), want: nodekit.Admitted},
		{
			name: "hostNetwork in a user namespace", declared: defaults, pod: pod("p", "cpu=1", hostNetworkUserNS),
			want: reject("PodFeatureUnsupported", prefix+"UserNamespacesHostNetworkSupport"),
		},
		{
			name: "two missing, named in order", declared: defaults, pod: pod("p", "cpu=1", hostNetworkUserNS, bindMountOptions, restartAllOn42),
			want: reject("PodFeatureUnsupported", prefix+"RestartAllContainersOnContainerExits, UserNamespacesHostNetworkSupport, VolumeBindMountOptions"),
		},
		{
			name: "declared, admitted", declared: []string{"RestartAllContainersOnContainerExits", "UserNamespacesHostNetworkSupport"},
			pod: pod("p", "cpu=1", hostNetworkUserNS, restartAllOn42), want: nodekit.Admitted,
		},
		{
			name: "hostNetwork with host users needs nothing", declared: nil,
			pod: pod("p", "cpu=1", func(p *v1.Pod) { p.Spec.HostNetwork = true }), want: nodekit.Admitted,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ad, err := admission.NewDeclaredFeatures(tc.declared, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := ad.Admit(context.Background(), nodekit.AdmitRequest{Pod: tc.pod}); got != tc.want {
				t.Errorf("decision\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

func TestNewDeclaredFeaturesRefusesBadLists(t *testing.T) {
	for name, list := range map[string][]string{
		"unknown":  {"Teleport"},
		"unsorted": {"InPlacePodVerticalScalingInitContainers", "ExtendWebSocketsToKubelet"},
	} {
		if _, err := admission.NewDeclaredFeatures(list, ""); err == nil {
			t.Errorf("%s %v: no error", name, list)
		}
	}
	if _, err := admission.NewDeclaredFeatures(nil, "1.x"); err == nil || !strings.Contains(err.Error(), "kubelet version") {
		t.Errorf("bad version: err %v, want one naming the kubelet version", err)
	}
}

// eventLog keeps the events recorded on pods.
type eventLog struct{ events []string }

func (l *eventLog) Eventf(_ runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.events = append(l.events, eventtype+" "+reason+" "+fmt.Sprintf(messageFmt, args...))
}

// An update needing a feature the node does not declare gets upstream's
// Warning event; one the node declares, or one needing nothing, none.
func TestUpdateCheckerEvents(t *testing.T) {
	running := pod("p", "cpu=1")
	running.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	podLevelResize := running.DeepCopy()
	podLevelResize.Spec.Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
	containerResize := running.DeepCopy()
	containerResize.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}

	tests := []struct {
		name     string
		declared []string
		updated  *v1.Pod
		want     []string
	}{
		{name: "pod-level resize, not declared", declared: []string{"ExtendWebSocketsToKubelet"}, updated: podLevelResize,
			want: []string{"Warning FailedNodeDeclaredFeaturesCheck Pod requires node features that are not available: InPlacePodLevelResourcesVerticalScaling"}},
		{name: "pod-level resize, declared", declared: []string{"InPlacePodLevelResourcesVerticalScaling"}, updated: podLevelResize},
		{name: "container resize needs no declared feature", declared: nil, updated: containerResize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ad, err := admission.NewDeclaredFeatures(tc.declared, "")
			if err != nil {
				t.Fatal(err)
			}
			log := &eventLog{}
			(&admission.UpdateChecker{Features: ad, Recorder: log}).ObservePodUpdate(context.Background(), running, tc.updated)
			if strings.Join(log.events, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("events\n got: %q\nwant: %q", log.events, tc.want)
			}
		})
	}
}
