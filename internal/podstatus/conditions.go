package podstatus

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// OwnedByKubelet reports whether the node agent owns pod conditions of type
// t: it generates them, and its value replaces whatever the API server holds.
func OwnedByKubelet(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady,
		v1.PodResizeInProgress, v1.PodResizePending, v1.PodReadyToStartContainers,
		v1.AllContainersRestarting:
		return true
	}
	return false
}

// SharedWithKubelet reports whether others write conditions of type t too
// and the agent adds its own only when it has something to say
// (DisruptionTarget).
func SharedWithKubelet(t v1.PodConditionType) bool { return t == v1.DisruptionTarget }

// condition builds a generated condition of the pod. Every condition the
// agent generates carries the pod's generation (PodObservedGenerationTracking).
func condition(pod *v1.Pod, t v1.PodConditionType, ok bool, reason, message string) v1.PodCondition {
	s := v1.ConditionFalse
	if ok {
		s = v1.ConditionTrue
	}
	return v1.PodCondition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: pod.Generation}
}

// Find returns the condition of type t in conds, or nil.
func Find(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// Set replaces the condition of c's type in conds, or appends c.
func Set(conds []v1.PodCondition, c v1.PodCondition) []v1.PodCondition {
	if old := Find(conds, c.Type); old != nil {
		*old = c
		return conds
	}
	return append(conds, c)
}

// ReadyToStartContainers is True when the pod has a sandbox its containers
// can start in: exactly one ready sandbox, the newest, in the pod's network
// mode and, off the host network, with an IP. Otherwise it is False with
// reason PodSandboxNotReady and a message naming why a new sandbox is
// needed. sandboxes are the runtime's, newest first.
func ReadyToStartContainers(pod *v1.Pod, sandboxes []*nodekit.SandboxStatus) v1.PodCondition {
	msg := sandboxProblem(pod, sandboxes)
	if msg == "" {
		return condition(pod, v1.PodReadyToStartContainers, true, "", "")
	}
	return condition(pod, v1.PodReadyToStartContainers, false, ReasonPodSandboxNotReady, msg)
}

func sandboxProblem(pod *v1.Pod, sandboxes []*nodekit.SandboxStatus) string {
	if len(sandboxes) == 0 {
		return MessageNoSandbox
	}
	ready := 0
	for _, sb := range sandboxes {
		if sb.State == nodekit.SandboxReady {
			ready++
		}
	}
	newest := sandboxes[0]
	switch {
	case ready > 1:
		return MessageMultipleSandboxes
	case newest.State != nodekit.SandboxReady:
		return MessageSandboxNotReady
	case newest.HostNetwork != pod.Spec.HostNetwork:
		return MessageNetworkModeChanged
	case !pod.Spec.HostNetwork && len(newest.IPs) == 0:
		return MessageSandboxNoIPAddress
	}
	return ""
}

// namesMessage joins the "containers with unknown status" and "containers
// with <what> status" parts of a condition message, "" when both are empty.
func namesMessage(unknown, bad []string, what string) string {
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(bad) > 0 {
		parts = append(parts, fmt.Sprintf("containers with %s status: %s", what, bad))
	}
	return strings.Join(parts, ", ")
}

// anyRegularStarted reports whether a status shows a regular container
// running or terminated.
func anyRegularStarted(spec *v1.PodSpec, statuses []v1.ContainerStatus) bool {
	for i := range spec.Containers {
		st := statusOf(statuses, spec.Containers[i].Name)
		if st != nil && (st.State.Running != nil || st.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// Initialized is True once every init container completed (a sidecar:
// started), a regular container has started, or the pod succeeded; it
// stays True once old had it True. Otherwise False with reason
// ContainersNotInitialized naming the init containers of unknown and
// incomplete status. statuses holds init and regular container statuses;
// nil means none is known. old may be nil.
func Initialized(pod *v1.Pod, old *v1.PodStatus, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil && len(pod.Spec.InitContainers) > 0 {
		return condition(pod, v1.PodInitialized, false, ReasonUnknownContainerStatuses, "")
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := statusOf(statuses, c.Name)
		switch {
		case st == nil:
			unknown = append(unknown, c.Name)
		case podutil.IsSidecar(c) && (st.Started == nil || !*st.Started):
			incomplete = append(incomplete, c.Name)
		case !podutil.IsSidecar(c) && !st.Ready:
			incomplete = append(incomplete, c.Name)
		}
	}
	switch {
	case phase == v1.PodSucceeded && len(unknown) == 0:
		return condition(pod, v1.PodInitialized, true, ReasonPodCompleted, "")
	case anyRegularStarted(&pod.Spec, statuses):
		return condition(pod, v1.PodInitialized, true, "", "")
	}
	msg := namesMessage(unknown, incomplete, "incomplete")
	if msg == "" {
		return condition(pod, v1.PodInitialized, true, "", "")
	}
	// A pod that was initialized stays so while its init containers rerun
	// (RestartAllContainersOnContainerExits is on in v1.37).
	if old != nil {
		if c := Find(old.Conditions, v1.PodInitialized); c != nil && c.Status == v1.ConditionTrue {
			return condition(pod, v1.PodInitialized, true, "", "")
		}
	}
	return condition(pod, v1.PodInitialized, false, ReasonContainersNotInitialized, msg)
}

// ContainersReady is True when every regular container and every sidecar
// is ready. Otherwise False: PodCompleted when the pod succeeded (all
// containers known), PodFailed when it failed, UnknownContainerStatuses
// when statuses is nil, else ContainersNotReady naming the containers of
// unknown and of unready status. statuses holds init and regular container
// statuses.
func ContainersReady(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil {
		return condition(pod, v1.ContainersReady, false, ReasonUnknownContainerStatuses, "")
	}
	var unknown, unready []string
	visit := func(c *v1.Container) {
		switch st := statusOf(statuses, c.Name); {
		case st == nil:
			unknown = append(unknown, c.Name)
		case !st.Ready:
			unready = append(unready, c.Name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podutil.IsSidecar(&pod.Spec.InitContainers[i]) {
			visit(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	switch {
	case phase == v1.PodSucceeded && len(unknown) == 0, phase == v1.PodFailed:
		return terminalReadiness(pod, v1.ContainersReady, phase)
	}
	if msg := namesMessage(unknown, unready, "unready"); msg != "" {
		return condition(pod, v1.ContainersReady, false, ReasonContainersNotReady, msg)
	}
	return condition(pod, v1.ContainersReady, true, "", "")
}

// Ready is ContainersReady's status, reason and message while that is not
// True; then True once the condition of every readiness gate is True in
// conds, else False with reason ReadinessGatesNotReady and a message per
// gate, telling a missing condition from one that is not True.
func Ready(pod *v1.Pod, conds []v1.PodCondition, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	cr := ContainersReady(pod, statuses, phase)
	if cr.Status != v1.ConditionTrue {
		return condition(pod, v1.PodReady, false, cr.Reason, cr.Message)
	}
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		switch c := Find(conds, g.ConditionType); {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
		case c.Status != v1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), c.Status))
		}
	}
	if len(msgs) > 0 {
		return condition(pod, v1.PodReady, false, ReasonReadinessGatesNotReady, strings.Join(msgs, ", "))
	}
	return condition(pod, v1.PodReady, true, "", "")
}

func terminalReadiness(pod *v1.Pod, t v1.PodConditionType, phase v1.PodPhase) v1.PodCondition {
	reason := ""
	switch phase {
	case v1.PodSucceeded:
		reason = ReasonPodCompleted
	case v1.PodFailed:
		reason = ReasonPodFailed
	}
	return condition(pod, t, false, reason, "")
}

// ForceTerminalReadiness makes a status in a terminal phase show neither
// Ready nor ContainersReady True: if either is, both are replaced (or
// added) as False with reason PodCompleted or PodFailed. Readiness can lag
// the phase (a probe result not yet in); a terminal pod must not look
// ready. It does nothing to a status that is not terminal.
func ForceTerminalReadiness(pod *v1.Pod, st *v1.PodStatus) {
	if !IsTerminal(st.Phase) {
		return
	}
	isTrue := func(t v1.PodConditionType) bool {
		c := Find(st.Conditions, t)
		return c != nil && c.Status == v1.ConditionTrue
	}
	if !isTrue(v1.ContainersReady) && !isTrue(v1.PodReady) {
		return
	}
	st.Conditions = Set(st.Conditions, terminalReadiness(pod, v1.ContainersReady, st.Phase))
	st.Conditions = Set(st.Conditions, terminalReadiness(pod, v1.PodReady, st.Phase))
}

// stamped reports whether the agent keeps the lastTransitionTime of
// conditions of type t; others (readiness gates, resize conditions) carry
// their own.
func stamped(t v1.PodConditionType) bool {
	switch t {
	case v1.ContainersReady, v1.PodReady, v1.PodInitialized, v1.PodReadyToStartContainers,
		v1.PodScheduled, v1.DisruptionTarget, v1.AllContainersRestarting:
		return true
	}
	return false
}

// CarryTransitionTimes sets the lastTransitionTime of the conditions in
// next whose times the agent keeps (ContainersReady, Ready, Initialized,
// PodReadyToStartContainers, PodScheduled, DisruptionTarget,
// AllContainersRestarting): old's when the condition had the same status
// there and a time, now otherwise. Other conditions are left as they are.
// old may be nil.
func CarryTransitionTimes(old, next *v1.PodStatus, now time.Time) {
	for i := range next.Conditions {
		c := &next.Conditions[i]
		if !stamped(c.Type) {
			continue
		}
		c.LastTransitionTime = metav1.NewTime(now)
		if old == nil {
			continue
		}
		if o := Find(old.Conditions, c.Type); o != nil && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
}
