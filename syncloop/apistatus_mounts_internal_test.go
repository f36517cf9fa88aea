package syncloop

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

// TestVolumeMountStatuses: a waiting container reports its volume mounts
// from the spec (a read-only one with recursiveReadOnly Disabled), and a
// running one carries those of its last status, as upstream; a running
// container with no last status reports none.
func TestVolumeMountStatuses(t *testing.T) {
	now := time.Unix(1700000000, 0)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox", VolumeMounts: []v1.VolumeMount{
			{Name: "data", MountPath: "/data"}, {Name: "cfg", MountPath: "/cfg", ReadOnly: true},
		}}}},
	}
	disabled := v1.RecursiveReadOnlyDisabled
	want := []v1.VolumeMountStatus{{Name: "data", MountPath: "/data"}, {Name: "cfg", MountPath: "/cfg", ReadOnly: true, RecursiveReadOnly: &disabled}}
	waiting := apiStatus(statusInput{pod: pod, now: now})
	if got := waiting.ContainerStatuses[0].VolumeMounts; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("waiting container's volume mounts = %+v, want %+v", got, want)
	}
	rt := &nodekit.PodStatus{ID: "u",
		Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}},
		Containers: []*nodekit.ContainerStatus{{ID: nodekit.ContainerID{Type: "fake", ID: "1"}, Name: "app",
			State: nodekit.StateRunning, CreatedAt: now, StartedAt: now}}}
	running := apiStatus(statusInput{pod: pod, runtime: rt, old: waiting, now: now})
	if got := running.ContainerStatuses[0].VolumeMounts; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("running container's volume mounts = %+v, want those of its last status %+v", got, want)
	}
	if got := apiStatus(statusInput{pod: pod, runtime: rt, now: now}).ContainerStatuses[0].VolumeMounts; got != nil {
		t.Errorf("running container without a last status reports %+v, want none (as upstream)", got)
	}
	// On a runtime handler with recursive read-only mounts, a mount asking
	// for IfPossible is Enabled; Disabled ones stay so.
	pod.Spec.Containers[0].VolumeMounts[1].RecursiveReadOnly = ptr.To(v1.RecursiveReadOnlyIfPossible)
	enabled := v1.RecursiveReadOnlyEnabled
	for supported, mode := range map[bool]*v1.RecursiveReadOnlyMode{true: &enabled, false: &disabled} {
		got := apiStatus(statusInput{pod: pod, now: now, rro: supported}).ContainerStatuses[0].VolumeMounts
		if len(got) != 2 || got[1].RecursiveReadOnly == nil || *got[1].RecursiveReadOnly != *mode || got[0].RecursiveReadOnly != nil {
			t.Errorf("IfPossible with support %v: %+v, want %s", supported, got, *mode)
		}
	}
}
