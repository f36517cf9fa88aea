package agenttest

import (
	"context"
	"fmt"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// FakeRuntime is a deterministic, in-memory nodekit.Runtime for unit tests.
// Containers it starts run until the test ends them (ExitContainer) or they
// are killed; IDs are fake://1, fake://2, ... in creation order; times come
// from the injected clock. Tests script failures with FailImage and
// SetUnavailable. It is safe for concurrent use.
type FakeRuntime struct {
	clock clock.PassiveClock

	mu          sync.Mutex
	next        int
	pods        map[types.UID]*fakePod
	imageErrs   map[string]nodekit.Reason
	unavailable error
	calls       []string
	// subscribers receive container events (ContainerEvents).
	subscribers map[int]*fakeSubscriber
	nextSub     int
	eventsErr   error
	// resizes holds each container's in-place resizes, oldest first.
	resizes map[nodekit.ContainerID][]v1.ResourceRequirements
}

type fakeSubscriber struct {
	out  chan<- nodekit.ContainerEvent
	stop chan error
	// queue holds events not yet delivered, so the fake never blocks
	// while holding its lock.
	queue chan nodekit.ContainerEvent
}

type fakePod struct {
	id, name, namespace string
	sandboxes           []*nodekit.SandboxStatus
	containers          []*nodekit.ContainerStatus // newest first
}

var _ nodekit.Runtime = (*FakeRuntime)(nil)

// NewFakeRuntime returns an empty fake runtime on the given clock.
func NewFakeRuntime(clk clock.PassiveClock) *FakeRuntime {
	return &FakeRuntime{clock: clk, pods: map[types.UID]*fakePod{}, imageErrs: map[string]nodekit.Reason{}, subscribers: map[int]*fakeSubscriber{},
		resizes: map[nodekit.ContainerID][]v1.ResourceRequirements{}}
}

// FailImage makes every start of a container with this image, or that
// mounts an image volume of this image (ActionError.Image then names it),
// fail with the reason (for example nodekit.ErrImagePull); an empty reason
// clears it.
func (f *FakeRuntime) FailImage(image string, reason nodekit.Reason) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reason == "" {
		delete(f.imageErrs, image)
		return
	}
	f.imageErrs[image] = reason
}

// failedImageVolume finds an image volume c mounts whose image FailImage
// fails. The caller holds f.mu.
func (f *FakeRuntime) failedImageVolume(pod *v1.Pod, c *v1.Container) (string, nodekit.Reason, bool) {
	for _, vm := range c.VolumeMounts {
		for _, vol := range pod.Spec.Volumes {
			if vol.Name != vm.Name || vol.Image == nil {
				continue
			}
			if reason, ok := f.imageErrs[vol.Image.Reference]; ok {
				return vol.Image.Reference, reason, true
			}
		}
	}
	return "", "", false
}

// SetUnavailable makes every call fail with err wrapped in
// nodekit.ErrRuntimeUnavailable; nil makes the runtime answer again.
func (f *FakeRuntime) SetUnavailable(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unavailable = err
}

// ExitContainer ends the newest running container of that name in the pod
// with the exit code, as if its process had exited.
func (f *FakeRuntime) ExitContainer(uid types.UID, name string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pods[uid]
	if p == nil {
		return fmt.Errorf("fake runtime: no pod %s", uid)
	}
	for _, c := range p.containers {
		if c.Name == name && c.State == nodekit.StateRunning {
			f.exitLocked(c, code, "")
			return nil
		}
	}
	return fmt.Errorf("fake runtime: no running container %q in pod %s", name, uid)
}

// ResizeContainer resizes a running container in place, as CRI
// UpdateContainerResources does (allocation.ContainerUpdater): the fake
// records the resources (Resizes) and the call ("ResizeContainer ID").
// A container that is not running is an error.
func (f *FakeRuntime) ResizeContainer(_ context.Context, id nodekit.ContainerID, r v1.ResourceRequirements) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "ResizeContainer "+id.String())
	if err := f.checkLocked(); err != nil {
		return err
	}
	if p, i := f.containerLocked(id); p == nil || p.containers[i].State != nodekit.StateRunning {
		return fmt.Errorf("fake runtime: no running container %s", id)
	}
	f.resizes[id] = append(f.resizes[id], *r.DeepCopy())
	return nil
}

// Resizes returns the in-place resizes of the newest container of that
// name in the pod, oldest first (ResizeContainer), and whether the pod has
// such a container.
func (f *FakeRuntime) Resizes(uid types.UID, name string) ([]v1.ResourceRequirements, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pods[uid]; p != nil {
		for _, c := range p.containers {
			if c.Name == name {
				return append([]v1.ResourceRequirements(nil), f.resizes[c.ID]...), true
			}
		}
	}
	return nil, false
}

// Calls returns the calls made so far, one line each ("SyncPod ns/name",
// "KillPod ns/name", ...), oldest first. The slice is the caller's.
func (f *FakeRuntime) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *FakeRuntime) exitLocked(c *nodekit.ContainerStatus, code int, reason string) {
	f.emitLocked(f.podOfLocked(c.ID), c.ID, nodekit.ContainerStoppedEvent)
	c.State = nodekit.StateExited
	c.ExitCode = code
	c.FinishedAt = f.clock.Now()
	if reason == "" {
		reason = "Completed"
		if code != 0 {
			reason = "Error"
		}
	}
	c.Reason = reason
}

func (f *FakeRuntime) checkLocked() error {
	if f.unavailable != nil {
		return fmt.Errorf("%w: %w", nodekit.ErrRuntimeUnavailable, f.unavailable)
	}
	return nil
}

func (f *FakeRuntime) newIDLocked() string {
	f.next++
	return fmt.Sprintf("%d", f.next)
}

// SyncPod implements nodekit.Runtime.
func (f *FakeRuntime) SyncPod(ctx context.Context, req nodekit.SyncPodRequest) *nodekit.SyncResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &nodekit.SyncResult{}
	pod := req.Pod
	f.calls = append(f.calls, "SyncPod "+pod.Namespace+"/"+pod.Name)
	if err := f.checkLocked(); err != nil {
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, err)
		return res
	}
	p := f.pods[pod.UID]
	if p == nil {
		p = &fakePod{id: string(pod.UID), name: pod.Name, namespace: pod.Namespace}
		f.pods[pod.UID] = p
	}
	a := req.Actions
	f.killForSyncLocked(p, a, res)
	res.SandboxID = f.sandboxForSyncLocked(p, pod, a, res)
	if len(p.sandboxes) > 0 {
		res.PodIPs = p.sandboxes[0].IPs
	}
	for _, i := range a.InitContainersToStart {
		c := &pod.Spec.InitContainers[i]
		err := f.startContainerLocked(ctx, req, p, res, c, nodekit.ActionInitContainer)
		res.Add(nodekit.ActionInitContainer, c.Name, err)
		if err != nil {
			return res
		}
	}
	for _, i := range a.ContainersToStart {
		c := &pod.Spec.Containers[i]
		res.Add(nodekit.ActionStartContainer, c.Name, f.startContainerLocked(ctx, req, p, res, c, nodekit.ActionStartContainer))
	}
	return res
}

// killForSyncLocked carries out the kills a asks for: the whole pod, then
// each listed container that still runs (each recorded in res).
func (f *FakeRuntime) killForSyncLocked(p *fakePod, a nodekit.PodActions, res *nodekit.SyncResult) {
	if a.KillPod {
		f.killLocked(p)
	}
	for id := range a.ContainersToKill {
		for _, c := range p.containers {
			if c.ID == id && c.State == nodekit.StateRunning {
				f.exitLocked(c, 137, "Killed")
			}
		}
		res.Add(nodekit.ActionKillContainer, a.ContainersToKill[id].Name, nil)
	}
}

// sandboxForSyncLocked returns the sandbox the pod's containers start in:
// a new one when a asks for it (older ones become not ready), else
// a.SandboxID, else the newest sandbox if it is ready; "" when there is
// none.
func (f *FakeRuntime) sandboxForSyncLocked(p *fakePod, pod *v1.Pod, a nodekit.PodActions, res *nodekit.SyncResult) string {
	sandbox := a.SandboxID
	if a.CreateSandbox {
		for _, sb := range p.sandboxes {
			sb.State = nodekit.SandboxNotReady
		}
		id := f.newIDLocked()
		ip := fmt.Sprintf("10.244.0.%d", f.next%250+1)
		sb := &nodekit.SandboxStatus{ID: "sandbox-" + id, State: nodekit.SandboxReady, CreatedAt: f.clock.Now(), IPs: []string{ip}, Attempt: a.Attempt, HostNetwork: pod.Spec.HostNetwork}
		p.sandboxes = append([]*nodekit.SandboxStatus{sb}, p.sandboxes...)
		sandbox = sb.ID
		res.Add(nodekit.ActionCreatePodSandbox, pod.Name, nil)
	}
	if sandbox == "" && len(p.sandboxes) > 0 && p.sandboxes[0].State == nodekit.SandboxReady {
		sandbox = p.sandboxes[0].ID
	}
	return sandbox
}

// startContainerLocked starts c in the sandbox res names, failing as the
// configured image errors and req.Options say; a restarted container
// carries its predecessor's restart count plus one.
func (f *FakeRuntime) startContainerLocked(ctx context.Context, req nodekit.SyncPodRequest, p *fakePod, res *nodekit.SyncResult, c *v1.Container, action nodekit.Action) error {
	pod := req.Pod
	if res.SandboxID == "" {
		return &nodekit.ActionError{Action: nodekit.ActionCreatePodSandbox, Target: pod.Name, Reason: nodekit.ErrCreatePodSandbox, Message: "no ready sandbox"}
	}
	if ref, reason, ok := f.failedImageVolume(pod, c); ok {
		return &nodekit.ActionError{Action: action, Target: c.Name, Reason: reason, Image: ref, Message: fmt.Sprintf("fake: image %q: %s", ref, reason)}
	}
	if reason, ok := f.imageErrs[c.Image]; ok {
		return &nodekit.ActionError{Action: action, Target: c.Name, Reason: reason, Message: fmt.Sprintf("fake: image %q: %s", c.Image, reason)}
	}
	if req.Options != nil {
		if _, err := req.Options(ctx, pod, c, res.PodIPs); err != nil {
			return &nodekit.ActionError{Action: action, Target: c.Name, Reason: nodekit.ErrCreateContainerConfig, Message: err.Error(), Err: err}
		}
	}
	restarts := 0
	for _, old := range p.containers {
		if old.Name == c.Name {
			restarts = old.RestartCount + 1
			break
		}
	}
	now := f.clock.Now()
	id := nodekit.ContainerID{Type: "fake", ID: f.newIDLocked()}
	p.containers = append([]*nodekit.ContainerStatus{{
		ID: id, Name: c.Name, State: nodekit.StateRunning,
		CreatedAt: now, StartedAt: now, Image: c.Image, ImageID: "sha256:fake-" + c.Image, ImageRef: c.Image, RestartCount: restarts,
	}}, p.containers...)
	f.emitLocked(pod.UID, id, nodekit.ContainerStartedEvent)
	return nil
}

func (f *FakeRuntime) killLocked(p *fakePod) {
	for _, c := range p.containers {
		if c.State == nodekit.StateRunning {
			f.exitLocked(c, 137, "Killed")
		}
	}
	for _, sb := range p.sandboxes {
		sb.State = nodekit.SandboxNotReady
	}
}

// KillPod implements nodekit.Runtime. The fake stops everything at once;
// grace periods are not simulated.
func (f *FakeRuntime) KillPod(_ context.Context, req nodekit.KillPodRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Running == nil {
		return nil
	}
	f.calls = append(f.calls, "KillPod "+req.Running.Namespace+"/"+req.Running.Name)
	if err := f.checkLocked(); err != nil {
		return err
	}
	if p := f.pods[req.Running.ID]; p != nil {
		f.killLocked(p)
	}
	return nil
}

// ListPods implements nodekit.Runtime.
func (f *FakeRuntime) ListPods(_ context.Context, all bool) ([]*nodekit.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return nil, err
	}
	var out []*nodekit.Pod
	for uid, p := range f.pods {
		rp := &nodekit.Pod{ID: uid, Name: p.name, Namespace: p.namespace}
		for _, sb := range p.sandboxes {
			if !all && sb.State != nodekit.SandboxReady {
				continue
			}
			state := nodekit.StateExited
			if sb.State == nodekit.SandboxReady {
				state = nodekit.StateRunning
			}
			rp.Sandboxes = append(rp.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{Type: "fake", ID: sb.ID}, State: state, CreatedAt: sb.CreatedAt})
			if sb.CreatedAt.After(rp.CreatedAt) {
				rp.CreatedAt = sb.CreatedAt
			}
		}
		for _, c := range p.containers {
			if !all && c.State != nodekit.StateRunning {
				continue
			}
			rp.Containers = append(rp.Containers, &nodekit.Container{ID: c.ID, Name: c.Name, Image: c.Image, ImageID: c.ImageID, ImageRef: c.ImageRef, State: c.State, CreatedAt: c.CreatedAt})
		}
		if len(rp.Sandboxes)+len(rp.Containers) > 0 {
			out = append(out, rp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetPodStatus implements nodekit.Runtime.
func (f *FakeRuntime) GetPodStatus(_ context.Context, uid types.UID, name, namespace string) (*nodekit.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return nil, err
	}
	st := &nodekit.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: f.clock.Now()}
	p := f.pods[uid]
	if p == nil {
		return st, nil
	}
	for _, sb := range p.sandboxes {
		c := *sb
		c.IPs = append([]string(nil), sb.IPs...)
		st.Sandboxes = append(st.Sandboxes, &c)
	}
	if len(st.Sandboxes) > 0 {
		st.IPs = st.Sandboxes[0].IPs
	}
	for _, c := range p.containers {
		cp := *c
		st.Containers = append(st.Containers, &cp)
	}
	return st, nil
}

// RemoveContainer removes a stopped container, as garbage collection does.
func (f *FakeRuntime) RemoveContainer(_ context.Context, id nodekit.ContainerID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "RemoveContainer "+id.String())
	if err := f.checkLocked(); err != nil {
		return err
	}
	p, i := f.containerLocked(id)
	if p == nil {
		return nil
	}
	if p.containers[i].State == nodekit.StateRunning {
		return fmt.Errorf("fake runtime: container %s is running", id)
	}
	p.containers = append(p.containers[:i], p.containers[i+1:]...)
	f.emitLocked(types.UID(p.id), id, nodekit.ContainerDeletedEvent)
	return nil
}

// containerLocked finds the container with that ID: its pod and index
// there; a nil pod when there is none.
func (f *FakeRuntime) containerLocked(id nodekit.ContainerID) (*fakePod, int) {
	for _, p := range f.pods {
		for i, c := range p.containers {
			if c.ID == id {
				return p, i
			}
		}
	}
	return nil, -1
}

// RemovePodSandbox removes a sandbox and whatever containers remain in the
// pod when it was the last one.
func (f *FakeRuntime) RemovePodSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "RemovePodSandbox "+id)
	if err := f.checkLocked(); err != nil {
		return err
	}
	for uid, p := range f.pods {
		for i, sb := range p.sandboxes {
			if sb.ID != id {
				continue
			}
			p.sandboxes = append(p.sandboxes[:i], p.sandboxes[i+1:]...)
			if len(p.sandboxes) == 0 {
				delete(f.pods, uid)
			}
			return nil
		}
	}
	return nil
}

// ContainerEvents implements the optional event-stream capability
// (pleg.ContainerEventer): starts, exits and removals are streamed to out
// until ctx ends, BreakEvents breaks the stream, or SetEventsError makes it
// fail.
func (f *FakeRuntime) ContainerEvents(ctx context.Context, out chan<- nodekit.ContainerEvent) error {
	f.mu.Lock()
	if f.eventsErr != nil {
		err := f.eventsErr
		f.mu.Unlock()
		return fmt.Errorf("fake runtime: container events: %w", err)
	}
	sub := &fakeSubscriber{out: out, stop: make(chan error, 1), queue: make(chan nodekit.ContainerEvent, 10000)}
	id := f.nextSub
	f.nextSub++
	f.subscribers[id] = sub
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subscribers, id)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-sub.stop:
			return fmt.Errorf("fake runtime: container event stream broken: %w", err)
		case ev := <-sub.queue:
			select {
			case out <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// BreakEvents ends every open event stream with err, as a runtime restart
// would.
func (f *FakeRuntime) BreakEvents(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subscribers {
		select {
		case s.stop <- err:
		default:
		}
	}
}

// SetEventsError makes new event streams fail at once with err (a runtime
// without the capability); nil lets them open again.
func (f *FakeRuntime) SetEventsError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eventsErr = err
}

func (f *FakeRuntime) emitLocked(uid types.UID, id nodekit.ContainerID, t nodekit.ContainerEventType) {
	ev := nodekit.ContainerEvent{PodID: uid, Container: id, Type: t, Time: f.clock.Now()}
	for _, s := range f.subscribers {
		select {
		case s.queue <- ev:
		default:
		}
	}
}

func (f *FakeRuntime) podOfLocked(id nodekit.ContainerID) types.UID {
	for uid, p := range f.pods {
		for _, c := range p.containers {
			if c.ID == id {
				return uid
			}
		}
	}
	return ""
}
