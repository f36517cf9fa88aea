package syncloop

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

// TestAPIStatusCarriesContainerUser: each container status's user is the
// runtime's (init, regular and ephemeral containers alike, as upstream's
// convertToAPIContainerStatuses), a copy, and absent when the runtime
// reports none (containerd 1.6).
func TestAPIStatusCarriesContainerUser(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
		Spec: v1.PodSpec{
			InitContainers:      []v1.Container{{Name: "init", Image: "busybox"}},
			Containers:          []v1.Container{{Name: "app", Image: "busybox"}, {Name: "old", Image: "busybox"}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}},
		},
	}
	user := func(groups ...int64) *v1.ContainerUser {
		return &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: groups}}
	}
	now := time.Unix(1700000000, 0)
	running := func(id, name string, u *v1.ContainerUser) *nodekit.ContainerStatus {
		return &nodekit.ContainerStatus{ID: nodekit.ContainerID{Type: "fake", ID: id}, Name: name, State: nodekit.StateRunning, CreatedAt: now, StartedAt: now, User: u}
	}
	done := running("1", "init", user(1000, 60000))
	done.State, done.FinishedAt = nodekit.StateExited, now
	rt := &nodekit.PodStatus{ID: "u", Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}},
		Containers: []*nodekit.ContainerStatus{
			done,
			running("2", "app", user(1000, 50000, 60000)),
			running("3", "old", nil),
			running("4", "debug", user(1000)),
		}}
	s := apiStatus(statusInput{pod: pod, runtime: rt, now: now})
	want := map[string]*v1.ContainerUser{"init": user(1000, 60000), "app": user(1000, 50000, 60000), "old": nil, "debug": user(1000)}
	got := map[string]*v1.ContainerUser{}
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for _, cs := range list {
			got[cs.Name] = cs.User
		}
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("users %+v, want %+v", got, want)
	}
	rt.Containers[1].User.Linux.SupplementalGroups[0] = 0
	if g := got["app"].Linux.SupplementalGroups[0]; g != 1000 {
		t.Fatalf("the status shares the runtime's user: group %d after the runtime's copy changed", g)
	}
}
