package statusmgr

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/restartrules/restartrulestest"
)

// TestRestartRulesAgreeWithSyncLoop runs the restart table the sync loop
// and the probe workers are tested against: a container that terminated
// may be shown running again exactly when the table says it restarts.
// Pods whose sandbox may be re-created (restartPolicy Always, or OnFailure
// after a failure) rerun containers whatever their exit, so the manager
// accepts any transition for them; those rows are not this check's.
func TestRestartRulesAgreeWithSyncLoop(t *testing.T) {
	for _, tc := range restartrulestest.Cases() {
		if tc.PodPolicy == v1.RestartPolicyAlways || (tc.PodPolicy == v1.RestartPolicyOnFailure && tc.ExitCode != 0) {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			m, _, _ := newTestManager(t, Config{})
			pod := testPod("p")
			pod.Spec.RestartPolicy = tc.PodPolicy
			pod.Spec.Containers = []v1.Container{tc.Container("c")}
			mustSet(t, m, pod, runningStatus(exited("c", tc.ExitCode)))
			err := m.SetPodStatus(pod, runningStatus(running("c", false)))
			if tc.Restarts && err != nil {
				t.Fatalf("restart refused: %v", err)
			}
			if !tc.Restarts && !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("SetPodStatus = %v, want ErrIllegalTransition", err)
			}
		})
	}
}
