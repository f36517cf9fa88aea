package syncloop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/poddir"
	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/podutil"
)

// Crash-loop and image-pull back-off, as upstream.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
	// A container that ran this long before exiting starts over at initial.
	backoffResetAfter = 10 * time.Minute
)

// syncer implements podSyncer: it computes statuses and actions and has
// the runtime carry them out.
type syncer struct {
	runtime  nodekit.Runtime
	status   StatusManager
	mirror   MirrorClient
	volumes  VolumeManager
	dra      DynamicResources
	secrets  SecretGetter
	events   EventRecorder
	probes   ProbeResults
	workers  ProbeWorkers
	hooks    HookRunner
	options  nodekit.ContainerOptionsFunc
	sandbox  func(ctx context.Context, pod *v1.Pod) (nodekit.SandboxOptions, error)
	hash     func(*v1.Container) uint64
	clock    clock.PassiveClock
	rootDir  string
	nodeIPs  []string
	metrics  Metrics
	resize   Resizer
	health   []ResourceHealth
	relist   Relister
	rro      RecursiveReadOnlyChecker
	crash    *backoff
	pull     *backoff
	reasonMu sync.Mutex
	reasons  map[types.UID]map[string]waitReason
	// pullErrs are the messages of the last failed pulls, by pullKey, for
	// the image-pull back-off's message (pullbackoff.go).
	pullErrs map[string]string
}

func (s *syncer) reasonsOf(uid types.UID) map[string]waitReason {
	s.reasonMu.Lock()
	defer s.reasonMu.Unlock()
	out := map[string]waitReason{}
	for k, v := range s.reasons[uid] {
		out[k] = v
	}
	return out
}

func (s *syncer) setReason(uid types.UID, name string, r *waitReason) {
	s.reasonMu.Lock()
	defer s.reasonMu.Unlock()
	if r == nil {
		delete(s.reasons[uid], name)
		return
	}
	if s.reasons[uid] == nil {
		s.reasons[uid] = map[string]waitReason{}
	}
	s.reasons[uid][name] = *r
}

func (s *syncer) forget(uid types.UID) {
	s.reasonMu.Lock()
	defer s.reasonMu.Unlock()
	delete(s.reasons, uid)
	s.forgetPullsLocked(string(uid))
}

// oldStatus is the status to build on: the agent's own, else the API's.
func (s *syncer) oldStatus(pod *v1.Pod) v1.PodStatus {
	if st, ok := s.status.GetPodStatus(pod.UID); ok {
		return st
	}
	return *pod.Status.DeepCopy()
}

func (s *syncer) computeStatus(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, terminal bool) v1.PodStatus {
	old := s.oldStatus(pod)
	st := apiStatus(statusInput{
		pod: pod, runtime: rs, old: old, terminal: terminal,
		reasons: s.reasonsOf(pod.UID), probes: s.probes, nodeIPs: s.nodeIPs, now: s.clock.Now(),
		rro: s.rro != nil && needsRRO(pod) && s.rro.SupportsRecursiveReadOnly(ctx, pod),
	})
	s.resizeStatus(ctx, pod, &old, &st)
	s.resourceHealth(pod, &st)
	return st
}

// RecursiveReadOnlyChecker tells whether the runtime handler a pod runs
// with supports recursive read-only mounts (volumemgr's, the same shape).
type RecursiveReadOnlyChecker interface {
	SupportsRecursiveReadOnly(ctx context.Context, pod *v1.Pod) bool
}

// needsRRO: a container of pod asks for a recursive read-only mode.
func needsRRO(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, vm := range c.VolumeMounts {
				if vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != v1.RecursiveReadOnlyDisabled {
					return true
				}
			}
		}
	}
	return false
}

// resourceHealth sets the regular containers' allocatedResourcesStatus
// from the providers, as upstream sets it on every status it generates
// (init and ephemeral containers get none, as upstream).
func (s *syncer) resourceHealth(pod *v1.Pod, st *v1.PodStatus) {
	if len(s.health) == 0 {
		return
	}
	for i := range st.ContainerStatuses {
		var all []v1.ResourceStatus
		for _, h := range s.health {
			all = append(all, h.AllocatedResourcesStatus(pod, st.ContainerStatuses[i].Name)...)
		}
		st.ContainerStatuses[i].AllocatedResourcesStatus = all
	}
}

// setStatus hands a status to the status manager; a refusal is logged, not
// retried: the next sync computes a fresh one.
func (s *syncer) setStatus(ctx context.Context, pod *v1.Pod, st v1.PodStatus) {
	if err := s.status.SetPodStatus(pod, st); err != nil {
		klog.FromContext(ctx).Error(err, "Status manager refused a pod status", "pod", klog.KObj(pod))
	}
}

// PodDir is where the agent keeps a pod's files, as upstream:
// ROOT/pods/UID.
func PodDir(root string, uid types.UID) string { return poddir.Pod(root, uid) }

// SyncPod brings a running pod toward its spec: it publishes the pod's
// status, prepares what the pod needs before its sandbox, decides the
// actions and has the runtime carry them out. It reports true once the pod
// has reached a terminal phase.
func (s *syncer) SyncPod(ctx context.Context, t UpdateType, pod, mirror *v1.Pod, rs *nodekit.PodStatus) (bool, error) {
	pod = s.allocated(ctx, pod)
	st, done := s.syncStatus(ctx, pod, rs)
	if done {
		return true, nil
	}
	if err := s.preparePod(ctx, pod, mirror); err != nil {
		return false, err
	}
	if podstatus.IsRestartingAll(&st) {
		// A container exited with a RestartAllContainers rule: remove them
		// all, then sync again at once to start them (restartall.go).
		removed, err := s.restartAll(ctx, pod, rs)
		if err != nil || !removed {
			return false, err
		}
		return false, &errRetryAfter{after: 0, err: errors.New("restarting all containers")}
	}
	secrets := s.pullSecrets(ctx, pod)

	actions := computeActions(pod, rs, s.probes, s.hash)
	retry := s.applyBackoff(pod, rs, &actions)
	rs, stopped := s.resizeActions(ctx, pod, rs, &actions)
	if left, ok := deadlineLeft(pod, st, s.clock.Now()); ok && (retry == 0 || left < retry) {
		retry = left // come back when the active deadline passes
	}
	if nothingToDo(actions) {
		if retry > 0 {
			s.setStatus(ctx, pod, s.computeStatus(ctx, pod, rs, false))
			return false, &errRetryAfter{after: retry, err: errors.New("back-off")}
		}
		return false, nil
	}
	err := s.runActions(ctx, pod, rs, actions, secrets)
	s.retryResize(ctx, pod, stopped)
	if err != nil {
		return false, err
	}
	if retry > 0 {
		return false, &errRetryAfter{after: retry, err: errors.New("back-off")}
	}
	return false, nil
}

// syncStatus computes and publishes the pod's status before its sync and
// says whether the pod is done (its phase is terminal, before or now): a
// pod past its activeDeadlineSeconds fails here with DeadlineExceeded. A
// pod seen running for the first time is counted as started.
func (s *syncer) syncStatus(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (v1.PodStatus, bool) {
	old := s.oldStatus(pod)
	if old.Phase == v1.PodSucceeded || old.Phase == v1.PodFailed {
		return old, true
	}
	if deadlineExceeded(pod, old, s.clock.Now()) {
		st := s.computeStatus(ctx, pod, rs, true)
		st.Phase, st.Reason, st.Message = v1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		s.setStatus(ctx, pod, st)
		s.events.Eventf(pod, v1.EventTypeNormal, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
		return st, true
	}
	st := s.computeStatus(ctx, pod, rs, false)
	if (old.Phase == v1.PodPending || old.Phase == "") && st.Phase == v1.PodRunning {
		s.metrics.ObservePodStarted(pod, firstSeen(pod), s.clock.Now())
	}
	s.setStatus(ctx, pod, st)
	return st, st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed
}

// preparePod readies what a pod needs before its sandbox, in upstream's
// order: probe workers, the mirror pod of a static pod (a failure is only
// logged), the pod directory, volumes, and dynamic resources.
func (s *syncer) preparePod(ctx context.Context, pod, mirror *v1.Pod) error {
	if s.workers != nil {
		s.workers.AddPod(ctx, pod)
	}
	if podutil.IsStatic(pod) && s.mirror != nil {
		if err := s.ensureMirror(ctx, pod, mirror); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to create a mirror pod", "pod", klog.KObj(pod))
		}
	}
	if err := os.MkdirAll(filepath.Join(PodDir(s.rootDir, pod.UID), "containers"), 0o750); err != nil {
		return fmt.Errorf("create pod directory: %w", err)
	}
	if s.volumes != nil {
		if err := s.volumes.WaitForAttachAndMount(ctx, pod); err != nil {
			s.events.Eventf(pod, v1.EventTypeWarning, "FailedMount", "Unable to attach or mount volumes: %v", err)
			return fmt.Errorf("volumes of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	if s.dra != nil && usesClaims(pod) {
		// Before the sandbox, as upstream; prepared claims cost nothing.
		if err := s.dra.PrepareResources(ctx, pod); err != nil {
			s.events.Eventf(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", err)
			return fmt.Errorf("dynamic resources of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return nil
}

// runActions has the runtime carry out the actions, with the pod's sandbox
// options, records why each container start failed, runs the postStart
// hooks and asks for a relist when the runtime acted. On failure it
// publishes the status at once, so the reasons show before the next sync.
func (s *syncer) runActions(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, actions nodekit.PodActions, secrets []v1.Secret) error {
	sbOpts := nodekit.SandboxOptions{}
	if s.sandbox != nil {
		var err error
		if sbOpts, err = s.sandbox(ctx, pod); err != nil {
			s.events.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "%v", err)
			return err
		}
	}
	res := s.runtime.SyncPod(ctx, nodekit.SyncPodRequest{
		Pod: pod, Status: rs, Actions: actions, PullSecrets: secrets, Sandbox: sbOpts, Options: s.options,
	})
	s.recordStartResults(pod, res)
	s.runPostStartHooks(ctx, pod, res)
	err := res.Err()
	if err == nil && len(res.Results) > 0 && s.relist != nil {
		s.relist.RequestRelist(ctx, pod.UID, pod.Name, pod.Namespace)
	}
	if err != nil {
		// Show the failure reasons now rather than at the next sync.
		s.setStatus(ctx, pod, s.computeStatus(ctx, pod, rs, false))
		return err
	}
	return nil
}

// recordStartResults keeps, per container the runtime tried to start, why
// it waits (none after a success), and grows the image-pull back-off of
// each image that failed to pull, once per sync.
func (s *syncer) recordStartResults(pod *v1.Pod, res *nodekit.SyncResult) {
	failedPulls := map[string]bool{}
	for _, r := range res.Results {
		if r.Action != nodekit.ActionStartContainer && r.Action != nodekit.ActionInitContainer {
			continue
		}
		var ae *nodekit.ActionError
		switch {
		case r.Err == nil:
			s.setReason(pod.UID, r.Target, nil)
		case errors.As(r.Err, &ae):
			s.setReason(pod.UID, r.Target, &waitReason{Reason: string(ae.Reason), Message: ae.Message, Image: ae.Image})
			if ae.Reason == nodekit.ErrImagePull {
				c := findSpec(pod.Spec.Containers, r.Target)
				if c == nil {
					c = findSpec(pod.Spec.InitContainers, r.Target)
				}
				if c != nil {
					s.pullFailed(pod, c, ae, failedPulls)
				}
			}
		default:
			s.setReason(pod.UID, r.Target, &waitReason{Reason: string(nodekit.ErrRunContainer), Message: r.Err.Error()})
		}
	}
}

func nothingToDo(a nodekit.PodActions) bool {
	return !a.KillPod && !a.CreateSandbox && len(a.ContainersToKill) == 0 &&
		len(a.ContainersToStart) == 0 && len(a.InitContainersToStart) == 0 && len(a.EphemeralContainersToStart) == 0
}

// applyBackoff removes from the actions the containers that are in
// crash-loop or image-pull back-off, records why, and returns how long
// until the earliest of them may start (0 when none is held back).
func (s *syncer) applyBackoff(pod *v1.Pod, rs *nodekit.PodStatus, a *nodekit.PodActions) time.Duration {
	var wait time.Duration
	hold := func(c *v1.Container) bool {
		cs := rs.FindContainer(c.Name)
		if in, left := s.holdForPull(pod, c); in {
			if wait == 0 || left < wait {
				wait = left
			}
			return true
		}
		if cs == nil || cs.State != nodekit.StateExited || cs.FinishedAt.IsZero() {
			return false
		}
		key := s.crashKey(pod, c)
		if cs.FinishedAt.Sub(cs.StartedAt) >= backoffResetAfter {
			s.crash.Reset(key)
		}
		if in, left := s.crash.InBackoffSince(key, cs.FinishedAt); in {
			msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", s.crash.Delay(key), c.Name, pod.Name, pod.Namespace, pod.UID)
			s.setReason(pod.UID, c.Name, &waitReason{Reason: string(nodekit.ErrCrashLoopBackOff), Message: msg})
			s.events.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID)
			if wait == 0 || left < wait {
				wait = left
			}
			return true
		}
		s.crash.Next(key)
		return false
	}
	keep := a.InitContainersToStart[:0:0]
	for _, i := range a.InitContainersToStart {
		if hold(&pod.Spec.InitContainers[i]) {
			break // later init containers wait for this one
		}
		keep = append(keep, i)
	}
	a.InitContainersToStart = keep
	keep = a.ContainersToStart[:0:0]
	for _, i := range a.ContainersToStart {
		if !hold(&pod.Spec.Containers[i]) {
			keep = append(keep, i)
		}
	}
	a.ContainersToStart = keep
	return wait
}

// crashKey names a container's crash-loop back-off. It includes the
// container's hash, as upstream, so a changed spec (a new image) starts
// with no back-off.
func (s *syncer) crashKey(pod *v1.Pod, c *v1.Container) string {
	key := string(pod.UID) + "/" + c.Name
	if s.hash != nil {
		key += "/" + strconv.FormatUint(s.hash(c), 16)
	}
	return key
}

// deadlineLeft is the time until the pod's active deadline, if it has one.
func deadlineLeft(pod *v1.Pod, st v1.PodStatus, now time.Time) (time.Duration, bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil || st.StartTime == nil {
		return 0, false
	}
	left := st.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now)
	return max(left, time.Millisecond), true
}

func deadlineExceeded(pod *v1.Pod, st v1.PodStatus, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || st.StartTime == nil {
		return false
	}
	return now.Sub(st.StartTime.Time) >= time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second
}

func (s *syncer) pullSecrets(ctx context.Context, pod *v1.Pod) []v1.Secret {
	if s.secrets == nil {
		return nil
	}
	var out []v1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		sec, err := s.secrets.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			klog.FromContext(ctx).Info("Unable to retrieve pull secret; the image pull may fail", "pod", klog.KObj(pod), "secret", ref.Name, "err", err)
			continue
		}
		out = append(out, *sec)
	}
	return out
}

// ensureMirror creates the static pod's mirror, replacing one that belongs
// to another version of the manifest.
func (s *syncer) ensureMirror(ctx context.Context, pod, mirror *v1.Pod) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	if mirror != nil {
		if mirror.DeletionTimestamp == nil && mirror.Annotations[podutil.ConfigMirrorAnnotation] == pod.Annotations[podutil.ConfigHashAnnotation] {
			return nil
		}
		uid := mirror.UID
		if _, err := s.mirror.DeleteMirrorPod(ctx, podutil.FullName(mirror), &uid); err != nil {
			return err
		}
	}
	return s.mirror.CreateMirrorPod(ctx, pod)
}

// SyncTerminatingPod stops every container of the pod within the grace
// period and records the final status.
func (s *syncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, running *nodekit.Pod, grace *int64, edit func(*v1.PodStatus)) error {
	if edit != nil && len(pod.Spec.Containers) > 0 {
		// The killer's verdict (an eviction) is recorded before the
		// containers stop, so it is what the API sees first.
		st := s.computeStatus(ctx, pod, rs, false)
		edit(&st)
		s.setStatus(ctx, pod, st)
	}
	if running == nil {
		running = runningOf(rs)
	} else if rs != nil {
		running = mergeRunning(running, runningOf(rs))
	}
	var specPod *v1.Pod
	if len(pod.Spec.Containers) > 0 {
		specPod = pod
	}
	if s.workers != nil && specPod != nil {
		s.workers.StopLivenessAndStartup(pod)
	}
	var g *time.Duration
	if grace != nil {
		d := time.Duration(*grace) * time.Second
		g = &d
	}
	if specPod != nil && s.hooks != nil {
		total := podGrace(pod, g)
		spent := s.runPreStopHooks(ctx, pod, rs, running, total)
		left := max(total-spent, minGrace)
		g = &left
	}
	if err := s.runtime.KillPod(ctx, nodekit.KillPodRequest{Pod: specPod, Running: running, GracePeriod: g}); err != nil {
		return fmt.Errorf("kill pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	after, err := s.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return err
	}
	for _, c := range after.Containers {
		if c.State == nodekit.StateRunning {
			return fmt.Errorf("container %s of pod %s/%s is still running after kill", c.Name, pod.Namespace, pod.Name)
		}
	}
	// Claims are released once every container has stopped and before
	// the final status, as upstream (the claim's deallocation waits for
	// the pod to be terminal).
	if s.dra != nil {
		if err := s.dra.UnprepareResources(ctx, pod); err != nil {
			return fmt.Errorf("release dynamic resources of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	if specPod != nil {
		s.setStatus(ctx, pod, s.computeStatus(ctx, pod, after, true))
	}
	return nil
}

// usesClaims says the pod references DRA claims (its own or the one
// backing its extended resources).
func usesClaims(pod *v1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0 || pod.Status.ExtendedResourceClaimStatus != nil
}

// SyncTerminatedPod waits for the pod's volumes to be released and then
// tells the status manager that the pod's resources are reclaimed.
func (s *syncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) error {
	if len(pod.Spec.Containers) == 0 {
		return nil // an orphan: nothing to report
	}
	if s.workers != nil {
		s.workers.RemovePod(pod)
	}
	if s.volumes != nil {
		if err := s.volumes.WaitForUnmount(ctx, pod); err != nil {
			return fmt.Errorf("unmount volumes of %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	s.setStatus(ctx, pod, s.computeStatus(ctx, pod, rs, true))
	// Containers that never ran (an image that never pulled) become
	// terminated-unknown and the pod terminal, so a deleted pod can go.
	if t, ok := s.status.(PodTerminator); ok {
		if err := t.TerminatePod(pod); err != nil {
			return fmt.Errorf("record %s/%s terminated: %w", pod.Namespace, pod.Name, err)
		}
	}
	if err := s.status.PodResourcesReclaimed(pod.UID); err != nil {
		return fmt.Errorf("report resources of %s/%s reclaimed: %w", pod.Namespace, pod.Name, err)
	}
	s.forget(pod.UID)
	s.forgetResize(ctx, pod.UID)
	s.metrics.ForgetPod(pod.UID)
	return nil
}

// configSeenAnnotation is when the agent's configuration first saw a pod
// (set by podconfig's merger, as upstream's kubernetes.io/config.seen).
const configSeenAnnotation = "kubernetes.io/config.seen"

// firstSeen is the pod's config.seen time, zero when absent or unreadable.
func firstSeen(pod *v1.Pod) time.Time {
	t, err := time.Parse(time.RFC3339Nano, pod.Annotations[configSeenAnnotation])
	if err != nil {
		return time.Time{}
	}
	return t
}

func runningOf(rs *nodekit.PodStatus) *nodekit.Pod {
	p := &nodekit.Pod{}
	if rs == nil {
		return p
	}
	p.ID, p.Name, p.Namespace = rs.ID, rs.Name, rs.Namespace
	for _, c := range rs.Containers {
		if c.State == nodekit.StateRunning || c.State == nodekit.StateCreated || c.State == nodekit.StateUnknown {
			p.Containers = append(p.Containers, &nodekit.Container{ID: c.ID, Name: c.Name, State: c.State})
		}
	}
	for _, sb := range rs.Sandboxes {
		if sb.State == nodekit.SandboxReady {
			p.Sandboxes = append(p.Sandboxes, &nodekit.Container{ID: nodekit.ContainerID{ID: sb.ID}, State: nodekit.StateRunning})
		}
	}
	return p
}

func mergeRunning(a, b *nodekit.Pod) *nodekit.Pod {
	out := *a
	seen := map[nodekit.ContainerID]bool{}
	out.Containers, out.Sandboxes = nil, nil
	for _, list := range [][]*nodekit.Container{a.Containers, b.Containers} {
		for _, c := range list {
			if !seen[c.ID] {
				seen[c.ID] = true
				out.Containers = append(out.Containers, c)
			}
		}
	}
	for _, list := range [][]*nodekit.Container{a.Sandboxes, b.Sandboxes} {
		for _, c := range list {
			if !seen[c.ID] {
				seen[c.ID] = true
				out.Sandboxes = append(out.Sandboxes, c)
			}
		}
	}
	return &out
}

// minGrace is the least time a container gets to stop, as upstream.
const minGrace = 2 * time.Second

// podGrace is the termination grace period: the override, else the
// deletion grace period, else the spec's, else 30 s.
func podGrace(pod *v1.Pod, override *time.Duration) time.Duration {
	switch {
	case override != nil:
		return *override
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// runPostStartHooks runs the postStart handler of every container this
// sync started. A failing hook kills its container, as upstream: the
// container is then restarted per its restart policy.
func (s *syncer) runPostStartHooks(ctx context.Context, pod *v1.Pod, res *nodekit.SyncResult) {
	if s.hooks == nil {
		return
	}
	var started []*v1.Container
	for _, r := range res.Results {
		if r.Err != nil || (r.Action != nodekit.ActionStartContainer && r.Action != nodekit.ActionInitContainer) {
			continue
		}
		c := findSpec(pod.Spec.Containers, r.Target)
		if c == nil {
			c = findSpec(pod.Spec.InitContainers, r.Target)
		}
		if c != nil && c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			started = append(started, c)
		}
	}
	if len(started) == 0 {
		return
	}
	fresh, err := s.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to read the pod status for postStart hooks", "pod", klog.KObj(pod))
		return
	}
	podIP := ""
	if len(fresh.IPs) > 0 {
		podIP = fresh.IPs[0]
	}
	for _, c := range started {
		cs := fresh.FindContainer(c.Name)
		if cs == nil || cs.State != nodekit.StateRunning {
			continue
		}
		msg, err := s.hooks.Run(ctx, pod, c, cs.ID, podIP, c.Lifecycle.PostStart)
		if err == nil {
			continue
		}
		s.events.Eventf(pod, v1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
		s.setReason(pod.UID, c.Name, &waitReason{Reason: string(nodekit.ErrPostStartHook), Message: msg})
		kill := nodekit.PodActions{ContainersToKill: map[nodekit.ContainerID]nodekit.KillInfo{
			cs.ID: {Name: c.Name, Container: c, Reason: "FailedPostStartHook", Message: "FailedPostStartHook"},
		}}
		if err := s.runtime.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Status: fresh, Actions: kill}).Err(); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to kill a container whose postStart hook failed", "pod", klog.KObj(pod), "container", c.Name)
		}
	}
}

// runPreStopHooks runs, in parallel, the preStop handler of every running
// container that has one, bounded by the grace period, and returns how
// long they took.
func (s *syncer) runPreStopHooks(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, running *nodekit.Pod, grace time.Duration) time.Duration {
	start := s.clock.Now()
	podIP := ""
	if rs != nil && len(rs.IPs) > 0 {
		podIP = rs.IPs[0]
	}
	hctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, rc := range running.Containers {
		c := findSpec(pod.Spec.Containers, rc.Name)
		if c == nil {
			c = findSpec(pod.Spec.InitContainers, rc.Name)
		}
		if c == nil || c.Lifecycle == nil || c.Lifecycle.PreStop == nil || rc.State != nodekit.StateRunning {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.hooks.Run(hctx, pod, c, rc.ID, podIP, c.Lifecycle.PreStop); err != nil {
				s.events.Eventf(pod, v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
				klog.FromContext(ctx).Info("preStop hook failed", "pod", klog.KObj(pod), "container", c.Name, "err", err)
			}
		}()
	}
	wg.Wait()
	return s.clock.Since(start)
}
