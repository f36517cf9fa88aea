package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// CDIDevices returns the CDI device IDs (vendor/class=name) container c of
// pod gets from its prepared claims: for each claim the container lists
// in resources.claims, the devices of the request it names (every device
// when it names none; a device the driver gave no request names serves
// every request), and the devices of status.extendedResourceClaimStatus
// mapped to the container's extended resources. A claim the container
// uses that is not prepared is an error. It does not block.
func (m *Manager) CDIDevices(pod *v1.Pod, c *v1.Container) ([]string, error) {
	requests := map[string][]string{} // claim name -> request names
	uses := map[string][]string{}     // pod claim name -> request names
	for _, rc := range c.Resources.Claims {
		uses[rc.Name] = append(uses[rc.Name], rc.Request)
	}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		reqs, ok := uses[pc.Name]
		if !ok {
			continue
		}
		name, _, err := claimObjectName(pod, pc)
		if err != nil {
			return nil, err
		}
		if name != nil {
			requests[*name] = append(requests[*name], reqs...)
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		for _, rm := range st.RequestMappings {
			q, ok := c.Resources.Requests[v1.ResourceName(rm.ResourceName)]
			if rm.ContainerName == c.Name && ok && !q.IsZero() {
				requests[st.ResourceClaimName] = append(requests[st.ResourceClaimName], rm.RequestName)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		cl := m.claims[pod.Namespace+"/"+name]
		if cl == nil {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", name, pod.Namespace)
		}
		for _, req := range requests[name] {
			out = append(out, cl.cdiDevices(req)...)
		}
	}
	return out, nil
}

// cdiDevices lists the CDI IDs of the claim's devices serving request
// ("" is every request), drivers in name order.
func (c *claim) cdiDevices(request string) []string {
	var out []string
	for _, d := range slices.Sorted(maps.Keys(c.DriverState)) {
		for _, dev := range c.DriverState[d].Devices {
			if request == "" || len(dev.RequestNames) == 0 || slices.Contains(dev.RequestNames, request) {
				out = append(out, dev.CDIDeviceIDs...)
			}
		}
	}
	return out
}

// WrapOptions returns next with the CDI devices of the container's claims
// added (nodekit.ContainerOptions.CDIDevices), for the runtime to hand to
// the container runtime (CRI ContainerConfig.cdi_devices).
func (m *Manager) WrapOptions(next nodekit.ContainerOptionsFunc) nodekit.ContainerOptionsFunc {
	return func(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*nodekit.ContainerOptions, error) {
		var o *nodekit.ContainerOptions
		if next != nil {
			var err error
			if o, err = next(ctx, pod, c, podIPs); err != nil {
				return o, err
			}
		}
		ids, err := m.CDIDevices(pod, c)
		if err != nil {
			return nil, fmt.Errorf("CDI devices of container %q: %w", c.Name, err)
		}
		if len(ids) == 0 {
			return o, nil
		}
		out := nodekit.ContainerOptions{}
		if o != nil {
			out = *o
		}
		out.CDIDevices = append(slices.Clone(out.CDIDevices), ids...)
		return &out, nil
	}
}
