package devicemgr

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// Admit allocates devices to every container of the pod that asks for a
// plugin resource (init containers first, whose devices later containers
// may reuse unless the init container is a restartable sidecar), asking
// the plugin for its preferred devices when it offers that and calling
// its Allocate. A pod that asks for no plugin resource is admitted
// untouched. When devices cannot be allocated the pod is rejected with
// upstream's UnexpectedAdmissionError ("Allocate failed due to ..., which
// is unexpected") and whatever it got is released.
//
// Devices of pods no longer active (Config.ActivePods, else req.Pods) are
// reclaimed first. Admit calls the plugins over gRPC, which is local I/O.
func (m *Manager) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	pod := req.Pod
	if pod == nil {
		return nodekit.Decision{Reason: ReasonUnexpectedAdmissionError, Message: "Admission request has no pod."}
	}
	if !m.needsDevices(pod) {
		return nodekit.Admitted
	}
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	if err := m.allocatePod(ctx, pod, req.Pods, ""); err != nil {
		m.release(ctx, pod.UID)
		return nodekit.Decision{
			Reason:  ReasonUnexpectedAdmissionError,
			Message: fmt.Sprintf("Allocate failed due to %v, which is unexpected", err),
		}
	}
	return nodekit.Admitted
}

// needsDevices reports whether any container of pod asks for a plugin
// resource.
func (m *Manager) needsDevices(pod *v1.Pod) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if len(m.deviceRequests(pod, &cs[i])) > 0 {
				return true
			}
		}
	}
	return false
}

// podAllocation is the state of one allocatePod call.
type podAllocation struct {
	pod      *v1.Pod
	admitted []*v1.Pod
	// reuse holds, by resource, the devices of finished init containers
	// that later containers may take.
	reuse     map[string]sets.Set[string]
	reclaimed bool
}

// allocatePod allocates the devices of pod's containers in upstream's
// order, tracking the devices later containers may reuse. With only set,
// just that container is allocated (the others only feed the reuse set).
// Callers hold m.allocMu.
func (m *Manager) allocatePod(ctx context.Context, pod *v1.Pod, admitted []*v1.Pod, only string) error {
	uid := string(pod.UID)
	pa := &podAllocation{pod: pod, admitted: admitted, reuse: map[string]sets.Set[string]{}}
	step := func(c *v1.Container, init bool) error {
		if only == "" || only == c.Name {
			if err := m.allocateContainer(ctx, pa, c); err != nil {
				return err
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for name, a := range m.pods[uid][c.Name] {
			if init && !podutil.IsSidecar(c) {
				pa.reuse[name] = pa.reuse[name].Union(a.ids())
			} else {
				pa.reuse[name] = pa.reuse[name].Difference(a.ids())
			}
		}
		return nil
	}
	for i := range pod.Spec.InitContainers {
		if err := step(&pod.Spec.InitContainers[i], true); err != nil {
			return err
		}
	}
	for i := range pod.Spec.Containers {
		if err := step(&pod.Spec.Containers[i], false); err != nil {
			return err
		}
	}
	return nil
}

// allocateContainer allocates every plugin resource c asks for that it
// does not hold yet, calls the plugins' Allocate and records the result.
// On error the devices picked but not recorded are freed again.
func (m *Manager) allocateContainer(ctx context.Context, pa *podAllocation, c *v1.Container) error {
	logger := klog.FromContext(ctx)
	uid := string(pa.pod.UID)
	m.mu.Lock()
	names := m.deviceRequests(pa.pod, c)
	m.mu.Unlock()
	changed := false
	for _, name := range names {
		q := c.Resources.Limits[v1.ResourceName(name)]
		needed := int(q.Value())
		if !pa.reclaimed {
			m.reclaim(ctx, pa.pod, pa.admitted)
			pa.reclaimed = true
		}
		devs, err := m.devicesToAllocate(ctx, pa.pod.UID, c.Name, name, needed, pa.reuse[name])
		if err != nil {
			m.resetAllocated()
			return err
		}
		if devs.Len() == 0 {
			continue
		}
		m.mu.Lock()
		rs := m.resources[name]
		var ep *endpoint
		if rs != nil && rs.stopped.IsZero() {
			ep = rs.ep
		}
		m.mu.Unlock()
		if ep == nil {
			m.resetAllocated()
			return fmt.Errorf("unknown Device Plugin %s", name)
		}
		ids := sets.List(devs)
		logger.V(4).Info("Making allocation request for device plugin", "devices", ids, "resource", name, "pod", klog.KObj(pa.pod), "container", c.Name)
		resp, err := ep.allocate(ctx, ids)
		if err != nil {
			m.resetAllocated()
			return err
		}
		m.mu.Lock()
		m.pods.insert(uid, c.Name, name, &allocation{numa: numaOf(rs.devices, devs), resp: resp})
		m.mu.Unlock()
		changed = true
	}
	if changed {
		return m.persist()
	}
	return nil
}

// resetAllocated drops devices picked by an allocation that failed.
func (m *Manager) resetAllocated() {
	m.mu.Lock()
	m.allocated = m.pods.devices()
	m.mu.Unlock()
}

// reclaim forgets the devices of pods that are no longer active, once
// every pod source has been seen. pod itself is always kept.
func (m *Manager) reclaim(ctx context.Context, pod *v1.Pod, admitted []*v1.Pod) {
	if !m.sourcesReady() {
		return
	}
	active := admitted
	if m.activePods != nil {
		active = m.activePods()
	}
	keep := sets.New(string(pod.UID))
	for _, p := range active {
		keep.Insert(string(p.UID))
	}
	m.mu.Lock()
	gone := m.pods.keepOnly(keep)
	if len(gone) > 0 {
		m.allocated = m.pods.devices()
	}
	m.mu.Unlock()
	if len(gone) > 0 {
		klog.FromContext(ctx).V(3).Info("Released the devices of inactive pods", "podUIDs", gone)
		if err := m.persist(); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to write the device manager checkpoint")
		}
	}
}

// release forgets every device of one pod (a rejected pod).
func (m *Manager) release(ctx context.Context, uid types.UID) {
	m.mu.Lock()
	_, held := m.pods[string(uid)]
	delete(m.pods, string(uid))
	m.allocated = m.pods.devices()
	m.mu.Unlock()
	if held {
		if err := m.persist(); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to write the device manager checkpoint")
		}
	}
}

// devicesToAllocate picks the devices container of pod still needs of
// resource, as upstream's devicesToAllocate without NUMA alignment: from
// the reusable devices first, then the plugin's preferred ones among the
// healthy free devices, then the remaining healthy free devices in ID
// order. The picked devices are marked allocated. An empty set means
// nothing to do.
func (m *Manager) devicesToAllocate(ctx context.Context, podUID types.UID, container, resource string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	logger := klog.FromContext(ctx)
	uid := string(podUID)
	keepRunning := !m.sourcesReady() && m.running(podUID, container)

	m.mu.Lock()
	defer m.mu.Unlock()
	needed := required
	held := m.pods.container(uid, container, resource)
	if held != nil {
		needed -= held.Len()
		// The API server does not let a request change once admitted.
		if needed != 0 {
			return nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", uid, container, resource, held.Len(), required)
		}
	}
	// An agent restart with the container still running: it already has
	// its devices, whether or not the plugin is back yet.
	if keepRunning {
		logger.V(3).Info("Container detected running, nothing to do", "resource", resource, "podUID", uid, "container", container)
		return nil, nil
	}
	rs, registered := m.resources[resource]
	if !registered {
		return nil, fmt.Errorf("cannot allocate unregistered device %s", resource)
	}
	if rs.healthy.Len() == 0 {
		return nil, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", resource)
	}
	if !rs.healthy.IsSuperset(held) {
		return nil, fmt.Errorf("previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", resource)
	}
	if needed == 0 {
		return nil, nil
	}

	picked := sets.New[string]()
	take := func(from sets.Set[string]) bool {
		if m.allocated[resource] == nil {
			m.allocated[resource] = sets.New[string]()
		}
		for _, id := range sets.List(from.Difference(picked)) {
			m.allocated[resource].Insert(id)
			picked.Insert(id)
			if needed--; needed == 0 {
				return true
			}
		}
		return false
	}
	// Devices of this pod's finished init containers, if still healthy.
	if take(reusable.Intersection(rs.healthy)) {
		return picked, nil
	}
	available := rs.healthy.Difference(m.allocated[resource])
	if available.Len() < needed {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", resource, needed, available.Len())
	}
	if ep := rs.ep; ep != nil && rs.stopped.IsZero() && ep.preferredAvailable() {
		m.mu.Unlock()
		preferred, err := ep.getPreferredAllocation(ctx, sets.List(available.Union(picked)), sets.List(picked), required)
		m.mu.Lock()
		if err != nil {
			return nil, err
		}
		// The plugin may have gone, or devices turned unhealthy, meanwhile;
		// and its answer is only a preference: keep what is still free.
		if rs = m.resources[resource]; rs == nil {
			return nil, fmt.Errorf("cannot allocate unregistered device %s", resource)
		}
		available = rs.healthy.Difference(m.allocated[resource])
		if take(sets.New(preferred...).Intersection(available)) {
			return picked, nil
		}
	}
	if take(available) {
		return picked, nil
	}
	return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", required, required-needed)
}
