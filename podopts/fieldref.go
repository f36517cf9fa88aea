package podopts

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/internal/downward"
)

// fieldRefValue resolves a downward-API fieldRef against the pod.
func (r *Resolver) fieldRefValue(fs *v1.ObjectFieldSelector, pod *v1.Pod, podIPs []string) (string, error) {
	// The API server defaults apiVersion to v1; an undefaulted pod leaves it empty.
	if fs.APIVersion != "" && fs.APIVersion != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", fs.APIVersion)
	}
	path := fs.FieldPath
	if v, ok, err := downward.MetadataValue(pod, path); ok {
		return v, err
	}
	switch path {
	case "spec.nodeName", "spec.host":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		ips, err := hostIPs(r.cfg.NodeIPs)
		if err != nil {
			return "", err
		}
		if path == "status.hostIP" {
			return ips[0], nil
		}
		return strings.Join(ips, ","), nil
	case "status.podIP", "status.podIPs":
		ips := sortPodIPs(podIPs, r.cfg.NodeIPs)
		if path == "status.podIPs" {
			return strings.Join(ips, ","), nil
		}
		if len(ips) == 0 {
			return "", nil
		}
		return ips[0], nil
	case "spec.restartPolicy", "spec.schedulerName", "status.phase":
		// Valid field selectors, but not downward-API fields.
		return "", fmt.Errorf("unsupported fieldPath: %s", path)
	}
	return "", fmt.Errorf("field label not supported: %s", path)
}

// hostIPs returns the node's primary IP and the first IP of the other
// family, if any.
func hostIPs(nodeIPs []string) ([]string, error) {
	var parsed []netip.Addr
	for _, s := range nodeIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			parsed = append(parsed, a.Unmap())
		}
	}
	if len(parsed) == 0 {
		return nil, fmt.Errorf("host IP unknown; known addresses: %v", nodeIPs)
	}
	out := []string{parsed[0].String()}
	for _, a := range parsed[1:] {
		if a.Is4() != parsed[0].Is4() {
			out = append(out, a.String())
			break
		}
	}
	return out, nil
}

// sortPodIPs picks the first pod IP of the node's primary family (IPv4 when
// the node has no IP), then the first of the other family, normalized.
func sortPodIPs(podIPs, nodeIPs []string) []string {
	primary4 := true
	if len(nodeIPs) > 0 {
		if a, err := netip.ParseAddr(nodeIPs[0]); err == nil && !a.Unmap().Is4() {
			primary4 = false
		}
	}
	var out []string
	for _, want4 := range []bool{primary4, !primary4} {
		for _, s := range podIPs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			a = a.Unmap()
			if a.Is4() == want4 {
				out = append(out, a.String())
				break
			}
		}
	}
	return out
}

// resourceFieldRefValue resolves a resourceFieldRef. Missing cpu, memory and
// ephemeral-storage limits default to the pod-level limit, else to node
// allocatable.
func (r *Resolver) resourceFieldRefValue(fs *v1.ResourceFieldSelector, pod *v1.Pod, c *v1.Container) (string, error) {
	target := c
	if fs.ContainerName != "" {
		target = findContainer(pod, fs.ContainerName)
		if target == nil {
			return "", fmt.Errorf("container %s not found", fs.ContainerName)
		}
	}
	limits := mergedLimits(target.Resources.Limits, r.defaultLimits(pod))
	return resourceValue(fs, limits, target.Resources.Requests)
}

// defaultLimits is node allocatable with the pod-level cpu and memory limits
// laid over it.
func (r *Resolver) defaultLimits(pod *v1.Pod) v1.ResourceList {
	alloc := r.cfg.NodeAllocatable
	if pod.Spec.Resources == nil || !podLevelLimitsSet(pod.Spec.Resources.Limits) {
		return alloc
	}
	out := alloc.DeepCopy()
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		q, ok := pod.Spec.Resources.Limits[name]
		if _, inAlloc := out[name]; ok && inAlloc && !q.IsZero() {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// podLevelLimitsSet reports whether a pod-level limit the kubelet supports
// (cpu, memory, hugepages) is set.
func podLevelLimitsSet(limits v1.ResourceList) bool {
	for name := range limits {
		if name == v1.ResourceCPU || name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			return true
		}
	}
	return false
}

// mergedLimits returns limits with unset or zero cpu, memory and
// ephemeral-storage taken from defaults. Hugepages are never defaulted.
func mergedLimits(limits, defaults v1.ResourceList) v1.ResourceList {
	out := limits.DeepCopy()
	if out == nil {
		out = v1.ResourceList{}
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := out[name]; ok && !q.IsZero() {
			continue
		}
		if d, ok := defaults[name]; ok {
			out[name] = d.DeepCopy()
		}
	}
	return out
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// resourceValue renders limits.X or requests.X divided by the divisor,
// rounded up.
func resourceValue(fs *v1.ResourceFieldSelector, limits, requests v1.ResourceList) (string, error) {
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, ok := strings.Cut(fs.Resource, ".")
	var list v1.ResourceList
	switch {
	case ok && kind == "limits":
		list = limits
	case ok && kind == "requests":
		list = requests
	default:
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	rn := v1.ResourceName(name)
	q := list[rn]
	switch {
	case rn == v1.ResourceCPU:
		return ceilDiv(float64(q.MilliValue()), float64(divisor.MilliValue()), fs.Resource)
	case rn == v1.ResourceMemory, rn == v1.ResourceEphemeralStorage,
		strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
		return ceilDiv(float64(q.Value()), float64(divisor.Value()), fs.Resource)
	}
	return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
}

func ceilDiv(v, d float64, res string) (string, error) {
	if d <= 0 {
		return "", fmt.Errorf("invalid divisor for %s: must be positive", res)
	}
	return strconv.FormatInt(int64(math.Ceil(v/d)), 10), nil
}
