package probes

import (
	"testing"

	"github.com/nodekit/nodekit/internal/restartrules/restartrulestest"
)

// TestRestartRulesAgreeWithSyncLoop: a probe worker waits for an exited
// container exactly when the sync loop restarts it (the shared table).
func TestRestartRulesAgreeWithSyncLoop(t *testing.T) {
	for _, tc := range restartrulestest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			f := newFixture(t)
			pod := testPod("p1", nil, execProbe(nil), nil)
			pod.Spec.RestartPolicy = tc.PodPolicy
			c := tc.Container("app")
			c.ReadinessProbe = pod.Spec.Containers[0].ReadinessProbe
			pod.Spec.Containers[0] = c
			w := f.worker(pod, Readiness)
			if got := w.restarts(tc.ExitCode); got != tc.Restarts {
				t.Errorf("restarts = %v, want %v", got, tc.Restarts)
			}
		})
	}
}
