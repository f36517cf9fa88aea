package syncloop

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/restartrules"
)

// ContainerRemover is the optional capability of a Runtime the loop needs
// to restart all of a pod's containers in place (a RestartAllContainers
// restart rule): every instance of the pod's init and regular containers
// is removed so they start again from the first init container.
// criruntime.Runtime and agenttest.FakeRuntime have it. With a Runtime
// without it the sync of such a pod fails with an error naming it; a
// composer whose runtime lacks it keeps refusing these pods at admission
// (admission.PodFeatures).
type ContainerRemover interface {
	// RemoveContainer removes a stopped container.
	RemoveContainer(ctx context.Context, id nodekit.ContainerID) error
}

// reasonRestartAllContainers is the kill reason of a container stopped to
// restart all the pod's containers, as upstream.
const reasonRestartAllContainers = "RestartAllContainers"

// containerToReset is one runtime instance of a container to remove.
type containerToReset struct {
	id   nodekit.ContainerID
	spec *v1.Container
	// kill: it has not exited, so it is stopped first.
	kill bool
}

// containersToReset lists every runtime instance of the pod's init and
// regular containers in the order upstream's computePodActions resets
// them: first the other ("target") regular containers, then the target
// init containers, then the regular and last the init containers whose
// exit triggered the restart ("sources": exited with a code whose first
// matching rule is RestartAllContainers), each list in spec order.
func containersToReset(pod *v1.Pod, rs *nodekit.PodStatus) []containerToReset {
	split := func(specs []v1.Container) (sources, targets []containerToReset) {
		for i := range specs {
			c := &specs[i]
			for _, cs := range rs.Containers {
				if cs.Name != c.Name {
					continue
				}
				r := containerToReset{id: cs.ID, spec: c, kill: cs.State != nodekit.StateExited}
				if !r.kill && restartrules.TriggersRestartAll(c, int32(cs.ExitCode)) {
					sources = append(sources, r)
				} else {
					targets = append(targets, r)
				}
			}
		}
		return sources, targets
	}
	if rs == nil {
		return nil
	}
	initSources, initTargets := split(pod.Spec.InitContainers)
	sources, targets := split(pod.Spec.Containers)
	out := make([]containerToReset, 0, len(initSources)+len(initTargets)+len(sources)+len(targets))
	out = append(out, targets...)
	out = append(out, initTargets...)
	out = append(out, sources...)
	return append(out, initSources...)
}

// restartAll kills (without grace beyond the runtime's minimum) and
// removes every instance of the pod's init and regular containers, in
// containersToReset's order, as upstream does while the pod's
// AllContainersRestarting condition is True. The sandbox, its IP and the
// pod's volumes are kept. It stops at the first failure. It reports
// whether it removed anything: then the pod is synced again at once, and
// that sync, finding the containers gone, sets the condition False and
// starts them again from the first init container.
func (s *syncer) restartAll(ctx context.Context, pod *v1.Pod, rs *nodekit.PodStatus) (bool, error) {
	reset := containersToReset(pod, rs)
	if len(reset) == 0 {
		return false, nil
	}
	rm, ok := s.runtime.(ContainerRemover)
	if !ok {
		return false, fmt.Errorf("restart all containers of %s/%s: the runtime cannot remove containers (syncloop.ContainerRemover)", pod.Namespace, pod.Name)
	}
	logger := klog.FromContext(ctx)
	var zero time.Duration
	for _, r := range reset {
		if r.kill {
			logger.V(3).Info("Killing container before removal", "pod", klog.KObj(pod), "containerName", r.spec.Name, "containerID", r.id)
			res := s.runtime.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Status: rs, Options: s.options, Actions: nodekit.PodActions{
				ContainersToKill: map[nodekit.ContainerID]nodekit.KillInfo{r.id: {
					Name: r.spec.Name, Container: r.spec, Reason: reasonRestartAllContainers, Message: "killing", GracePeriod: &zero}},
			}})
			if err := res.Err(); err != nil {
				return false, fmt.Errorf("restart all containers of %s/%s: kill container %q: %w", pod.Namespace, pod.Name, r.spec.Name, err)
			}
		}
		logger.V(3).Info("Removing container before pod restarts", "pod", klog.KObj(pod), "containerName", r.spec.Name, "containerID", r.id)
		if err := rm.RemoveContainer(ctx, r.id); err != nil {
			return false, fmt.Errorf("restart all containers of %s/%s: remove container %q: %w", pod.Namespace, pod.Name, r.spec.Name, err)
		}
	}
	return true, nil
}
