package syncloop

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// ProbeKind names a probe: the root contract's type, under the name the
// loop's Config reads with.
type ProbeKind = nodekit.ProbeKind

// The probe kinds (nodekit's).
const (
	Liveness  = nodekit.ProbeLiveness
	Readiness = nodekit.ProbeReadiness
	Startup   = nodekit.ProbeStartup
)

// ProbeResult is the last result of a probe: the root contract's type.
type ProbeResult = nodekit.ProbeResult

// Probe results (nodekit's).
const (
	ProbeUnknown = nodekit.ProbeUnknown
	ProbeSuccess = nodekit.ProbeSuccess
	ProbeFailure = nodekit.ProbeFailure
)

// ProbeResults tells the loop the last result of a container's probes. The
// probes package's Manager implements it; nil means no probes run.
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
		newSandboxActions(pod, st, attempt, &a)
		return a
	}
	// Ephemeral containers start once, whatever the other containers do.
	a.EphemeralContainersToStart = ephemeralToStart(pod, st)
	if !initActions(pod, st, probes, hash, &a) || a.KillPod {
		return a
	}
	regularActions(pod, st, probes, hash, &a)
	return a
}

// newSandboxActions fills the actions of a pod whose sandbox is (re)made.
// A pod that never restarts and has run in a sandbox before gets none; so
// does one whose regular containers all finished for good. Otherwise the
// pod starts over from its first init container, or, without init
// containers, starts the regular containers still to run.
func newSandboxActions(pod *v1.Pod, st *nodekit.PodStatus, attempt uint32, a *nodekit.PodActions) {
	hasStatuses := st != nil && len(st.Containers) > 0
	if !restartOnFailure(pod) && attempt != 0 && hasStatuses {
		// A Never pod whose sandbox died is done: it will not run again.
		a.CreateSandbox = false
		return
	}
	start := regularToRerun(pod, st)
	if len(start) == 0 && anyRegularCreated(pod, st) {
		a.CreateSandbox = false
		return
	}
	if len(pod.Spec.InitContainers) > 0 {
		a.InitContainersToStart = []int{0}
		return
	}
	a.ContainersToStart = start
}

// regularToRerun lists, in spec order, the regular containers a new sandbox
// runs: all but those that exited 0 and are not restarted after success.
func regularToRerun(pod *v1.Pod, st *nodekit.PodStatus) []int {
	var start []int
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := st.FindContainer(c.Name)
		if cs != nil && cs.State == nodekit.StateExited && cs.ExitCode == 0 && runOnce(pod, c) {
			continue
		}
		start = append(start, i)
	}
	return start
}

// ephemeralToStart lists the ephemeral containers the runtime has never
// had; each runs at most once.
func ephemeralToStart(pod *v1.Pod, st *nodekit.PodStatus) []int {
	var start []int
	for i := range pod.Spec.EphemeralContainers {
		if st.FindContainer(pod.Spec.EphemeralContainers[i].Name) == nil {
			start = append(start, i)
		}
	}
	return start
}

// regularActions fills the regular-container part of the actions of an
// initialized pod in its current sandbox: start those not running that
// should (killing one in an unknown state first), kill the running ones
// killRunning condemns, and stop the whole pod when nothing would run.
func regularActions(pod *v1.Pod, st *nodekit.PodStatus, probes ProbeResults, hash func(*v1.Container) uint64, a *nodekit.PodActions) {
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
		kill, restart, condemned := killRunning(pod, c, cs, probes, hash)
		if !condemned {
			keep++
			continue
		}
		if restart {
			a.ContainersToStart = append(a.ContainersToStart, i)
		}
		a.ContainersToKill[cs.ID] = kill
	}
	if keep == 0 && len(a.ContainersToStart) == 0 {
		// Nothing runs and nothing will: stop the sandbox (and sidecars).
		a.KillPod = true
		a.InitContainersToStart = nil
	}
}

// killRunning decides whether running regular container c (status cs) is
// killed, and whether it then starts again. A changed spec (hash) kills and
// restarts it whatever its restart policy; a failed liveness probe, else a
// failed startup probe, kills it with the probe's grace period and restarts
// it if its restart policy allows. condemned is false when it keeps running.
func killRunning(pod *v1.Pod, c *v1.Container, cs *nodekit.ContainerStatus, probes ProbeResults, hash func(*v1.Container) uint64) (kill nodekit.KillInfo, restart, condemned bool) {
	restart = containerRestarts(pod, c)
	var msg, reason string
	var grace *time.Duration
	switch {
	case hash != nil && cs.Hash != 0 && cs.Hash != hash(c):
		msg, restart = fmt.Sprintf("Container %s definition changed", c.Name), true
	case probeFailed(probes, Liveness, cs.ID):
		msg, reason = fmt.Sprintf("Container %s failed liveness probe", c.Name), reasonLivenessProbe
		grace = probeGrace(pod, c.LivenessProbe)
	case probeFailed(probes, Startup, cs.ID):
		msg, reason = fmt.Sprintf("Container %s failed startup probe", c.Name), reasonStartupProbe
		grace = probeGrace(pod, c.StartupProbe)
	default:
		return nodekit.KillInfo{}, false, false
	}
	if restart {
		msg += ", will be restarted"
	}
	return nodekit.KillInfo{Name: cs.Name, Container: c, Reason: reason, Message: msg, GracePeriod: grace}, restart, true
}

// probeFailed is whether the last result of the container's probe of that
// kind is a failure.
func probeFailed(p ProbeResults, kind ProbeKind, id nodekit.ContainerID) bool {
	r, ok := probe(p, kind, id)
	return ok && r == ProbeFailure
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
// furthest progress decides what starts next. An init container that failed
// and may not restart kills the pod (and reports false).
func initActions(pod *v1.Pod, st *nodekit.PodStatus, probes ProbeResults, hash func(*v1.Container) uint64, a *nodekit.PodActions) bool {
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	p := initPlan{pod: pod, probes: probes, hash: hash, kills: a.ContainersToKill, last: len(inits) - 1,
		initialized: anyRegularStarted(pod, st)}
	// previous: a later init container (or a regular one) has made progress.
	previous := p.initialized
	for i := p.last; i >= 0; i-- {
		c := &inits[i]
		cs := st.FindContainer(c.Name)
		if cs == nil {
			if previous && podutil.IsSidecar(c) {
				p.start = append(p.start, i)
			}
			continue
		}
		if previous && !podutil.IsSidecar(c) {
			continue
		}
		if !p.container(i, c, cs, previous) {
			a.KillPod = true
			a.InitContainersToStart = nil
			return false
		}
		previous = true
	}
	if !previous {
		p.start = append(p.start, 0)
	}
	slices.Reverse(p.start)
	a.InitContainersToStart = p.start
	return p.initialized
}

// initPlan is what initActions gathers on its walk: the init containers to
// start (last first), the kills, and whether the pod has initialized.
type initPlan struct {
	pod    *v1.Pod
	probes ProbeResults
	hash   func(*v1.Container) uint64
	last   int // index of the last init container

	start       []int
	kills       map[nodekit.ContainerID]nodekit.KillInfo
	initialized bool
}

// container decides for init container i, which the runtime has, by its
// state; previous says a later one has made progress. It returns false
// when the pod must be killed.
func (p *initPlan) container(i int, c *v1.Container, cs *nodekit.ContainerStatus, previous bool) bool {
	switch cs.State {
	case nodekit.StateCreated:
		p.start = append(p.start, i)
	case nodekit.StateRunning:
		p.running(i, c, cs, previous)
	case nodekit.StateExited:
		return p.exited(i, c, cs)
	default:
		return p.unknown(i, c, cs)
	}
	return true
}

// running handles a running init container. A regular one is waited for.
// A sidecar whose startup probe failed is restarted; once started, it lets
// the next init container start (or, the last, initializes the pod), and is
// restarted if its spec changed or its liveness probe failed.
func (p *initPlan) running(i int, c *v1.Container, cs *nodekit.ContainerStatus, previous bool) {
	if !podutil.IsSidecar(c) {
		return // wait for it to finish
	}
	switch sidecarStartup(c, cs, p.probes) {
	case startupPending:
		return
	case startupFailed:
		p.kills[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonStartupProbe,
			Message: fmt.Sprintf("Init container %s failed startup probe", c.Name), GracePeriod: probeGrace(p.pod, c.StartupProbe)}
		p.start = append(p.start, i)
		return
	}
	if i == p.last {
		p.initialized = true
	} else if !previous {
		p.start = append(p.start, i+1)
	}
	if p.hash != nil && cs.Hash != 0 && cs.Hash != p.hash(c) {
		p.kills[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c,
			Message: fmt.Sprintf("Init container %s definition changed", c.Name)}
		p.start = append(p.start, i)
		return
	}
	if c.LivenessProbe != nil && probeFailed(p.probes, Liveness, cs.ID) {
		p.kills[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonLivenessProbe,
			Message: fmt.Sprintf("Init container %s failed liveness probe", c.Name), GracePeriod: probeGrace(p.pod, c.LivenessProbe)}
		p.start = append(p.start, i)
	}
}

// exited handles an init container that exited: a sidecar starts again; a
// regular one that failed starts again if its restart rules say so, and
// kills the pod (false) if not; one that succeeded lets the next start (or,
// the last, initializes the pod).
func (p *initPlan) exited(i int, c *v1.Container, cs *nodekit.ContainerStatus) bool {
	if podutil.IsSidecar(c) {
		p.start = append(p.start, i)
		return true
	}
	if cs.ExitCode != 0 {
		if !shouldRestart(c, &p.pod.Spec, cs.ExitCode) {
			return false
		}
		p.start = append(p.start, i)
		return true
	}
	if i == p.last {
		p.initialized = true
	} else {
		p.start = append(p.start, i+1)
	}
	return true
}

// unknown handles an init container in an unknown state: it is killed and
// started again, unless it is a regular one that may not restart, which
// kills the pod (false).
func (p *initPlan) unknown(i int, c *v1.Container, cs *nodekit.ContainerStatus) bool {
	if !podutil.IsSidecar(c) && !containerRestarts(p.pod, c) {
		return false
	}
	p.kills[cs.ID] = nodekit.KillInfo{Name: c.Name, Container: c, Reason: reasonUnknown,
		Message: fmt.Sprintf("Init container is in %q state, try killing it before restart", cs.State)}
	p.start = append(p.start, i)
	return true
}

// startupState is where a running sidecar's startup probe leaves it.
type startupState int

const (
	startupPending startupState = iota // no result yet, or unknown: wait
	startupDone                        // no startup probe, or it succeeded
	startupFailed                      // restart the sidecar
)

// sidecarStartup reads the startup probe of running sidecar c (status cs).
func sidecarStartup(c *v1.Container, cs *nodekit.ContainerStatus, probes ProbeResults) startupState {
	if c.StartupProbe == nil {
		return startupDone
	}
	r, ok := probe(probes, Startup, cs.ID)
	switch {
	case !ok:
		return startupPending
	case r == ProbeSuccess:
		return startupDone
	case r == ProbeFailure:
		return startupFailed
	}
	return startupPending
}
