package podstatus

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// Input is what Generate decides a pod's phase and conditions from. Only
// Pod is required.
type Input struct {
	// Pod is the pod as the agent knows it; its Status is the API server's
	// view (readiness gate conditions and other conditions not the agent's
	// are taken from it).
	Pod *v1.Pod
	// Old is the status the agent last generated for the pod (the status
	// manager's), or the pod's API status when there is none. Nil is an
	// empty status.
	Old *v1.PodStatus
	// InitContainers and Containers are the pod's container statuses as
	// the caller converted them from the runtime.
	InitContainers, Containers []v1.ContainerStatus
	// Sandboxes are the runtime's sandboxes of the pod, newest first.
	Sandboxes []*nodekit.SandboxStatus
	// Runtime is the runtime's status of the pod (its containers, newest
	// first), which AllContainersRestarting reads; nil is none.
	Runtime *nodekit.PodStatus
	// Terminal: the pod will not run again.
	Terminal bool
	// Initialized: a regular container of the pod's current sandbox has
	// started (running or exited), so the init containers are done.
	Initialized bool
	// Extra are conditions another part of the agent owns and decides
	// (PodResizePending, PodResizeInProgress, ...). Each replaces any
	// condition of its type from the API status and is kept exactly as
	// given, observedGeneration and lastTransitionTime included.
	Extra []v1.PodCondition
	// Now stamps the lastTransitionTime of the conditions that changed
	// status since Old.
	Now time.Time
}

// Result is the part of a pod's status Generate decides.
type Result struct {
	Phase   v1.PodPhase
	Reason  string
	Message string
	// Conditions: the API status's conditions the agent does not own
	// (readiness gates, ...), Extra, Old's DisruptionTarget, then
	// PodReadyToStartContainers, Initialized, Ready, ContainersReady,
	// PodScheduled and, for a pod with a RestartAllContainers rule,
	// AllContainersRestarting.
	Conditions []v1.PodCondition
}

// Generate computes the pod's phase, with the reason and message that go
// with it, and its conditions, as upstream's generateAPIPodStatus: Phase
// over the container statuses, merged with Old and the API status by
// MergePhase, then the conditions. It does not read the clock; in is not
// modified.
func Generate(in Input) Result {
	pod := in.Pod
	all := make([]v1.ContainerStatus, 0, len(in.InitContainers)+len(in.Containers))
	all = append(all, in.InitContainers...)
	all = append(all, in.Containers...)
	var r Result
	r.Phase = Phase(pod, all, in.Terminal, in.Initialized)
	r.Phase, r.Reason, r.Message = MergePhase(pod, in.Old, r.Phase)

	conds := make([]v1.PodCondition, 0, len(pod.Status.Conditions)+len(in.Extra)+6)
	for _, c := range pod.Status.Conditions {
		if !OwnedByKubelet(c.Type) {
			conds = append(conds, *c.DeepCopy())
		}
	}
	for _, c := range in.Extra {
		conds = Set(conds, *c.DeepCopy())
	}
	if in.Old != nil {
		// DisruptionTarget is added once, when the pod is evicted or shut
		// down; it is carried, not regenerated.
		if c := Find(in.Old.Conditions, v1.DisruptionTarget); c != nil {
			conds = Set(conds, *c.DeepCopy())
		}
	}
	conds = append(conds, ReadyToStartContainers(pod, in.Sandboxes), Initialized(pod, in.Old, all, r.Phase))
	// A readiness gate may name any condition before it, as upstream.
	conds = append(conds, Ready(pod, conds, all, r.Phase))
	conds = append(conds, ContainersReady(pod, all, r.Phase), condition(pod, v1.PodScheduled, true, "", ""))
	if _, _, ok := restartrules.UsesRestartAll(&pod.Spec); ok {
		conds = append(conds, AllContainersRestarting(pod, in.Runtime, in.Old, r.Phase))
	}
	st := v1.PodStatus{Conditions: conds}
	CarryTransitionTimes(in.Old, &st, in.Now)
	r.Conditions = st.Conditions
	return r
}

// UnknownTermination is the state of a container the runtime lost without
// its end being seen: terminated, exit code 137, reason
// ContainerStatusUnknown.
func UnknownTermination() *v1.ContainerStateTerminated {
	return &v1.ContainerStateTerminated{
		ExitCode: ExitCodeUnknownTermination,
		Reason:   ReasonContainerStatusUnknown,
		Message:  MessageContainerNotLocated,
	}
}
