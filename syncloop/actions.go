package syncloop

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// ProbeKind names a probe.
type ProbeKind string

// The probe kinds.
const (
	Liveness  ProbeKind = "liveness"
	Readiness ProbeKind = "readiness"
	Startup   ProbeKind = "startup"
)

// ProbeResult is the last result of a probe.
type ProbeResult int

// Probe results.
const (
	ProbeUnknown ProbeResult = iota
	ProbeSuccess
	ProbeFailure
)

// ProbeResults tells the loop the last result of a container's probes. The
// probes package implements it; nil means no probes run.
type ProbeResults interface {
	// Result returns the last result and whether there is one.
	Result(kind ProbeKind, id nodekit.ContainerID) (ProbeResult, bool)
}

// Kill reasons, as upstream puts them in the Killing event and the status.
const (
	reasonLivenessProbe = "LivenessProbe"
	reasonStartupProbe  = "StartupProbe"
	reasonUnknown       = "Unknown"
)

func probe(p ProbeResults, kind ProbeKind, id nodekit.ContainerID) (ProbeResult, bool) {
	if p == nil {
		return ProbeUnknown, false
	}
	return p.Result(kind, id)
}

// sandboxChanged decides whether the pod needs a new sandbox, as upstream:
// none yet, the newest not ready, more than one ready, the network mode
// changed, or a pod-network sandbox without an IP.
func sandboxChanged(pod *v1.Pod, st *nodekit.PodStatus) (create bool, attempt uint32, id string) {
	if st == nil || len(st.Sandboxes) == 0 {
		return true, 0, ""
	}
	ready := 0
	for _, sb := range st.Sandboxes {
		if sb.State == nodekit.SandboxReady {
			ready++
		}
	}
	newest := st.Sandboxes[0]
	switch {
	case ready > 1, newest.State != nodekit.SandboxReady:
		return true, newest.Attempt + 1, newest.ID
	case newest.HostNetwork != pod.Spec.HostNetwork:
		return true, newest.Attempt + 1, ""
	case !pod.Spec.HostNetwork && len(newest.IPs) == 0:
		return true, newest.Attempt + 1, newest.ID
	}
	return false, newest.Attempt, newest.ID
}

// computeActions decides what the runtime must do for the pod to converge,
// following upstream's computePodActions: sandbox first, then init
// containers in order (sidecars keep running), then regular containers per
// restart policy, liveness/startup failures and spec changes. Back-off is
// applied by the caller.
func computeActions(pod *v1.Pod, st *nodekit.PodStatus, probes ProbeResults, hash func(*v1.Container) uint64) nodekit.PodActions {
	create, attempt, sandboxID := sandboxChanged(pod, st)
	a := nodekit.PodActions{
		KillPod: create, CreateSandbox: create, SandboxID: sandboxID, Attempt: attempt,
		ContainersToKill: map[nodekit.ContainerID]nodekit.KillInfo{},
	}
	if create {
		hasStatuses := st != nil && len(st.Containers) > 0
		if !restartOnFailure(pod) && attempt != 0 && hasStatuses {
			// A Never pod whose sandbox died is done: it will not run again.
			a.CreateSandbox = false
			return a
		}
		var start []int
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			cs := st.FindContainer(c.Name)
			if cs != nil && cs.State == nodekit.StateExited && cs.ExitCode == 0 && runOnce(pod, c) {
				continue
			}
			start = append(start, i)
		}
		if len(start) == 0 && anyRegularCreated(pod, st) {
			a.CreateSandbox = false
			return a
		}
		if len(pod.Spec.InitContainers) > 0 {
			a.InitContainersToStart = []int{0}
			return a
		}
		a.ContainersToStart = start
		return a
	}

	// Ephemeral containers start once, whatever the other containers do.
	for i := range pod.Spec.EphemeralContainers {
		if st.FindContainer(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.EphemeralContainersToStart = append(a.EphemeralContainersToStart, i)
		}
	}
	if !initActions(pod, st, probes, hash, &a) || a.KillPod {
		return a
	}

	keep := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := st.FindContainer(c.Name)
		if cs == nil || cs.State != nodekit.StateRunning {
			if containerShouldStart(pod, c, cs) {
				a.ContainersToStart = append(a.ContainersToStart, i)
				if cs != nil && cs.State == nodekit.StateUnknown {
					a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: cs.Name, Container: c, Reason: reasonUnknown,
						Message: fmt.Sprintf("Container is in %q state, try killing it before restart", cs.State)}
				}
			}
			continue
		}
		restart := restartOnFailure(pod)
		if c.RestartPolicy != nil {
			restart = *c.RestartPolicy != v1.ContainerRestartPolicyNever
		}
		var msg, reason string
		var grace *time.Duration
		if hash != nil && cs.Hash != 0 && cs.Hash != hash(c) {
			msg, restart = fmt.Sprintf("Container %s definition changed", c.Name), true
		} else if r, ok := probe(probes, Liveness, cs.ID); ok && r == ProbeFailure {
			msg, reason = fmt.Sprintf("Container %s failed liveness probe", c.Name), reasonLivenessProbe
			grace = probeGrace(pod, c.LivenessProbe)
		} else if r, ok := probe(probes, Startup, cs.ID); ok && r == ProbeFailure {
			msg, reason = fmt.Sprintf("Container %s failed startup probe", c.Name), reasonStartupProbe
			grace = probeGrace(pod, c.StartupProbe)
		} else {
			keep++
			continue
		}
		if restart {
			msg += ", will be restarted"
			a.ContainersToStart = append(a.ContainersToStart, i)
		}
		a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: cs.Name, Container: c, Reason: reason, Message: msg, GracePeriod: grace}
	}
	if keep == 0 && len(a.ContainersToStart) == 0 {
		// Nothing runs and nothing will: stop the sandbox (and sidecars).
		a.KillPod = true
		a.InitContainersToStart = nil
	}
	return a
}

// probeGrace is a probe's own terminationGracePeriodSeconds, which
// replaces the pod's when the probe kills the container (not when the pod
// is being deleted).
func probeGrace(pod *v1.Pod, p *v1.Probe) *time.Duration {
	if p == nil || p.TerminationGracePeriodSeconds == nil || pod.DeletionTimestamp != nil {
		return nil
	}
	d := time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	return &d
}

// runOnce is whether a container that exited 0 stays down.
func runOnce(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy == v1.ContainerRestartPolicyOnFailure || *c.RestartPolicy == v1.ContainerRestartPolicyNever
	}
	return pod.Spec.RestartPolicy != v1.RestartPolicyAlways
}

func anyRegularCreated(pod *v1.Pod, st *nodekit.PodStatus) bool {
	for i := range pod.Spec.Containers {
		if st.FindContainer(pod.Spec.Containers[i].Name) != nil {
			return true
		}
	}
	return false
}

// anyRegularStarted is upstream's "has the pod initialized": a regular
// container is or was running in the current sandbox.
func anyRegularStarted(pod *v1.Pod, st *nodekit.PodStatus) bool {
	for i := range pod.Spec.Containers {
		cs := st.FindContainer(pod.Spec.Containers[i].Name)
		if cs != nil && (cs.State == nodekit.StateRunning || cs.State == nodekit.StateExited) {
			return true
		}
	}
	return false
}

// initActions fills the init-container part of the actions and reports
// whether the pod has initialized (regular containers may run). It walks the
// init containers from the last to the first, as upstream, so that the
// furthest progress decides what starts next.
func initActions(pod *v1.Pod, st *nodekit.PodStatus, probes ProbeResults, hash func(*v1.Container) uint64, a *nodekit.PodActions) bool {
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	initialized := anyRegularStarted(pod, st)
	previous := initialized
	var start []int
	for i := len(inits) - 1; i >= 0; i-- {
		c := &inits[i]
		cs := st.FindContainer(c.Name)
		if cs == nil {
			if previous && podutil.IsSidecar(c) {
				start = append(start, i)
			}
			continue
		}
		if previous && !podutil.IsSidecar(c) {
			continue
		}
		switch cs.State {
		case nodekit.StateCreated:
			start = append(start, i)
		case nodekit.StateRunning:
			if !podutil.IsSidecar(c) {
				break // wait for it to finish
			}
			if c.StartupProbe != nil {
				r, ok := probe(probes, Startup, cs.ID)
				if !ok {
					break
				}
				if r != ProbeSuccess {
					if r == ProbeFailure {
						a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonStartupProbe,
							Message: fmt.Sprintf("Init container %s failed startup probe", c.Name), GracePeriod: probeGrace(pod, c.StartupProbe)}
						start = append(start, i)
					}
					break
				}
			}
			if i == len(inits)-1 {
				initialized = true
			} else if !previous {
				start = append(start, i+1)
			}
			if hash != nil && cs.Hash != 0 && cs.Hash != hash(c) {
				a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c,
					Message: fmt.Sprintf("Init container %s definition changed", c.Name)}
				start = append(start, i)
				break
			}
			if c.LivenessProbe != nil {
				if r, ok := probe(probes, Liveness, cs.ID); ok && r == ProbeFailure {
					a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonLivenessProbe,
						Message: fmt.Sprintf("Init container %s failed liveness probe", c.Name), GracePeriod: probeGrace(pod, c.LivenessProbe)}
					start = append(start, i)
				}
			}
		case nodekit.StateExited:
			if podutil.IsSidecar(c) {
				start = append(start, i)
				break
			}
			if cs.ExitCode != 0 {
				if !shouldRestart(c, &pod.Spec, cs.ExitCode) {
					a.KillPod = true
					a.InitContainersToStart = nil
					return false
				}
				start = append(start, i)
				break
			}
			if i == len(inits)-1 {
				initialized = true
			} else {
				start = append(start, i+1)
			}
		default:
			if !podutil.IsSidecar(c) {
				restart := restartOnFailure(pod)
				if c.RestartPolicy != nil {
					restart = *c.RestartPolicy != v1.ContainerRestartPolicyNever
				}
				if !restart {
					a.KillPod = true
					a.InitContainersToStart = nil
					return false
				}
			}
			a.ContainersToKill[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonUnknown,
				Message: fmt.Sprintf("Init container is in %q state, try killing it before restart", cs.State)}
			start = append(start, i)
		}
		previous = true
	}
	if !previous {
		start = append(start, 0)
	}
	slices.Reverse(start)
	a.InitContainersToStart = start
	return initialized
}
