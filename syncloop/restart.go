package syncloop

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// shouldRestart is whether c runs again after exiting with exitCode: its
// restart rules, its own restart policy, then the pod's (restartrules, which
// the status manager and the probe workers use too).
func shouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int) bool {
	return restartrules.Restarts(c, spec.RestartPolicy, int32(exitCode))
}

// restartOnFailure is whether the pod restarts failed containers at all.
func restartOnFailure(pod *v1.Pod) bool {
	return pod.Spec.RestartPolicy != v1.RestartPolicyNever
}

// containerRestarts is whether container c is started again after it
// failed: its own restartPolicy if it has one (anything but Never), else
// the pod's (anything but Never).
func containerRestarts(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return restartOnFailure(pod)
}

// containerShouldStart decides whether a container that is not running
// should be (re)started, given its newest status.
func containerShouldStart(pod *v1.Pod, c *v1.Container, st *nodekit.ContainerStatus) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if st == nil {
		return true
	}
	switch st.State {
	case nodekit.StateRunning:
		return false
	case nodekit.StateUnknown, nodekit.StateCreated:
		return true
	}
	return shouldRestart(c, &pod.Spec, st.ExitCode)
}
