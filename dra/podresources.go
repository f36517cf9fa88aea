package dra

import (
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DynamicResources lists the prepared claims container c of pod uses, as
// the podresources API reports them: per claim its name and namespace,
// and per allocated device (of the request the container names, every
// device when it names none) the driver, pool, device and CDI device IDs.
// Claims not prepared (yet, or any more) are left out. It does not block.
func (m *Manager) DynamicResources(pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesv1.DynamicResource
	for _, rc := range c.Resources.Claims {
		name, ok := claimName(pod, rc.Name)
		if !ok {
			continue
		}
		cl := m.claims[pod.Namespace+"/"+name]
		if cl == nil || !cl.Prepared {
			continue
		}
		out = append(out, &podresourcesv1.DynamicResource{
			ClaimName: name, ClaimNamespace: pod.Namespace, ClaimResources: cl.claimResources(rc.Request),
		})
	}
	return out
}

// claimName is the name of the ResourceClaim of the pod's claim entry
// podClaim (generated ones from status.resourceClaimStatuses); false
// when there is none (yet).
func claimName(pod *v1.Pod, podClaim string) (string, bool) {
	i := slices.IndexFunc(pod.Spec.ResourceClaims, func(pc v1.PodResourceClaim) bool { return pc.Name == podClaim })
	if i < 0 {
		return "", false
	}
	name, _, err := claimObjectName(pod, &pod.Spec.ResourceClaims[i])
	if err != nil || name == nil {
		return "", false
	}
	return *name, true
}

// claimResources lists the claim's devices serving request ("" is every
// request), drivers in name order.
func (c *claim) claimResources(request string) []*podresourcesv1.ClaimResource {
	var out []*podresourcesv1.ClaimResource
	for _, driver := range slices.Sorted(maps.Keys(c.DriverState)) {
		for _, dev := range c.DriverState[driver].Devices {
			if request != "" && len(dev.RequestNames) > 0 && !slices.Contains(dev.RequestNames, request) {
				continue
			}
			r := &podresourcesv1.ClaimResource{DriverName: driver, PoolName: dev.PoolName, DeviceName: dev.DeviceName}
			for _, id := range dev.CDIDeviceIDs {
				r.CdiDevices = append(r.CdiDevices, &podresourcesv1.CDIDevice{Name: id})
			}
			out = append(out, r)
		}
	}
	return out
}
