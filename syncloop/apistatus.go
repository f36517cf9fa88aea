package syncloop

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
)

// Waiting reasons the loop reports on its own.
const (
	reasonContainerCreating = "ContainerCreating"
	reasonPodInitializing   = "PodInitializing"
	reasonStatusUnknown     = "ContainerStatusUnknown"
)

// waitReason is why a container is not running, from the last sync.
type waitReason struct {
	Reason  string
	Message string
	// Image is the image an image-pull reason was about when it is not the
	// container's own (an image volume's), "" otherwise.
	Image string
}

// statusInput is what the API status of a pod is computed from.
type statusInput struct {
	pod      *v1.Pod
	runtime  *nodekit.PodStatus
	old      v1.PodStatus // the last status the agent published, or the API's
	terminal bool         // the pod will not run again
	reasons  map[string]waitReason
	probes   ProbeResults
	nodeIPs  []string
	now      time.Time
}

// apiStatus computes the pod's API status from the runtime's view, as
// upstream's generateAPIPodStatus does.
func apiStatus(in statusInput) v1.PodStatus {
	pod := in.pod
	s := v1.PodStatus{
		Phase:     in.old.Phase,
		Reason:    in.old.Reason,
		Message:   in.old.Message,
		StartTime: in.old.StartTime,
		QOSClass:  QOSClass(pod),
	}
	if s.StartTime == nil {
		t := metav1.NewTime(in.now)
		s.StartTime = &t
	}
	for _, ip := range in.nodeIPs {
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: ip})
	}
	if len(in.nodeIPs) > 0 {
		s.HostIP = in.nodeIPs[0]
	}
	var ips []string
	if in.runtime != nil {
		ips = in.runtime.IPs
	}
	if pod.Spec.HostNetwork {
		ips = in.nodeIPs
	}
	if len(ips) == 0 && len(in.old.PodIPs) > 0 {
		ips = nil
		for _, ip := range in.old.PodIPs {
			ips = append(ips, ip.IP)
		}
	}
	for _, ip := range ips {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		s.PodIP = ips[0]
	}

	s.InitContainerStatuses = containerStatuses(in, pod.Spec.InitContainers, in.old.InitContainerStatuses, true)
	s.ContainerStatuses = containerStatuses(in, pod.Spec.Containers, in.old.ContainerStatuses, false)
	if n := len(pod.Spec.EphemeralContainers); n > 0 {
		specs := make([]v1.Container, n)
		for i := range pod.Spec.EphemeralContainers {
			specs[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = containerStatuses(in, specs, in.old.EphemeralContainerStatuses, false)
		for i := range s.EphemeralContainerStatuses {
			s.EphemeralContainerStatuses[i].Ready = false // never ready, as upstream
		}
	}

	initialized := anyRegularStarted(pod, in.runtime) || hasInitializedCondition(in.old)
	all := append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	phase := podPhase(pod, all, in.terminal, initialized)
	if s.Phase != v1.PodSucceeded && s.Phase != v1.PodFailed {
		s.Phase = phase // a terminal phase never goes back
	}

	s.Conditions = conditions(in, s, initialized)
	return s
}

func hasInitializedCondition(s v1.PodStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == v1.PodInitialized && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// containerStatuses converts the runtime's containers of one kind (init or
// regular) into API statuses: the newest instance gives the state, the one
// before it the last termination state; containers with a reason from the
// last sync show it as their waiting reason.
func containerStatuses(in statusInput, specs []v1.Container, old []v1.ContainerStatus, init bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	oldByName := map[string]v1.ContainerStatus{}
	for _, o := range old {
		oldByName[o.Name] = o
	}
	// As upstream: in a pod with init containers, every container not yet
	// started (init ones included) waits with PodInitializing.
	waiting := reasonContainerCreating
	if len(in.pod.Spec.InitContainers) > 0 {
		waiting = reasonPodInitializing
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		st := v1.ContainerStatus{Name: c.Name, Image: c.Image, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waiting}}}
		prev, hadOld := oldByName[c.Name]
		if hadOld {
			st.RestartCount = prev.RestartCount
			st.LastTerminationState = prev.LastTerminationState
		}
		var newest, before *nodekit.ContainerStatus
		if in.runtime != nil {
			for _, rc := range in.runtime.Containers {
				if rc.Name != c.Name {
					continue
				}
				if newest == nil {
					newest = rc
				} else if before == nil {
					before = rc
					break
				}
			}
		}
		switch {
		case newest != nil:
			fillFromRuntime(&st, c, newest, in.probes)
			if before != nil && before.State == nodekit.StateExited {
				st.LastTerminationState = v1.ContainerState{Terminated: terminated(before)}
			}
		case hadOld && (prev.State.Running != nil || prev.State.Terminated != nil) && in.terminal:
			// The runtime lost a container the API saw: report it ended, as
			// upstream does, rather than pretend it is being created.
			st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 137, Reason: reasonStatusUnknown,
				Message: "The container could not be located when the pod was terminated",
			}}
			if prev.State.Terminated != nil {
				st.State = prev.State
			}
			st.ImageID, st.ContainerID = prev.ImageID, prev.ContainerID
		}
		if init && !isSidecar(c) && st.State.Terminated != nil && st.State.Terminated.ExitCode == 0 {
			st.Ready = true // a completed init container counts as ready, as upstream
		}
		if r, ok := in.reasons[c.Name]; ok && st.State.Running == nil && !in.terminal {
			if st.State.Terminated != nil {
				st.LastTerminationState = st.State
			}
			st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: r.Reason, Message: r.Message}}
		}
		out = append(out, st)
	}
	return out
}

func fillFromRuntime(st *v1.ContainerStatus, c *v1.Container, rc *nodekit.ContainerStatus, probes ProbeResults) {
	st.ContainerID = rc.ID.String()
	st.ImageID = rc.ImageRef
	if st.ImageID == "" {
		st.ImageID = rc.ImageID
	}
	if rc.Image != "" {
		st.Image = rc.Image
	}
	st.RestartCount = int32(rc.RestartCount)
	if rc.User != nil {
		st.User = rc.User.DeepCopy()
	}
	started := false
	switch rc.State {
	case nodekit.StateRunning:
		st.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(rc.StartedAt)}}
		started = true
		if c.StartupProbe != nil {
			r, ok := probe(probes, Startup, rc.ID)
			started = ok && r == ProbeSuccess
		}
		ready := started
		if ready && c.ReadinessProbe != nil {
			r, ok := probe(probes, Readiness, rc.ID)
			ready = ok && r == ProbeSuccess
		}
		st.Ready = ready
	case nodekit.StateExited:
		st.State = v1.ContainerState{Terminated: terminated(rc)}
	case nodekit.StateCreated:
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reasonContainerCreating}}
	default:
		st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: 137, Reason: reasonStatusUnknown, ContainerID: rc.ID.String(),
			Message: "The container could not be located when the pod was terminated",
		}}
	}
	st.Started = &started
}

func terminated(rc *nodekit.ContainerStatus) *v1.ContainerStateTerminated {
	t := &v1.ContainerStateTerminated{
		ExitCode:    int32(rc.ExitCode),
		Reason:      rc.Reason,
		Message:     rc.Message,
		StartedAt:   metav1.NewTime(rc.StartedAt),
		FinishedAt:  metav1.NewTime(rc.FinishedAt),
		ContainerID: rc.ID.String(),
	}
	if t.Reason == "" {
		t.Reason = "Completed"
		if rc.ExitCode != 0 {
			t.Reason = "Error"
		}
	}
	return t
}

// podPhase is upstream's getPhase with container restart rules enabled.
func podPhase(pod *v1.Pod, statuses []v1.ContainerStatus, terminal, initialized bool) v1.PodPhase {
	byName := make(map[string]*v1.ContainerStatus, len(statuses))
	for i := range statuses {
		byName[statuses[i].Name] = &statuses[i]
	}
	var pendingInit, pendingSidecars, failedInitNoRestart int
	var unknown, running, waiting, stopped, stoppedNoRestart, succeeded int
	spec := &pod.Spec
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		st := byName[c.Name]
		if isSidecar(c) {
			switch {
			case st == nil:
				unknown++
			case st.State.Running != nil:
				if st.Started == nil || !*st.Started {
					pendingSidecars++
				}
				running++
			case st.State.Terminated != nil:
			case st.State.Waiting != nil:
				if st.LastTerminationState.Terminated == nil {
					pendingSidecars++
					waiting++
				}
			default:
				pendingSidecars++
				unknown++
			}
			continue
		}
		switch {
		case st == nil, st.State.Running != nil:
			pendingInit++
		case st.State.Terminated != nil:
			if code := st.State.Terminated.ExitCode; code != 0 && !shouldRestart(c, spec, int(code)) {
				failedInitNoRestart++
			}
		case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
			if code := st.LastTerminationState.Terminated.ExitCode; code != 0 && !shouldRestart(c, spec, int(code)) {
				failedInitNoRestart++
			}
		default:
			pendingInit++
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		st := byName[c.Name]
		switch {
		case st == nil:
			unknown++
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			code := int(st.State.Terminated.ExitCode)
			if !shouldRestart(c, spec, code) {
				stoppedNoRestart++
			}
			if code == 0 {
				succeeded++
			}
		case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
			stopped++
			if !shouldRestart(c, spec, int(st.LastTerminationState.Terminated.ExitCode)) {
				stoppedNoRestart++
			}
		case st.State.Waiting != nil:
			waiting++
		default:
			unknown++
		}
	}
	if failedInitNoRestart > 0 {
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0 || (pendingSidecars > 0 && !initialized), waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if terminal && !isStatic(pod) {
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
		if stopped != stoppedNoRestart {
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	return v1.PodPending
}

// conditions computes the pod conditions the agent owns and keeps the
// others (PodScheduled, DisruptionTarget, readiness gates...).
func conditions(in statusInput, s v1.PodStatus, initialized bool) []v1.PodCondition {
	pod := in.pod
	var out []v1.PodCondition
	owned := map[v1.PodConditionType]bool{
		v1.PodReadyToStartContainers: true, v1.PodInitialized: true, v1.ContainersReady: true, v1.PodReady: true,
	}
	// Conditions others own (readiness gates, DisruptionTarget, ...) come
	// from the API object, which they write to, else from the last status.
	foreign := map[v1.PodConditionType]bool{}
	for _, c := range pod.Status.Conditions {
		if !owned[c.Type] {
			out = append(out, c)
			foreign[c.Type] = true
		}
	}
	for _, c := range in.old.Conditions {
		if !owned[c.Type] && !foreign[c.Type] {
			out = append(out, c)
		}
	}
	hasScheduled := false
	for _, c := range out {
		hasScheduled = hasScheduled || c.Type == v1.PodScheduled
	}
	if !hasScheduled {
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled {
				out = append(out, c)
				hasScheduled = true
			}
		}
	}
	if !hasScheduled {
		out = append(out, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue})
	}

	sandboxReady := false
	if in.runtime != nil && len(in.runtime.Sandboxes) > 0 {
		sb := in.runtime.Sandboxes[0]
		sandboxReady = sb.State == nodekit.SandboxReady && (pod.Spec.HostNetwork || len(sb.IPs) > 0)
	}
	out = append(out, cond(v1.PodReadyToStartContainers, sandboxReady, "", ""))

	// Initialized
	var notInit []string
	if !initialized {
		for _, st := range s.InitContainerStatuses {
			c := findSpec(pod.Spec.InitContainers, st.Name)
			done := st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
			if c != nil && isSidecar(c) {
				done = st.Started != nil && *st.Started
			}
			if !done {
				notInit = append(notInit, st.Name)
			}
		}
	}
	if len(notInit) == 0 {
		out = append(out, cond(v1.PodInitialized, true, "", ""))
	} else {
		out = append(out, cond(v1.PodInitialized, false, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " "))))
	}

	// ContainersReady and Ready
	var unready []string
	for _, st := range s.InitContainerStatuses {
		if c := findSpec(pod.Spec.InitContainers, st.Name); c != nil && isSidecar(c) && !st.Ready {
			unready = append(unready, st.Name)
		}
	}
	for _, st := range s.ContainerStatuses {
		if !st.Ready {
			unready = append(unready, st.Name)
		}
	}
	var ready v1.PodCondition
	switch {
	case s.Phase == v1.PodSucceeded:
		ready = cond(v1.ContainersReady, false, "PodCompleted", "")
	case len(unready) > 0:
		ready = cond(v1.ContainersReady, false, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " ")))
	default:
		ready = cond(v1.ContainersReady, true, "", "")
	}
	out = append(out, ready)
	podReady := ready
	podReady.Type = v1.PodReady
	if podReady.Status == v1.ConditionTrue {
		var gates []string
		for _, g := range pod.Spec.ReadinessGates {
			ok := false
			for _, c := range out {
				ok = ok || (c.Type == g.ConditionType && c.Status == v1.ConditionTrue)
			}
			if !ok {
				gates = append(gates, string(g.ConditionType))
			}
		}
		if len(gates) > 0 {
			podReady = cond(v1.PodReady, false, "ReadinessGatesNotReady", fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gates[0]))
		}
	}
	out = append(out, podReady)

	// Keep the transition time of conditions whose status did not change.
	for i := range out {
		out[i].LastTransitionTime = metav1.NewTime(in.now)
		for _, o := range in.old.Conditions {
			if o.Type == out[i].Type && o.Status == out[i].Status && !o.LastTransitionTime.IsZero() {
				out[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return conditionOrder(out[i].Type) < conditionOrder(out[j].Type) })
	return out
}

func conditionOrder(t v1.PodConditionType) int {
	switch t {
	case v1.PodReadyToStartContainers:
		return 0
	case v1.PodInitialized:
		return 1
	case v1.PodReady:
		return 2
	case v1.ContainersReady:
		return 3
	case v1.PodScheduled:
		return 4
	}
	return 5
}

func cond(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
	s := v1.ConditionFalse
	if ok {
		s = v1.ConditionTrue
	}
	return v1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg}
}

func findSpec(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// isStatic reports whether a pod came from a file or URL rather than the
// API server.
func isStatic(pod *v1.Pod) bool {
	src := pod.Annotations["kubernetes.io/config.source"]
	return src != "" && src != nodekit.SourceAPI
}
