package podstatus

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// IsTerminal reports whether p is Succeeded or Failed: a pod in such a
// phase never runs again and never leaves it.
func IsTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

func statusOf(statuses []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// lastExit is how a container's status says it last ended: its current
// state if terminated, else its last termination while it waits to run
// again. nil when it has not ended.
func lastExit(st *v1.ContainerStatus) *v1.ContainerStateTerminated {
	switch {
	case st.State.Terminated != nil:
		return st.State.Terminated
	case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
		return st.LastTerminationState.Terminated
	}
	return nil
}

// restartsAfter is whether a container that ended as t runs again: by its
// rules and policies, or because the agent removed it to restart all the
// pod's containers (reason RestartingAllContainers), as upstream.
func restartsAfter(c *v1.Container, spec *v1.PodSpec, t *v1.ContainerStateTerminated) bool {
	return t.Reason == ReasonRestartingAllContainers || restartrules.Restarts(c, spec.RestartPolicy, t.ExitCode)
}

// phaseCounts tallies a pod's containers by what their statuses show.
type phaseCounts struct {
	// init containers that are not sidecars
	pendingInit, failedInitFinal int
	// sidecars that have not started
	pendingSidecars int
	// sidecars and regular containers
	unknown, running, waiting int
	// regular containers only
	stopped, stoppedFinal, succeeded int
}

func (n *phaseCounts) initContainer(c *v1.Container, spec *v1.PodSpec, st *v1.ContainerStatus) {
	if st == nil || st.State.Running != nil {
		n.pendingInit++
		return
	}
	t := lastExit(st)
	switch {
	case t == nil:
		n.pendingInit++
	case t.ExitCode != 0 && !restartsAfter(c, spec, t):
		n.failedInitFinal++
	}
}

func (n *phaseCounts) sidecar(st *v1.ContainerStatus) {
	switch {
	case st == nil:
		n.unknown++
	case st.State.Running != nil:
		n.running++
		if st.Started == nil || !*st.Started {
			n.pendingSidecars++
		}
	case st.State.Terminated != nil:
		// A stopped sidecar does not count toward the phase.
	case st.State.Waiting != nil:
		if st.LastTerminationState.Terminated == nil {
			n.pendingSidecars++
			n.waiting++
		}
	default:
		n.pendingSidecars++
		n.unknown++
	}
}

func (n *phaseCounts) container(c *v1.Container, spec *v1.PodSpec, st *v1.ContainerStatus) {
	if st == nil {
		n.unknown++
		return
	}
	if st.State.Running != nil {
		n.running++
		return
	}
	t := lastExit(st)
	switch {
	case t != nil:
		n.stopped++
		if !restartsAfter(c, spec, t) {
			n.stoppedFinal++
		}
		if st.State.Terminated != nil && t.ExitCode == 0 {
			n.succeeded++
		}
	case st.State.Waiting != nil:
		n.waiting++
	default:
		n.unknown++
	}
}

// Phase is the pod's phase from its init and regular container statuses
// (in any order, one per container name), as upstream's getPhase with
// container restart rules on. terminal says the pod will not run again (it
// is being deleted, evicted, or its containers stopped for good);
// initialized that a regular container of the pod's current sandbox has
// started, so sidecars restarting do not put the pod back to Pending.
//
// An init container that failed and may not restart makes the pod Failed.
// Pending while an init container has not completed, a sidecar has not
// started (before initialization) or a container waits for its first
// start; Running while a container runs and all are known; once every
// container has stopped, Running if one of them restarts, else Succeeded
// when all exited 0 and Failed otherwise. A terminal pod that is not static
// is Succeeded or Failed by its exit codes alone.
func Phase(pod *v1.Pod, statuses []v1.ContainerStatus, terminal, initialized bool) v1.PodPhase {
	spec := &pod.Spec
	var n phaseCounts
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if podutil.IsSidecar(c) {
			n.sidecar(statusOf(statuses, c.Name))
		} else {
			n.initContainer(c, spec, statusOf(statuses, c.Name))
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		n.container(c, spec, statusOf(statuses, c.Name))
	}
	switch {
	case n.failedInitFinal > 0:
		return v1.PodFailed
	case n.pendingInit > 0, n.pendingSidecars > 0 && !initialized, n.waiting > 0:
		return v1.PodPending
	case n.running > 0 && n.unknown == 0:
		return v1.PodRunning
	case n.running == 0 && n.stopped > 0 && n.unknown == 0:
		// A terminal pod's containers do not restart, whatever their
		// policy; but static pods never get a terminal phase from
		// termination alone (upstream's TODO #116484).
		final := terminal && !podutil.IsStatic(pod)
		switch {
		case !final && n.stopped != n.stoppedFinal:
			return v1.PodRunning
		case n.stopped == n.succeeded:
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	return v1.PodPending
}

// MergePhase folds a generated phase into what the pod already had, as
// upstream's generateAPIPodStatus: a terminal phase in old (the agent's last
// status) or in the API's status (pod.Status) is never left; the reason and
// message of old carry over while the phase stays the same (falling back to
// the API's); with a new phase they are empty. old may be nil.
func MergePhase(pod *v1.Pod, old *v1.PodStatus, phase v1.PodPhase) (v1.PodPhase, string, string) {
	if old == nil {
		old = &v1.PodStatus{}
	}
	api := &pod.Status
	if !IsTerminal(phase) {
		switch {
		case IsTerminal(old.Phase):
			phase = old.Phase
		case IsTerminal(api.Phase):
			phase = api.Phase
		}
	}
	var reason, message string
	if phase == old.Phase {
		reason, message = old.Reason, old.Message
		if reason == "" {
			reason = api.Reason
		}
		if message == "" {
			message = api.Message
		}
	}
	if IsTerminal(api.Phase) && phase != api.Phase {
		phase = api.Phase // the API server refuses any other
	}
	return phase, reason, message
}
