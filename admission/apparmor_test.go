package admission_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
)

func TestAppArmor(t *testing.T) {
	const notEnabled = "Cannot enforce AppArmor: AppArmor is not enabled on the host"
	profile := func(typ v1.AppArmorProfileType, name ...string) *v1.AppArmorProfile {
		p := &v1.AppArmorProfile{Type: typ}
		if len(name) > 0 {
			p.LocalhostProfile = &name[0]
		}
		return p
	}
	onPod := func(p *v1.AppArmorProfile) func(*v1.Pod) {
		return func(pod *v1.Pod) { pod.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: p} }
	}
	onInit := func(p *v1.AppArmorProfile) func(*v1.Pod) {
		return func(pod *v1.Pod) {
			pod.Spec.InitContainers = []v1.Container{{Name: "init", SecurityContext: &v1.SecurityContext{AppArmorProfile: p}}}
		}
	}
	annotated := func(value string) func(*v1.Pod) {
		return func(pod *v1.Pod) {
			pod.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + pod.Spec.Containers[0].Name: value}
		}
	}
	for _, tc := range []struct {
		name    string
		enabled bool
		pod     *v1.Pod
		want    nodekit.Decision
	}{
		{"nothing asked, no AppArmor", false, pod("p", ""), nodekit.Admitted},
		{"unconfined on pod, no AppArmor", false, pod("p", "", onPod(profile(v1.AppArmorProfileTypeUnconfined))), nodekit.Admitted},
		{"unconfined annotation, no AppArmor", false, pod("p", "", annotated("unconfined")), nodekit.Admitted},
		{"runtime default on pod, no AppArmor", false, pod("p", "", onPod(profile(v1.AppArmorProfileTypeRuntimeDefault))), reject("AppArmor", notEnabled)},
		{"localhost on init container, no AppArmor", false, pod("p", "", onInit(profile(v1.AppArmorProfileTypeLocalhost, "k8s-deny"))), reject("AppArmor", notEnabled)},
		{"deprecated annotation, no AppArmor", false, pod("p", "", annotated("localhost/k8s-deny")), reject("AppArmor", notEnabled)},
		{"running pod is not rechecked", false, pod("p", "", onPod(profile(v1.AppArmorProfileTypeRuntimeDefault)), withPhase(v1.PodRunning)), nodekit.Admitted},
		{"runtime default, AppArmor on", true, pod("p", "", onPod(profile(v1.AppArmorProfileTypeRuntimeDefault))), nodekit.Admitted},
		{"empty localhost name, AppArmor on", true, pod("p", "", annotated("localhost/")),
			reject("AppArmor", `Cannot enforce AppArmor: invalid empty AppArmor profile name: "&AppArmorProfile{Type:Localhost,LocalhostProfile:*,}"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := admission.NewAppArmor(tc.enabled).Admit(context.Background(), nodekit.AdmitRequest{Pod: tc.pod})
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
