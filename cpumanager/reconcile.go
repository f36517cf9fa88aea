package cpumanager

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// PodStatusGetter gives the newest status the agent holds for a pod, for
// its container IDs and states. statusmgr.Manager satisfies it.
type PodStatusGetter interface {
	// GetPodStatus must not block; the status is the caller's copy.
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// PodStatusFunc adapts a function to PodStatusGetter.
type PodStatusFunc func(uid types.UID) (v1.PodStatus, bool)

// GetPodStatus implements PodStatusGetter.
func (f PodStatusFunc) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { return f(uid) }

var _ PodStatusGetter = PodStatusFunc(nil)

// ResourceUpdater changes the cpuset of a running container (CRI
// UpdateContainerResources with LinuxContainerResources.CpusetCpus). The
// lead adds it to criruntime.Runtime.
type ResourceUpdater interface {
	// UpdateContainerResources sets the container's cpuset.cpus to cpuset
	// (Linux list format). It blocks on the runtime; it is idempotent.
	UpdateContainerResources(ctx context.Context, id nodekit.ContainerID, cpuset string) error
}

// ResourceUpdaterFunc adapts a function to ResourceUpdater.
type ResourceUpdaterFunc func(ctx context.Context, id nodekit.ContainerID, cpuset string) error

// UpdateContainerResources implements ResourceUpdater.
func (f ResourceUpdaterFunc) UpdateContainerResources(ctx context.Context, id nodekit.ContainerID, cpuset string) error {
	return f(ctx, id, cpuset)
}

var _ ResourceUpdater = ResourceUpdaterFunc(nil)

// Reconcile is one pass of the reconcile loop: it releases the CPUs of
// removed pods, then sets every running container of the active pods to
// its cpuset (exclusive CPUs, else the shared pool) when that differs from
// what it last set, so a shrinking or growing shared pool reaches running
// containers. Containers that are waiting, terminated or not yet in the
// pod status are skipped. It blocks on the runtime calls; the error joins
// the failed updates, which are retried on the next pass. With the none
// policy it does nothing; without Status and Runtime it only releases.
func (m *Manager) Reconcile(ctx context.Context) error {
	if m.static == nil {
		return nil
	}
	m.removeStale(ctx, nil)
	if m.status == nil || m.runtime == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	seen := map[nodekit.ContainerID]bool{}
	var errs []error
	for _, pod := range m.pods.ActivePods() {
		status, ok := m.status.GetPodStatus(pod.UID)
		if !ok {
			continue
		}
		statuses := append(append([]v1.ContainerStatus{}, status.InitContainerStatuses...), status.ContainerStatuses...)
		for _, c := range podContainers(pod) {
			cs := findStatus(statuses, c.Name)
			if cs == nil || cs.ContainerID == "" || cs.State.Running == nil {
				continue // waiting, terminated or unknown: nothing to update
			}
			id, err := parseContainerID(cs.ContainerID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			seen[id] = true
			m.mu.Lock()
			want := m.cpusFor(string(pod.UID), c.Name).String()
			last, done := m.applied[id]
			m.mu.Unlock()
			if want == "" || (done && last == want) {
				continue
			}
			if err := m.runtime.UpdateContainerResources(ctx, id, want); err != nil {
				errs = append(errs, fmt.Errorf("cpumanager: update cpuset of container %s (%s/%s) to %s: %w", id, pod.Name, c.Name, want, err))
				continue
			}
			logger.V(4).Info("Updated container cpuset", "pod", klog.KObj(pod), "container", c.Name, "cpuset", want)
			m.mu.Lock()
			m.applied[id] = want
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	for id := range m.applied {
		if !seen[id] {
			delete(m.applied, id)
		}
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// Run calls Reconcile every ReconcilePeriod until ctx is done, logging
// failures, and returns nil. With the none policy it only waits for ctx.
func (m *Manager) Run(ctx context.Context) error {
	if m.static == nil {
		<-ctx.Done()
		return nil
	}
	t := m.clock.NewTicker(m.period)
	defer t.Stop()
	for {
		if err := m.Reconcile(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "CPU manager reconcile failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

func findStatus(statuses []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// parseContainerID parses "type://id" as the pod status spells it.
func parseContainerID(s string) (nodekit.ContainerID, error) {
	typ, id, ok := strings.Cut(s, "://")
	if !ok || typ == "" || id == "" {
		return nodekit.ContainerID{}, fmt.Errorf("cpumanager: invalid container ID %q", s)
	}
	return nodekit.ContainerID{Type: typ, ID: id}, nil
}
