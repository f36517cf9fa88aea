package devicemgr

import (
	"maps"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// holders returns the pods holding device id of resource.
func (p podDevices) holders(resource, id string) []string {
	var out []string
	for uid, containers := range p {
		for _, resources := range containers {
			if a := resources[resource]; a != nil && a.ids().Has(id) {
				out = append(out, uid)
				break
			}
		}
	}
	return out
}

// healthChanged sends pods on HealthUpdates, with Config.ReportHealth.
// A full channel drops the notice, logged, as upstream: the pod's next
// sync shows the health anyway.
func (m *Manager) healthChanged(pods []string) {
	if !m.reportHealth {
		return
	}
	sort.Strings(pods)
	for _, uid := range slices.Compact(pods) {
		select {
		case m.healthUpd <- types.UID(uid):
		default:
			m.logger.Error(nil, "Device health update channel is full, discarding a pod's notice", "podUID", uid)
		}
	}
}

// HealthUpdates carries the UIDs of pods holding a device whose health
// changed (or that came back), with Config.ReportHealth.
func (m *Manager) HealthUpdates() <-chan types.UID { return m.healthUpd }

// AllocatedResourcesStatus returns the health of the devices container of
// pod holds, for its status's allocatedResourcesStatus, as upstream's
// device manager: one entry per resource, one resource per device ID,
// Healthy or Unhealthy as the plugin last reported it (Healthy for a
// device it has not reported, and the last report for a plugin that went
// away, as upstream), without a message. Nil when the container holds no
// devices. It does not block.
func (m *Manager) AllocatedResourcesStatus(pod *v1.Pod, container string) []v1.ResourceStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.pods[string(pod.UID)][container]
	var out []v1.ResourceStatus
	for _, name := range slices.Sorted(maps.Keys(held)) {
		ids := sortedIDs(held[name])
		if len(ids) == 0 {
			continue
		}
		st := v1.ResourceStatus{Name: v1.ResourceName(name)}
		for _, id := range ids {
			health := v1.ResourceHealthStatusHealthy
			if rs := m.resources[name]; rs != nil {
				if d := rs.devices[id]; d != nil && d.Health != pluginapi.Healthy {
					health = v1.ResourceHealthStatusUnhealthy
				}
			}
			st.Resources = append(st.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: health})
		}
		out = append(out, st)
	}
	return out
}

// sortedIDs returns the sorted device IDs of a.
func sortedIDs(a *allocation) []string {
	return slices.Sorted(maps.Keys(a.ids()))
}
