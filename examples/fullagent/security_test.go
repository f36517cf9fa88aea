package main

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/agenttest"
)

// TestPodSecurity runs pods whose security fields this machine's runtime
// (containerd 1.6, no AppArmor) cannot honour, and one seccompDefault
// pod, through the whole agent: each is refused as upstream kubelet
// refuses it, or runs confined.
func TestPodSecurity(t *testing.T) {
	// containerd 1.6 on both passes of make test: the refusals below are
	// those of a runtime without user namespaces and without the
	// supplementalGroupsPolicy feature (criruntime's TestSecurityIntegration
	// covers containerd 2's support).
	e := startEnv(t, envOption{config: "seccompDefault: true\n", containerd: agenttest.ContainerdVersion16})

	t.Run("seccompDefault confines a pod that names no profile", func(t *testing.T) {
		p := simplePod("seccomp-default", v1.RestartPolicyNever, "grep Seccomp: /proc/self/status > /dev/termination-log")
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, time.Minute, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
		if cs := containerStatus(got, "app"); cs == nil || cs.State.Terminated == nil || !strings.Contains(cs.State.Terminated.Message, "Seccomp:\t2") {
			t.Fatalf("status: %s", describeStatus(got))
		}
	})

	t.Run("AppArmor profile, refused on a host without AppArmor", func(t *testing.T) {
		p := simplePod("apparmor", v1.RestartPolicyNever, "true")
		p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
		e.createPod(t, p)
		if admission.AppArmorHostEnabled() {
			// A host that enforces AppArmor admits the pod.
			e.waitPod(t, p.Name, time.Minute, "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
			return
		}
		got := e.waitPod(t, p.Name, 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if got.Status.Reason != "AppArmor" || got.Status.Message != "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Fatalf("status: %s", describeStatus(got))
		}
	})

	t.Run("supplementalGroupsPolicy Strict on containerd 1.6", func(t *testing.T) {
		// The pod TestPodSecurityContainerd2 runs on containerd 2.
		p := groupsPod("strict", ptr.To(v1.SupplementalGroupsPolicyStrict))
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, 30*time.Second, "rejected", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if got.Status.Reason != "SupplementalGroupsPolicyNotSupported" || got.Status.Message != "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node" {
			t.Fatalf("status: %s", describeStatus(got))
		}
	})

	t.Run("hostUsers false on containerd 1.6", func(t *testing.T) {
		p := usernsPod("userns") // the pod TestPodSecurityContainerd2 runs on containerd 2
		e.createPod(t, p)
		const want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		var seen string
		got := e.waitPod(t, p.Name, time.Minute, "FailedCreatePodSandBox event", func(p *v1.Pod) bool {
			evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", p.Name).String()})
			if err != nil {
				return false
			}
			for _, ev := range evs.Items {
				if ev.Reason == "FailedCreatePodSandBox" {
					seen = ev.Message
					return true
				}
			}
			return false
		})
		if seen != want {
			t.Fatalf("event message %q, want %q", seen, want)
		}
		// As upstream, the pod is not rejected: it stays Pending, its
		// container waiting in ContainerCreating, and the sandbox is retried.
		if got.Status.Phase != v1.PodPending {
			t.Fatalf("status: %s", describeStatus(got))
		}
		if cs := containerStatus(got, "app"); cs != nil && (cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating") {
			t.Fatalf("container status: %s", describeStatus(got))
		}
		t.Logf("pod status: %s", describeStatus(got))
	})
}
