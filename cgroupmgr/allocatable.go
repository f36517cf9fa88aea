package cgroupmgr

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Allocation is the node-allocatable arithmetic of one node.
type Allocation struct {
	// Kubepods is what the kubepods cgroup is sized to when "pods" is
	// enforced: capacity - kube-reserved - system-reserved per resource of
	// capacity, never below zero. Eviction thresholds are not subtracted
	// (upstream's GetNodeAllocatableAbsolute): the eviction manager acts
	// before the cgroup limit is reached.
	Kubepods v1.ResourceList
	// Reservation is kube-reserved + system-reserved + hard eviction
	// thresholds per resource of capacity, zero entries left out
	// (upstream's GetNodeAllocatableReservation).
	Reservation v1.ResourceList
	// Allocatable is what the node status reports: capacity - Reservation,
	// never below zero, with every hugepages-<size> capacity also taken
	// off memory (upstream's node status setter).
	Allocatable v1.ResourceList
}

// NodeAllocatable computes the node's Allocation. evictionHard holds the
// hard eviction thresholds already turned into quantities: memory for
// memory.available, ephemeral-storage for nodefs.available (the only two
// upstream reserves for). Reserved resources the node has no capacity for
// are ignored, as upstream. A reservation above capacity is an error
// naming the resource, as upstream refuses to start with it; the
// Allocation is still returned.
func NodeAllocatable(capacity, kubeReserved, systemReserved, evictionHard v1.ResourceList) (Allocation, error) {
	for name := range evictionHard {
		if name != v1.ResourceMemory && name != v1.ResourceEphemeralStorage {
			return Allocation{}, fmt.Errorf("cgroupmgr: evictionHard: %q reserves nothing: only memory (memory.available) and ephemeral-storage (nodefs.available) do", name)
		}
	}
	a := Allocation{Kubepods: v1.ResourceList{}, Reservation: v1.ResourceList{}, Allocatable: v1.ResourceList{}}
	var errs []string
	for name, capQ := range capacity {
		abs := capQ.DeepCopy()
		abs.Sub(systemReserved[name])
		abs.Sub(kubeReserved[name])
		if abs.Sign() < 0 {
			abs.Set(0)
		}
		a.Kubepods[name] = abs

		res := resource.NewQuantity(0, resource.DecimalSI)
		res.Add(systemReserved[name])
		res.Add(kubeReserved[name])
		res.Add(evictionHard[name])
		if !res.IsZero() {
			a.Reservation[name] = *res
		}
		alloc := capQ.DeepCopy()
		alloc.Sub(*res)
		if alloc.Sign() < 0 {
			errs = append(errs, fmt.Sprintf("%s: reservation %s exceeds capacity %s", name, res.String(), capQ.String()))
			alloc.Set(0)
		}
		a.Allocatable[name] = alloc
	}
	for name, capQ := range capacity {
		if _, ok := hugePageSize(name); !ok {
			continue
		}
		mem, ok := a.Allocatable[v1.ResourceMemory]
		if !ok {
			continue
		}
		mem.Sub(capQ)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		a.Allocatable[v1.ResourceMemory] = mem
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return a, fmt.Errorf("cgroupmgr: invalid node allocatable configuration: %s", strings.Join(errs, "; "))
	}
	return a, nil
}
