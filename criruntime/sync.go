package criruntime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// minGracePeriod is the shortest stop timeout given to a container, as
// upstream: even a forced deletion gives the process a moment.
const minGracePeriod = 2 * time.Second

// syncState is a SyncPod request plus what SyncPod learned about the sandbox.
type syncState struct {
	nodekit.SyncPodRequest
	SandboxID     string
	SandboxConfig *runtimeapi.PodSandboxConfig
	PodIPs        []string
	// imageVolumes are the pod's image volume pulls so far, made before
	// the start of the first container that mounts each (imagevolume.go).
	imageVolumes map[string]imageVolume
	// failedPulls are the container images whose pull failed in this sync,
	// with the failure (image.go).
	failedPulls map[string]*nodekit.ActionError
}

// SyncPod implements nodekit.Runtime.
func (r *Runtime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	res := &nodekit.SyncResult{}
	pod := req.Pod
	if pod == nil {
		res.Add(nodekit.ActionCreatePodSandbox, "", &nodekit.ActionError{Action: nodekit.ActionCreatePodSandbox, Reason: nodekit.ErrConfigPodSandbox, Message: "SyncPodRequest.Pod is nil"})
		return res
	}
	a := req.Actions
	if a.KillPod {
		running := runningFromStatus(req.Status)
		err := r.KillPod(ctx, nodekit.KillPodRequest{Pod: pod, Running: running})
		res.Add(nodekit.ActionKillPodSandbox, pod.Name, err)
		if err != nil {
			return res
		}
	}
	r.killContainers(ctx, pod, a.ContainersToKill, res)

	st, ok := r.syncSandbox(ctx, req, res)
	if !ok {
		return res
	}
	res.SandboxID, res.PodIPs = st.SandboxID, st.PodIPs
	r.startContainers(ctx, st, res)
	return res
}

// syncSandbox settles the sandbox the pod's containers start in: a new
// one when the actions ask for it, else the one they name, else the
// newest ready one. It builds the sandbox config either way (containers
// are created with it). ok is false when there is no sandbox to start
// containers in or it could not be configured or created; res then holds
// the failure.
func (r *Runtime) syncSandbox(ctx context.Context, req nodekit.SyncPodRequest, res *nodekit.SyncResult) (st *syncState, ok bool) {
	pod, a := req.Pod, req.Actions
	st = &syncState{SyncPodRequest: req}
	st.SandboxID = a.SandboxID
	if req.Status != nil {
		st.PodIPs = req.Status.IPs
	}
	attempt := a.Attempt
	if !a.CreateSandbox && st.SandboxID == "" {
		if sb := newestReadySandbox(req.Status); sb != nil {
			st.SandboxID, attempt, st.PodIPs = sb.ID, sb.Attempt, sb.IPs
		}
	}
	if !a.CreateSandbox && st.SandboxID == "" && (len(a.ContainersToStart) > 0 || len(a.InitContainersToStart) > 0 || len(a.EphemeralContainersToStart) > 0) {
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, &nodekit.ActionError{
			Action: nodekit.ActionCreatePodSandbox, Target: pod.Name, Reason: nodekit.ErrCreatePodSandbox,
			Message: "no ready sandbox to start containers in and CreateSandbox is false"})
		return nil, false
	}
	var err error
	if st.SandboxConfig, err = r.sandboxConfig(ctx, pod, attempt, req.Sandbox); err != nil {
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, r.sandboxConfigError(pod, a.CreateSandbox, err))
		return nil, false
	}
	if a.CreateSandbox {
		id, ips, err := r.createSandbox(ctx, pod, st.SandboxConfig, req.Sandbox.RuntimeHandler)
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, err)
		if err != nil {
			return nil, false
		}
		st.SandboxID, st.PodIPs = id, ips
	}
	return st, true
}

// startContainers starts the containers the actions list, in st's
// sandbox: ephemeral containers first, then init containers in order (the
// first failure stops the sync, as later ones depend on it), then regular
// containers. An index out of range is recorded as a failure.
func (r *Runtime) startContainers(ctx context.Context, st *syncState, res *nodekit.SyncResult) {
	pod, a := st.Pod, st.Actions
	for _, i := range a.EphemeralContainersToStart {
		if i < 0 || i >= len(pod.Spec.EphemeralContainers) {
			res.Add(nodekit.ActionStartContainer, strconv.Itoa(i), fmt.Errorf("ephemeral container index %d out of range", i))
			continue
		}
		ec := &pod.Spec.EphemeralContainers[i]
		c := (*v1.Container)(&ec.EphemeralContainerCommon)
		res.Add(nodekit.ActionStartContainer, c.Name, r.startContainerIn(ctx, st, c, false, targetID(st.Status, ec.TargetContainerName)))
	}
	for _, i := range a.InitContainersToStart {
		if i < 0 || i >= len(pod.Spec.InitContainers) {
			res.Add(nodekit.ActionInitContainer, strconv.Itoa(i), fmt.Errorf("init container index %d out of range", i))
			return
		}
		c := &pod.Spec.InitContainers[i]
		err := r.startContainer(ctx, st, c, true)
		res.Add(nodekit.ActionInitContainer, c.Name, err)
		if err != nil {
			return // later init containers depend on this one
		}
	}
	for _, i := range a.ContainersToStart {
		if i < 0 || i >= len(pod.Spec.Containers) {
			res.Add(nodekit.ActionStartContainer, strconv.Itoa(i), fmt.Errorf("container index %d out of range", i))
			continue
		}
		c := &pod.Spec.Containers[i]
		res.Add(nodekit.ActionStartContainer, c.Name, r.startContainer(ctx, st, c, false))
	}
}

// killContainers stops the listed containers in parallel.
func (r *Runtime) killContainers(ctx context.Context, pod *v1.Pod, kill map[nodekit.ContainerID]nodekit.KillInfo, res *nodekit.SyncResult) {
	if len(kill) == 0 {
		return
	}
	type out struct {
		name string
		err  error
	}
	ch := make(chan out, len(kill))
	for id, info := range kill {
		go func() {
			grace := gracePeriod(pod, nil, info.GracePeriod)
			ch <- out{info.Name, r.stopContainer(ctx, pod, id, info.Name, info.Message, grace)}
		}()
	}
	for range kill {
		o := <-ch
		res.Add(nodekit.ActionKillContainer, o.name, o.err)
	}
}

// stopContainer asks the runtime to stop a container within grace, then
// kill it.
func (r *Runtime) stopContainer(ctx context.Context, pod *v1.Pod, id nodekit.ContainerID, name, message string, grace time.Duration) error {
	if pod != nil {
		if message == "" {
			message = "Stopping container " + name
		}
		r.events.Eventf(pod, v1.EventTypeNormal, "Killing", "%s", message)
	}
	secs := int64((grace + time.Second - 1) / time.Second)
	if err := r.rs.StopContainer(ctx, id.ID, secs); err != nil {
		return &nodekit.ActionError{Action: nodekit.ActionKillContainer, Target: name, Reason: nodekit.ErrKillContainer, Message: err.Error(), Err: err}
	}
	return nil
}

// gracePeriod picks a container's stop timeout: the override, else the
// pod's deletion grace period, else its terminationGracePeriodSeconds, else
// the value recorded on the container when it was created (orphans); never
// below minGracePeriod.
func gracePeriod(pod *v1.Pod, recorded *int64, override *time.Duration) time.Duration {
	g := 30 * time.Second
	switch {
	case override != nil:
		g = *override
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		g = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		g = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	case recorded != nil:
		g = time.Duration(*recorded) * time.Second
	}
	if g < minGracePeriod {
		g = minGracePeriod
	}
	return g
}

// KillPod implements nodekit.Runtime: regular containers stop in parallel,
// then restartable init containers (sidecars) in reverse order with what
// remains of the grace period, then the sandboxes.
func (r *Runtime) KillPod(ctx context.Context, req nodekit.KillPodRequest) error {
	if req.Running == nil {
		return nil
	}
	pod := req.Pod
	sidecarOrder := map[string]int{}
	if pod != nil {
		for i := range pod.Spec.InitContainers {
			if podutil.IsSidecar(&pod.Spec.InitContainers[i]) {
				sidecarOrder[pod.Spec.InitContainers[i].Name] = i
			}
		}
	}
	var regular, sidecars []*nodekit.Container
	for _, c := range req.Running.Containers {
		if _, ok := sidecarOrder[c.Name]; ok {
			sidecars = append(sidecars, c)
		} else {
			regular = append(regular, c)
		}
	}
	start := r.cfg.Clock.Now()
	var mu sync.Mutex
	var errs []error
	stopAll := func(cs []*nodekit.Container, grace time.Duration) {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.stopContainer(ctx, pod, c.ID, c.Name, "", grace); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	var recorded *int64
	if pod == nil {
		recorded = r.recordedGracePeriod(ctx, req.Running)
	}
	grace := gracePeriod(pod, recorded, req.GracePeriod)
	stopAll(regular, grace)
	// Sidecars stop last, in reverse start order, within what is left.
	sort.SliceStable(sidecars, func(i, j int) bool { return sidecarOrder[sidecars[i].Name] > sidecarOrder[sidecars[j].Name] })
	for _, c := range sidecars {
		left := grace - r.cfg.Clock.Since(start)
		stopAll([]*nodekit.Container{c}, max(left, minGracePeriod))
	}
	for _, sb := range req.Running.Sandboxes {
		if err := r.rs.StopPodSandbox(ctx, sb.ID.ID); err != nil {
			errs = append(errs, &nodekit.ActionError{Action: nodekit.ActionKillPodSandbox, Target: sb.ID.ID, Reason: nodekit.ErrKillPodSandbox, Message: err.Error(), Err: err})
		}
	}
	return errors.Join(errs...)
}

// recordedGracePeriod reads the grace period stored on a container of an
// orphaned pod.
func (r *Runtime) recordedGracePeriod(ctx context.Context, p *nodekit.Pod) *int64 {
	for _, c := range p.Containers {
		st, err := r.rs.ContainerStatus(ctx, c.ID.ID, false)
		if err != nil {
			continue
		}
		if v, ok := st.GetStatus().GetAnnotations()[annotationGracePeriod]; ok {
			if g, err := strconv.ParseInt(v, 10, 64); err == nil {
				return &g
			}
		}
	}
	return nil
}

func newestReadySandbox(s *nodekit.PodStatus) *nodekit.SandboxStatus {
	if s == nil {
		return nil
	}
	for _, sb := range s.Sandboxes {
		if sb.State == nodekit.SandboxReady {
			return sb
		}
	}
	return nil
}

// runningFromStatus turns a status into the list KillPod takes.
func runningFromStatus(s *nodekit.PodStatus) *nodekit.Pod {
	if s == nil {
		return nil
	}
	p := &nodekit.Pod{ID: s.ID, Name: s.Name, Namespace: s.Namespace}
	for _, c := range s.Containers {
		if c.State == nodekit.StateRunning {
			p.Containers = append(p.Containers, &nodekit.Container{ID: c.ID, Name: c.Name, State: c.State})
		}
	}
	for _, sb := range s.Sandboxes {
		p.Sandboxes = append(p.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{ID: sb.ID}})
	}
	return p
}
