package dra

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// AllocatedResourcesStatus returns the health of the devices of the
// claims container (a regular container of pod) uses, for its status's
// allocatedResourcesStatus, as upstream kubelet's DRA manager: one entry
// per claim reference named "claim:CLAIM" or "claim:CLAIM/REQUEST", one
// resource per device of the claim serving that request (its first CDI
// device ID, else DRIVER/POOL/DEVICE; devices sharing an ID are listed
// once) with the health its driver last reported: Healthy, Unhealthy, or
// Unknown when the driver has not reported it within its timeout (or
// does not report health). The message is there with
// Config.HealthMessages. Claims not in the cache, and entries without
// devices, are left out. It does not block.
func (m *Manager) AllocatedResourcesStatus(pod *v1.Pod, container string) []v1.ResourceStatus {
	i := slices.IndexFunc(pod.Spec.Containers, func(c v1.Container) bool { return c.Name == container })
	if i < 0 {
		return nil
	}
	byName := map[v1.ResourceName][]v1.ResourceHealth{}
	for _, ref := range pod.Spec.Containers[i].Resources.Claims {
		name, ok := claimName(pod, ref.Name)
		if !ok {
			continue
		}
		key := v1.ResourceName("claim:" + ref.Name)
		if ref.Request != "" {
			key = v1.ResourceName("claim:" + ref.Name + "/" + ref.Request)
		}
		byName[key] = m.claimHealth(pod.Namespace+"/"+name, ref.Request)
	}
	var out []v1.ResourceStatus
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if res := byName[name]; len(res) > 0 {
			out = append(out, v1.ResourceStatus{Name: name, Resources: res})
		}
	}
	return out
}

// claimHealth lists the health of the devices of the cached claim key
// serving request ("" is every request), by resource ID.
func (m *Manager) claimHealth(key, request string) []v1.ResourceHealth {
	m.mu.Lock()
	c := m.claims[key]
	var states map[string]driverState
	if c != nil {
		states = maps.Clone(c.DriverState)
	}
	m.mu.Unlock()
	base := baseRequest(request)
	seen := map[v1.ResourceID]bool{}
	var out []v1.ResourceHealth
	for _, driver := range slices.Sorted(maps.Keys(states)) {
		for _, dev := range states[driver].Devices {
			if request != "" && len(dev.RequestNames) > 0 && !slices.Contains(dev.RequestNames, base) {
				continue
			}
			id := v1.ResourceID(fmt.Sprintf("%s/%s/%s", driver, dev.PoolName, dev.DeviceName))
			if len(dev.CDIDeviceIDs) > 0 {
				id = v1.ResourceID(dev.CDIDeviceIDs[0])
			}
			if seen[id] {
				continue
			}
			seen[id] = true
			health, msg := m.health.get(driver, dev.PoolName, dev.DeviceName)
			r := v1.ResourceHealth{ResourceID: id, Health: health}
			if m.cfg.HealthMessages && msg != "" {
				r.Message = &msg
			}
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b v1.ResourceHealth) int { return cmp.Compare(a.ResourceID, b.ResourceID) })
	return out
}
