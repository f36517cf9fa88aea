package syncloop

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// Resizer carries out in-place pod resize (package allocation's Manager
// implements it). Nil in Config: a resize of a running pod's resources
// is not acted on.
type Resizer interface {
	// Allocate returns the pod as the node runs it (the allocated
	// resources in place of the spec's), deciding a pending resize first.
	Allocate(ctx context.Context, pod *v1.Pod) (*v1.Pod, error)
	// Restarts returns the containers running in rs that the pod's resize
	// restarts (resizePolicy RestartContainer for a changed resource). The
	// worker stops them before Actuate, as upstream kills them before it
	// resizes the pod: on cgroup v1 a pod cgroup's CPU quota cannot go
	// below that of a container still running in it.
	Restarts(pod *v1.Pod, rs *nodekit.PodStatus) []string
	// Actuate applies the allocation to the running containers of rs (nil:
	// none runs) and returns the containers to restart for it, and whether
	// anything changed (the pod's status is then published again).
	Actuate(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (restart []string, changed bool, err error)
	// SetStatus writes the resize conditions, the containers'
	// allocatedResources and resources, and the pod's, into st; old is
	// the status st was built on (read only).
	SetStatus(ctx context.Context, pod *v1.Pod, old, st *v1.PodStatus)
	// Forget drops what is kept for a pod that has left.
	Forget(uid types.UID) error
}

// allocated is the pod the worker syncs: pod with its allocation.
func (s *syncer) allocated(ctx context.Context, pod *v1.Pod) *v1.Pod {
	if s.resize == nil {
		return pod
	}
	out, err := s.resize.Allocate(ctx, pod)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to record the pod's resource allocation", "pod", klog.KObj(pod))
	}
	return out
}

// resizeActions applies the allocation to the running containers and adds
// to a the restarts their resizePolicy asks for, in upstream's order: the
// containers to restart are stopped first, then the pod cgroup and the
// other containers are resized, then (in the sync's runtime call) the
// stopped ones start at the allocation. It returns the pod's runtime status
// to sync with (read again when it stopped containers). A pod getting a
// new sandbox starts every container at its allocation.
//
// When the resize fails after containers were stopped for it, they start
// in this sync all the same, as upstream starts them; the second status
// returned (nil otherwise) is the one to retry the resize with once they
// run (retryResize).
func (s *syncer) resizeActions(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, a *nodekit.PodActions) (*nodekit.PodStatus, *nodekit.PodStatus) {
	if s.resize == nil {
		return rs, nil
	}
	running := rs
	if a.KillPod || a.CreateSandbox {
		running = nil
	}
	var stopped []string
	if running != nil {
		fresh, names, err := s.stopForResize(ctx, pod, running)
		if err != nil {
			klog.FromContext(ctx).Error(err, "In-place resize failed; retried on the next sync", "pod", klog.KObj(pod))
			return rs, nil
		}
		if len(names) > 0 {
			rs, running, stopped = fresh, fresh, names
		}
	}
	restart, changed, err := s.resize.Actuate(ctx, pod, running)
	if err != nil || changed && len(stopped) == 0 {
		// Show the new resources, or why they are not, now rather than
		// at the next sync. Containers stopped to restart them start in
		// this sync's runtime call: as upstream, the status of this sync
		// stays the one built before (the old containers running, the
		// resize in progress), and the next sync shows the new ones.
		s.setStatus(ctx, pod, s.computeStatus(ctx, pod, rs, false))
	}
	if err != nil {
		if len(stopped) == 0 {
			klog.FromContext(ctx).Error(err, "In-place resize failed; retried on the next sync", "pod", klog.KObj(pod))
			return rs, nil
		}
		klog.FromContext(ctx).Error(err, "In-place resize failed; retried once the stopped containers start again", "pod", klog.KObj(pod), "containers", stopped)
	}
	for _, name := range stopped {
		startForResize(pod, a, name)
	}
	if err != nil {
		return rs, running
	}
	for _, name := range restart {
		cs := rs.FindContainer(name)
		if cs == nil || cs.State != nodekit.StateRunning {
			continue
		}
		kill := resizeKill(pod, name)
		startForResize(pod, a, name)
		a.ContainersToKill[cs.ID] = kill
	}
	return rs, nil
}

// retryResize tries once more a resize that failed after containers were
// stopped to restart them, now that this sync has started them again at
// the allocation; stopped is the pod's runtime status read after the stop
// (nil: nothing to retry). The usual cause is cgroup v1 refusing the pod
// CPU quota below that of a stopped container's cgroup the kernel has
// not released yet. A success records the started containers at the
// allocation, as upstream records a container's resources when it starts;
// without it the next sync would find them running at the old actuated
// resources and restart them a second time.
func (s *syncer) retryResize(ctx context.Context, pod *v1.Pod, stopped *nodekit.PodStatus) {
	if stopped == nil {
		return
	}
	if _, _, err := s.resize.Actuate(ctx, pod, stopped); err != nil {
		klog.FromContext(ctx).Error(err, "In-place resize failed again; retried on the next sync", "pod", klog.KObj(pod))
	}
}

// stopForResize stops the running containers the pod's resize restarts
// and returns the pod's runtime status read after, with their names (none:
// rs unchanged).
func (s *syncer) stopForResize(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (*nodekit.PodStatus, []string, error) {
	kill := nodekit.PodActions{ContainersToKill: map[nodekit.ContainerID]nodekit.KillInfo{}}
	var names []string
	for _, name := range s.resize.Restarts(pod, rs) {
		if cs := rs.FindContainer(name); cs != nil && cs.State == nodekit.StateRunning {
			kill.ContainersToKill[cs.ID] = resizeKill(pod, name)
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return rs, nil, nil
	}
	if err := s.runtime.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Status: rs, Actions: kill}).Err(); err != nil {
		return rs, nil, fmt.Errorf("stop containers %v to restart them for the resize: %w", names, err)
	}
	fresh, err := s.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return rs, nil, fmt.Errorf("read the pod status after stopping %v for the resize: %w", names, err)
	}
	return fresh, names, nil
}

// resizeKill is the kill of a container its resize restarts.
func resizeKill(pod *v1.Pod, name string) nodekit.KillInfo {
	kill := nodekit.KillInfo{Name: name, Message: fmt.Sprintf("Container %s resize requires restart", name)}
	if i := specIndex(pod.Spec.Containers, name); i >= 0 {
		kill.Container = &pod.Spec.Containers[i]
	} else if i := specIndex(pod.Spec.InitContainers, name); i >= 0 {
		kill.Container = &pod.Spec.InitContainers[i]
	}
	return kill
}

// startForResize adds the container to the ones a starts.
func startForResize(pod *v1.Pod, a *nodekit.PodActions, name string) {
	if i := specIndex(pod.Spec.Containers, name); i >= 0 {
		a.ContainersToStart = appendOnce(a.ContainersToStart, i)
	} else if i := specIndex(pod.Spec.InitContainers, name); i >= 0 {
		a.InitContainersToStart = appendOnce(a.InitContainersToStart, i)
	}
}

// resizeStatus adds the resize part of the pod's status.
func (s *syncer) resizeStatus(ctx context.Context, pod *v1.Pod, old, st *v1.PodStatus) {
	if s.resize != nil {
		s.resize.SetStatus(ctx, pod, old, st)
	}
}

func (s *syncer) forgetResize(ctx context.Context, uid types.UID) {
	if s.resize == nil {
		return
	}
	if err := s.resize.Forget(uid); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to drop the pod's resource allocation", "podUID", uid)
	}
}

func specIndex(cs []v1.Container, name string) int {
	for i := range cs {
		if cs[i].Name == name {
			return i
		}
	}
	return -1
}

func appendOnce(list []int, i int) []int {
	for _, j := range list {
		if j == i {
			return list
		}
	}
	return append(list, i)
}
