package podresources

import (
	"slices"
	"sort"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"
)

// CPUIDs lists a CPU set as the API's CPU IDs, ascending.
func CPUIDs(set cpuset.CPUSet) []int64 {
	out := make([]int64, 0, set.Size())
	for _, c := range set.List() {
		out = append(out, int64(c))
	}
	return out
}

// Devices lists devices by resource and ID as the API does: one entry
// per device and NUMA node it reports (one without topology for a device
// that reports none), ordered by resource, then device ID.
func Devices(byResource map[string]map[string]*pluginapi.Device) []*api.ContainerDevices {
	var out []*api.ContainerDevices
	resources := make([]string, 0, len(byResource))
	for r := range byResource {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	for _, r := range resources {
		ids := make([]string, 0, len(byResource[r]))
		for id := range byResource[r] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			nodes := byResource[r][id].GetTopology().GetNodes()
			if len(nodes) == 0 {
				out = append(out, &api.ContainerDevices{ResourceName: r, DeviceIds: []string{id}})
				continue
			}
			for _, n := range nodes {
				out = append(out, &api.ContainerDevices{
					ResourceName: r, DeviceIds: []string{id},
					Topology: &api.TopologyInfo{Nodes: []*api.NUMANode{{ID: n.GetID()}}},
				})
			}
		}
	}
	return out
}

// Memory is one memory block as the API reports it.
func Memory(memoryType string, size uint64, numaNodes []int) *api.ContainerMemory {
	m := &api.ContainerMemory{MemoryType: memoryType, Size: size, Topology: &api.TopologyInfo{Nodes: []*api.NUMANode{}}}
	for _, n := range numaNodes {
		m.Topology.Nodes = append(m.Topology.Nodes, &api.NUMANode{ID: int64(n)})
	}
	return m
}
