package syncloop

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules/restartrulestest"
)

// TestRestartRulesTable: the sync loop restarts an exited container, and
// computeActions starts it, exactly when the shared table says so (the
// status manager and probe workers run the same table).
func TestRestartRulesTable(t *testing.T) {
	for _, tc := range restartrulestest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"},
				Spec:       v1.PodSpec{RestartPolicy: tc.PodPolicy, Containers: []v1.Container{tc.Container("c"), {Name: "keep", Image: "busybox"}}},
			}
			st := &nodekit.PodStatus{ID: "u", Sandboxes: []*nodekit.SandboxStatus{{ID: "sb", State: nodekit.SandboxReady, IPs: []string{"10.0.0.2"}}},
				Containers: []*nodekit.ContainerStatus{
					{ID: nodekit.ContainerID{Type: "fake", ID: "1"}, Name: "c", State: nodekit.StateExited, ExitCode: int(tc.ExitCode)},
					{ID: nodekit.ContainerID{Type: "fake", ID: "2"}, Name: "keep", State: nodekit.StateRunning},
				}}
			if got := containerShouldStart(pod, &pod.Spec.Containers[0], st.Containers[0]); got != tc.Restarts {
				t.Errorf("containerShouldStart = %v, want %v", got, tc.Restarts)
			}
			a := computeActions(pod, st, probeMap{}, nil)
			started := len(a.ContainersToStart) == 1 && a.ContainersToStart[0] == 0
			if started != tc.Restarts || len(a.ContainersToStart) > 1 {
				t.Errorf("ContainersToStart = %v, want c started: %v", a.ContainersToStart, tc.Restarts)
			}
		})
	}
}
