package devicemgr

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// withoutTopology is the NUMA node recorded for devices that report none.
const withoutTopology = -1

// allocation is what one container got of one resource: the device IDs
// by NUMA node, and the plugin's answer to Allocate for them.
type allocation struct {
	numa map[int64][]string
	resp *pluginapi.ContainerAllocateResponse
}

// ids returns the allocation's device IDs.
func (a *allocation) ids() sets.Set[string] {
	s := sets.New[string]()
	for _, ids := range a.numa {
		s.Insert(ids...)
	}
	return s
}

// podDevices holds the allocations by pod UID, container name and
// resource name. The manager's mutex guards it.
type podDevices map[string]map[string]map[string]*allocation

func (p podDevices) insert(pod, container, resource string, a *allocation) {
	if p[pod] == nil {
		p[pod] = map[string]map[string]*allocation{}
	}
	if p[pod][container] == nil {
		p[pod][container] = map[string]*allocation{}
	}
	p[pod][container][resource] = a
}

// container returns the devices of one container for resource, or nil
// when it has none recorded.
func (p podDevices) container(pod, container, resource string) sets.Set[string] {
	a := p[pod][container][resource]
	if a == nil {
		return nil
	}
	return a.ids()
}

// devices returns every device held by a pod, by resource.
func (p podDevices) devices() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, containers := range p {
		for _, resources := range containers {
			for name, a := range resources {
				if out[name] == nil {
					out[name] = sets.New[string]()
				}
				out[name] = out[name].Union(a.ids())
			}
		}
	}
	return out
}

// keepOnly forgets every pod not in keep and returns their UIDs.
func (p podDevices) keepOnly(keep sets.Set[string]) []string {
	var gone []string
	for uid := range p {
		if !keep.Has(uid) {
			gone = append(gone, uid)
			delete(p, uid)
		}
	}
	sort.Strings(gone)
	return gone
}

// numaOf groups ids by the NUMA nodes their devices report, as upstream
// records them in the checkpoint.
func numaOf(devices map[string]*pluginapi.Device, ids sets.Set[string]) map[int64][]string {
	out := map[int64][]string{}
	for _, id := range sets.List(ids) {
		nodes := devices[id].GetTopology().GetNodes()
		if len(nodes) == 0 {
			out[withoutTopology] = append(out[withoutTopology], id)
			continue
		}
		for _, n := range nodes {
			out[n.GetID()] = append(out[n.GetID()], id)
		}
	}
	return out
}

// backedByDRA reports whether the scheduler mapped the container's
// request for name to a DRA claim; the device manager leaves those alone.
func backedByDRA(pod *v1.Pod, container string, name v1.ResourceName) bool {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return false
	}
	for _, m := range st.RequestMappings {
		if m.ContainerName == container && m.ResourceName == string(name) {
			return true
		}
	}
	return false
}

// deviceRequests returns the names of the plugin resources c asks for
// (non-zero limits not backed by DRA), sorted. Callers hold m.mu.
func (m *Manager) deviceRequests(pod *v1.Pod, c *v1.Container) []string {
	var out []string
	for name, q := range c.Resources.Limits {
		if q.Value() <= 0 || backedByDRA(pod, c.Name, name) || !m.isPluginResource(string(name)) {
			continue
		}
		out = append(out, string(name))
	}
	sort.Strings(out)
	return out
}

// ContainerDevices returns the devices held by a container, by resource
// and device ID, each with the NUMA node it was allocated on (no topology
// for a device that reports none): what the podresources API lists. Nil
// when the container holds none.
func (m *Manager) ContainerDevices(podUID types.UID, container string) map[string]map[string]*pluginapi.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out map[string]map[string]*pluginapi.Device
	for resource, a := range m.pods[string(podUID)][container] {
		for numa, ids := range a.numa {
			for _, id := range ids {
				d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
				if numa != withoutTopology {
					d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: numa}}}
				}
				if out == nil {
					out = map[string]map[string]*pluginapi.Device{}
				}
				if out[resource] == nil {
					out[resource] = map[string]*pluginapi.Device{}
				}
				out[resource][id] = d
			}
		}
	}
	return out
}

// AllocatableDevices returns the healthy devices of every resource, by
// resource and device ID, as their plugins reported them (upstream's
// GetAllocatableDevices, listed by the podresources API).
func (m *Manager) AllocatableDevices() map[string]map[string]*pluginapi.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[string]*pluginapi.Device{}
	for resource, rs := range m.resources {
		for id := range rs.healthy {
			d := rs.devices[id]
			if d == nil {
				continue
			}
			if out[resource] == nil {
				out[resource] = map[string]*pluginapi.Device{}
			}
			out[resource][id] = &pluginapi.Device{ID: d.ID, Health: d.Health, Topology: d.Topology}
		}
	}
	return out
}
