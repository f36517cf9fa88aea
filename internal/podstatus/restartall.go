package podstatus

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// Reasons and messages of a pod restarting all its containers in place
// (RestartAllContainersOnContainerExits), as kubelet v1.37 writes them.
const (
	// ReasonRestartAllContainersStarted goes with AllContainersRestarting
	// True: a container exited with a code whose first matching rule has
	// action RestartAllContainers.
	ReasonRestartAllContainersStarted = "RestartAllContainersStarted"
	// MessageRestartAllContainersStarted goes with it.
	MessageRestartAllContainersStarted = "container exited with restart policy rule"
	// ReasonRestartingAllContainers is the waiting reason, and the reason
	// of the last termination, of a container the agent removed to restart
	// all the pod's containers.
	ReasonRestartingAllContainers = "RestartingAllContainers"
	// MessageRestartingAllContainers goes with it.
	MessageRestartingAllContainers = "The container is removed because RestartAllContainers in place"
	// ExitCodeRestartingAllContainers is the exit code recorded for such a
	// removed container.
	ExitCodeRestartingAllContainers = 137
)

// RestartingAll reports whether the pod's containers are being restarted
// all together, as upstream's ShouldAllContainersRestart: old (the agent's
// last status) has AllContainersRestarting True, or the newest instance in
// the runtime of an init or regular container exited, or old shows one
// terminated, with a code whose first matching rule of that container has
// action RestartAllContainers. runtime and old may be nil.
func RestartingAll(pod *v1.Pod, runtime *nodekit.PodStatus, old *v1.PodStatus) bool {
	if old != nil {
		if c := Find(old.Conditions, v1.AllContainersRestarting); c != nil && c.Status == v1.ConditionTrue {
			return true
		}
	}
	var oldStatuses []v1.ContainerStatus
	if old != nil {
		oldStatuses = append(append(oldStatuses, old.InitContainerStatuses...), old.ContainerStatuses...)
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if rc := runtime.FindContainer(c.Name); rc != nil && rc.State == nodekit.StateExited &&
				restartrules.TriggersRestartAll(c, int32(rc.ExitCode)) {
				return true
			}
			if st := statusOf(oldStatuses, c.Name); st != nil && st.State.Terminated != nil &&
				restartrules.TriggersRestartAll(c, st.State.Terminated.ExitCode) {
				return true
			}
		}
	}
	return false
}

// AllRemoved reports whether the runtime holds no instance of any init or
// regular container of the pod: a restart of all containers has removed
// them all and they may start again.
func AllRemoved(pod *v1.Pod, runtime *nodekit.PodStatus) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if runtime.FindContainer(list[i].Name) != nil {
				return false
			}
		}
	}
	return true
}

// AllContainersRestarting is the condition of a pod that may restart all
// its containers (a container has a RestartAllContainers rule; Generate
// adds it only then), as upstream: False with PodCompleted or PodFailed in
// a terminal phase; True with RestartAllContainersStarted while the pod is
// RestartingAll and some of its containers are still in the runtime; False
// otherwise, with no reason, once they are all removed (the containers
// then start again, init containers first). It carries no
// observedGeneration, as upstream's.
func AllContainersRestarting(pod *v1.Pod, runtime *nodekit.PodStatus, old *v1.PodStatus, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse}
	switch {
	case phase == v1.PodSucceeded:
		c.Reason = ReasonPodCompleted
	case phase == v1.PodFailed:
		c.Reason = ReasonPodFailed
	case RestartingAll(pod, runtime, old) && !AllRemoved(pod, runtime):
		c.Status, c.Reason, c.Message = v1.ConditionTrue, ReasonRestartAllContainersStarted, MessageRestartAllContainersStarted
	}
	return c
}

// IsRestartingAll reports whether st says the pod's containers are being
// killed and removed to restart them all (AllContainersRestarting True):
// the sync loop then resets the containers instead of syncing them.
func IsRestartingAll(st *v1.PodStatus) bool {
	c := Find(st.Conditions, v1.AllContainersRestarting)
	return c != nil && c.Status == v1.ConditionTrue
}
