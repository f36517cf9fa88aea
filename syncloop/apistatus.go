package syncloop

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/podutil"
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
	// extra are pod conditions other parts of the agent own (resize
	// conditions, ...), passed to the generator as podstatus.Input.Extra.
	extra []v1.PodCondition
	now   time.Time
	// restartingAll: the pod's containers are being restarted all together
	// (podstatus.RestartingAll); apiStatus sets it.
	restartingAll bool
	// rro: the pod's runtime handler supports recursive read-only mounts.
	rro bool
}

// apiStatus computes the pod's API status from the runtime's view, as
// upstream's generateAPIPodStatus does: the container statuses, IPs and
// start time here; phase, reason, message and conditions by podstatus, the
// generator the status manager uses too.
func apiStatus(in statusInput) v1.PodStatus {
	pod := in.pod
	s := v1.PodStatus{StartTime: in.old.StartTime, QOSClass: QOSClass(pod)}
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

	in.restartingAll = podstatus.RestartingAll(pod, in.runtime, &in.old)
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

	var sandboxes []*nodekit.SandboxStatus
	if in.runtime != nil {
		sandboxes = in.runtime.Sandboxes
	}
	gen := podstatus.Generate(podstatus.Input{
		Pod: pod, Old: &in.old,
		InitContainers: s.InitContainerStatuses, Containers: s.ContainerStatuses,
		Sandboxes:   sandboxes,
		Runtime:     in.runtime,
		Terminal:    in.terminal,
		Initialized: in.runtime != nil && anyRegularStarted(pod, in.runtime),
		Extra:       in.extra,
		Now:         in.now,
	})
	s.Phase, s.Reason, s.Message, s.Conditions = gen.Phase, gen.Reason, gen.Message, gen.Conditions
	return s
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
	waiting := podstatus.ReasonContainerCreating
	if len(in.pod.Spec.InitContainers) > 0 {
		waiting = podstatus.ReasonPodInitializing
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		prev, hadOld := oldByName[c.Name]
		st := stateOf(&in, c, waiting, prev, hadOld)
		finishStatus(&st, &in, c, init)
		out = append(out, st)
	}
	return out
}

// stateOf is container c's status before the last sync's reasons apply:
// waiting with the given reason and carrying restarts and the last
// termination from its last status (prev, if hadOld), then, as the runtime
// sees it, from its newest two instances; without one, a container removed
// to restart them all, or one the runtime lost from a pod that is done.
func stateOf(in *statusInput, c *v1.Container, waiting string, prev v1.ContainerStatus, hadOld bool) v1.ContainerStatus {
	st := v1.ContainerStatus{Name: c.Name, Image: c.Image, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waiting}},
		VolumeMounts: volumeMountStatuses(c, in.rro)}
	if hadOld {
		st.RestartCount = prev.RestartCount
		st.LastTerminationState = prev.LastTerminationState
		if prev.State.Terminated != nil {
			st.VolumeMounts = prev.VolumeMounts
		}
	}
	newest, before := newestTwo(in.runtime, c.Name)
	switch {
	case newest != nil:
		// As upstream: a container the runtime has carries the volume
		// mounts of its last status (immutable), none without one.
		st.VolumeMounts = nil
		if hadOld {
			st.VolumeMounts = prev.VolumeMounts
		}
		fillFromRuntime(&st, c, newest, in.probes)
		if hadOld {
			carryAcrossRemoval(&st, &prev, newest)
		}
		if before != nil && before.State == nodekit.StateExited {
			st.LastTerminationState = v1.ContainerState{Terminated: terminated(before)}
		}
	case hadOld && in.restartingAll && prev.State.Waiting == nil:
		// Removed to restart all the pod's containers: it waits to
		// start again and counts one more restart, as upstream.
		st = removedForRestartAll(prev)
	case hadOld && (prev.State.Running != nil || prev.State.Terminated != nil) && in.terminal:
		// The runtime lost a container the API saw: report it ended, as
		// upstream does, rather than pretend it is being created.
		st.State = v1.ContainerState{Terminated: podstatus.UnknownTermination()}
		if prev.State.Terminated != nil {
			st.State = prev.State
		}
		st.ImageID, st.ContainerID = prev.ImageID, prev.ContainerID
	}
	return st
}

// newestTwo returns the runtime's newest instance of the named container
// and the one before it (nil where there is none).
func newestTwo(rs *nodekit.PodStatus, name string) (newest, before *nodekit.ContainerStatus) {
	if rs == nil {
		return nil, nil
	}
	for _, rc := range rs.Containers {
		if rc.Name != name {
			continue
		}
		if newest == nil {
			newest = rc
		} else if before == nil {
			before = rc
			break
		}
	}
	return newest, before
}

// finishStatus sets what follows from container c's state: the readiness
// of a regular init container, the last sync's waiting reason of one not
// running (while the pod is not done), and started false for one not
// running.
func finishStatus(st *v1.ContainerStatus, in *statusInput, c *v1.Container, init bool) {
	if init && !podutil.IsSidecar(c) {
		// A regular init container is ready once it has completed, and
		// not while it runs or after it failed, as upstream's prober
		// manager reports it: Initialized reads this.
		st.Ready = st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
	}
	if r, ok := in.reasons[c.Name]; ok && st.State.Running == nil && !in.terminal {
		if st.State.Terminated != nil {
			st.LastTerminationState = st.State
		}
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: r.Reason, Message: r.Message}}
	}
	if st.Started == nil || st.State.Running == nil {
		// As upstream's prober manager: every status says whether its
		// container has started, and one not running has not.
		started := false
		st.Started = &started
	}
}

// volumeMountStatuses is the status of a container's volume mounts as
// upstream reports it (RecursiveReadOnlyMounts, GA): each mount's name,
// path and read-only flag, and for a read-only one its recursive mode,
// Enabled where the mount is made recursively read-only (rro: the pod's
// runtime handler supports it), Disabled otherwise (an invalid request
// too: the container's start fails on it).
func volumeMountStatuses(c *v1.Container, rro bool) []v1.VolumeMountStatus {
	var out []v1.VolumeMountStatus
	for _, vm := range c.VolumeMounts {
		st := v1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if on, err := podutil.ResolveRecursiveReadOnly(vm, rro); err == nil && on {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

// carryAcrossRemoval keeps what the runtime forgot when the agent removed
// a container's earlier instances to restart all the pod's containers
// (RestartAllContainersOnContainerExits), as upstream: the restart count
// never goes below the last status's, a new instance of a container last
// seen terminated counts one more restart, and a new instance keeps the
// last termination (the old terminated state, or the one recorded when it
// was removed).
func carryAcrossRemoval(st, prev *v1.ContainerStatus, rc *nodekit.ContainerStatus) {
	st.RestartCount = max(st.RestartCount, prev.RestartCount)
	if rc.State == nodekit.StateRunning && prev.State.Terminated != nil && prev.RestartCount >= int32(rc.RestartCount) {
		st.RestartCount = prev.RestartCount + 1
	}
	switch {
	case prev.ContainerID != st.ContainerID && prev.State.Terminated != nil:
		st.LastTerminationState = v1.ContainerState{Terminated: prev.State.Terminated.DeepCopy()}
	case prev.LastTerminationState.Terminated != nil:
		st.LastTerminationState = v1.ContainerState{Terminated: prev.LastTerminationState.Terminated.DeepCopy()}
	}
}

// removedForRestartAll is the status of a container the agent removed to
// restart all the pod's containers, built on its last status prev: waiting
// with reason RestartingAllContainers, a last termination with that reason
// and exit code 137, and one more restart. It keeps the container and
// image IDs only of a container last seen terminated, as upstream.
func removedForRestartAll(prev v1.ContainerStatus) v1.ContainerStatus {
	st := prev
	if prev.State.Terminated == nil {
		st.ContainerID, st.ImageID = "", ""
	}
	st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
		Reason: podstatus.ReasonRestartingAllContainers, Message: podstatus.MessageRestartingAllContainers}}
	st.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason: podstatus.ReasonRestartingAllContainers, Message: podstatus.MessageRestartingAllContainers,
		ExitCode: podstatus.ExitCodeRestartingAllContainers}}
	st.RestartCount = prev.RestartCount + 1
	st.Ready = false
	started := false
	st.Started = &started
	return st
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
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: podstatus.ReasonContainerCreating}}
	default:
		t := podstatus.UnknownTermination()
		t.ContainerID = rc.ID.String()
		st.State = v1.ContainerState{Terminated: t}
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
		t.Reason = podstatus.ReasonCompleted
		if rc.ExitCode != 0 {
			t.Reason = podstatus.ReasonError
		}
	}
	return t
}

func findSpec(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}
