package statusmgr

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// Annotations the pod sources stamp on pods (see podconfig).
const (
	annotationConfigSource = podutil.ConfigSourceAnnotation
	annotationConfigHash   = podutil.ConfigHashAnnotation
)

// maxTerminationMessageBytes is shared by all containers of a pod.
const maxTerminationMessageBytes = 12 * 1024

// findContainerStatus returns the status of the container with the given
// "type://id" among the regular and init containers of st.
func findContainerStatus(st *v1.PodStatus, id string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				return &list[i]
			}
		}
	}
	return nil
}

func statusByName(list []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range list {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}

func specByName(list []v1.Container, name string) (v1.Container, bool) {
	for _, c := range list {
		if c.Name == name {
			return c, true
		}
	}
	return v1.Container{}, false
}

// mayRestart reports whether a container that exited with code is allowed
// to run again, by the rule the sync loop follows (restartrules).
func mayRestart(c v1.Container, spec *v1.PodSpec, code int32) bool {
	return restartrules.Restarts(&c, spec.RestartPolicy, code)
}

// checkContainerTransitions refuses a status in which a container that had
// terminated for good (its restart policy does not allow it to run again) is
// running or waiting again. A pod that may restart all its containers (a
// container has a RestartAllContainers rule) is not checked, as upstream:
// any of its containers may leave the terminated state.
func checkContainerTransitions(old, next *v1.PodStatus, spec *v1.PodSpec) error {
	if spec.RestartPolicy == v1.RestartPolicyAlways {
		return nil
	}
	if _, _, ok := restartrules.UsesRestartAll(spec); ok {
		return nil
	}
	check := func(kind string, olds, nexts []v1.ContainerStatus, specs []v1.Container, skipSidecars bool) error {
		for _, o := range olds {
			if o.State.Terminated == nil {
				continue
			}
			c, found := specByName(specs, o.Name)
			if skipSidecars && found && podutil.IsSidecar(&c) {
				continue
			}
			code := o.State.Terminated.ExitCode
			if code != 0 && spec.RestartPolicy == v1.RestartPolicyOnFailure {
				continue
			}
			if found && mayRestart(c, spec, code) {
				continue
			}
			if n, ok := statusByName(nexts, o.Name); ok && n.State.Terminated == nil {
				return fmt.Errorf("%w: %s %q terminated with exit code %d and may not run again (restartPolicy %s)",
					ErrIllegalTransition, kind, o.Name, code, spec.RestartPolicy)
			}
		}
		return nil
	}
	if err := check("container", old.ContainerStatuses, next.ContainerStatuses, spec.Containers, false); err != nil {
		return err
	}
	return check("init container", old.InitContainerStatuses, next.InitContainerStatuses, spec.InitContainers, true)
}

// keepTerminalPhase stops a pod from leaving a terminal phase: the API
// server refuses that transition, and a terminal pod never runs again.
func keepTerminalPhase(old, next *v1.PodStatus) {
	if podstatus.IsTerminal(old.Phase) && next.Phase != old.Phase {
		next.Phase, next.Reason, next.Message = old.Phase, old.Reason, old.Message
	}
}

// recomputeReadiness rewrites Ready and ContainersReady after a container's
// readiness changed, by the generator the sync loop uses.
func recomputeReadiness(pod *v1.Pod, st *v1.PodStatus) {
	all := make([]v1.ContainerStatus, 0, len(st.InitContainerStatuses)+len(st.ContainerStatuses))
	all = append(all, st.InitContainerStatuses...)
	all = append(all, st.ContainerStatuses...)
	st.Conditions = podstatus.Set(st.Conditions, podstatus.Ready(pod, st.Conditions, all, st.Phase))
	st.Conditions = podstatus.Set(st.Conditions, podstatus.ContainersReady(pod, all, st.Phase))
}

// hasInitialized reports whether the pod ever got past its init
// containers, judging from st: only then are missing regular containers
// counted as failed at termination.
func hasInitialized(pod *v1.Pod, st *v1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, s := range st.ContainerStatuses {
		if s.LastTerminationState.Terminated != nil || s.State.Waiting == nil {
			return true
		}
	}
	n := len(st.InitContainerStatuses)
	if n == 0 {
		return false
	}
	last := st.InitContainerStatuses[n-1]
	c, ok := specByName(pod.Spec.InitContainers, last.Name)
	if !ok {
		return false
	}
	if podutil.IsSidecar(&c) {
		return last.State.Running != nil && last.Started != nil && *last.Started
	}
	for _, t := range []*v1.ContainerStateTerminated{last.LastTerminationState.Terminated, last.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// triedPrefix is how many of the init container statuses ever tried to
// start: all but the trailing run of never-started waiting ones, and at
// least one.
func triedPrefix(list []v1.ContainerStatus) int {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].State.Waiting == nil || list[i].LastTerminationState.Terminated != nil {
			return i + 1
		}
	}
	return min(1, len(list))
}

// markTerminated turns a container that is not terminated into one that
// terminated for an unknown reason.
func markTerminated(s *v1.ContainerStatus) {
	if s.State.Terminated != nil {
		return
	}
	s.State = v1.ContainerState{Terminated: podstatus.UnknownTermination()}
}

// normalize rounds timestamps to seconds (the API server stores no more),
// truncates termination messages to the pod's share, and orders container
// statuses (regular and ephemeral by name, init by spec order), so a status
// read back from the API server compares equal to the one sent.
func normalize(pod *v1.Pod, st *v1.PodStatus) {
	perContainer := maxTerminationMessageBytes
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		perContainer /= n
	}
	round := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	state := func(s *v1.ContainerState) {
		if s.Running != nil {
			round(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			round(&s.Terminated.StartedAt)
			round(&s.Terminated.FinishedAt)
			if len(s.Terminated.Message) > perContainer {
				s.Terminated.Message = s.Terminated.Message[:perContainer]
			}
		}
	}
	if st.StartTime != nil {
		round(st.StartTime)
	}
	for i := range st.Conditions {
		round(&st.Conditions[i].LastProbeTime)
		round(&st.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	byName := func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) }
	slices.SortStableFunc(st.ContainerStatuses, byName)
	slices.SortStableFunc(st.EphemeralContainerStatuses, byName)
	order := make(map[string]int, len(pod.Spec.InitContainers))
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	slices.SortStableFunc(st.InitContainerStatuses, func(a, b v1.ContainerStatus) int {
		ia, oka := order[a.Name]
		ib, okb := order[b.Name]
		switch {
		case oka && okb:
			return ia - ib
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
}

// sameKubeletStatus reports whether a and b agree on everything the node
// agent owns: conditions it owns or shares compared by status, reason and
// message (not times), everything else but the resource-claim statuses
// compared exactly. Both must be normalized.
func sameKubeletStatus(a, b *v1.PodStatus) bool {
	owned := func(st *v1.PodStatus) map[v1.PodConditionType]v1.PodCondition {
		m := map[v1.PodConditionType]v1.PodCondition{}
		for _, c := range st.Conditions {
			if podstatus.OwnedByKubelet(c.Type) || podstatus.SharedWithKubelet(c.Type) {
				m[c.Type] = c
			}
		}
		return m
	}
	ca, cb := owned(a), owned(b)
	if len(ca) != len(cb) {
		return false
	}
	for t, x := range ca {
		y, ok := cb[t]
		if !ok || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	ac := *a
	ac.Conditions = b.Conditions
	ac.ResourceClaimStatuses = b.ResourceClaimStatuses
	ac.ExtendedResourceClaimStatus = b.ExtendedResourceClaimStatus
	ac.NodeAllocatableResourceClaimStatuses = b.NodeAllocatableResourceClaimStatuses
	return equality.Semantic.DeepEqual(&ac, b)
}

// couldHaveRunningContainers reports whether st still shows a running
// container: a terminal phase is not published while one does.
func couldHaveRunningContainers(st *v1.PodStatus) bool {
	for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.State.Running != nil {
				return true
			}
		}
	}
	return false
}
