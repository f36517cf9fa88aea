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
	// Actuate applies the allocation to the running containers of rs (nil:
	// none runs) and returns the containers to restart for it, and whether
	// anything changed (the pod's status is then published again).
	Actuate(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (restart []string, changed bool, err error)
	// SetStatus writes the resize conditions and the containers'
	// allocatedResources and resources into st.
	SetStatus(pod *v1.Pod, st *v1.PodStatus)
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
// to a the restarts their resizePolicy asks for. A pod getting a new
// sandbox starts every container at its allocation.
func (s *syncer) resizeActions(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus, a *nodekit.PodActions) {
	if s.resize == nil {
		return
	}
	running := rs
	if a.KillPod || a.CreateSandbox {
		running = nil
	}
	restart, changed, err := s.resize.Actuate(ctx, pod, running)
	if changed || err != nil {
		// Show the new resources, or why they are not, now rather than
		// at the next sync.
		s.setStatus(ctx, pod, s.computeStatus(pod, rs, false))
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "In-place resize failed; retried on the next sync", "pod", klog.KObj(pod))
		return
	}
	for _, name := range restart {
		cs := rs.FindContainer(name)
		if cs == nil || cs.State != nodekit.StateRunning {
			continue
		}
		kill := nodekit.KillInfo{Name: name, Message: fmt.Sprintf("Container %s resize requires restart", name)}
		if i := specIndex(pod.Spec.Containers, name); i >= 0 {
			kill.Container = &pod.Spec.Containers[i]
			a.ContainersToStart = appendOnce(a.ContainersToStart, i)
		} else if i := specIndex(pod.Spec.InitContainers, name); i >= 0 {
			kill.Container = &pod.Spec.InitContainers[i]
			a.InitContainersToStart = appendOnce(a.InitContainersToStart, i)
		}
		a.ContainersToKill[cs.ID] = kill
	}
}

// resizeStatus adds the resize part of the pod's status.
func (s *syncer) resizeStatus(pod *v1.Pod, st *v1.PodStatus) {
	if s.resize != nil {
		s.resize.SetStatus(pod, st)
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
