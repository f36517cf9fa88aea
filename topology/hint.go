package topology

import (
	"context"
	"fmt"
	"math/bits"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// NUMAMask is a set of NUMA node IDs (0-63). The zero mask means "no NUMA
// preference" in a Hint.
type NUMAMask uint64

// NewNUMAMask returns the mask of the given node IDs; an ID outside 0-63 is
// an error.
func NewNUMAMask(ids ...int) (NUMAMask, error) {
	var m NUMAMask
	for _, id := range ids {
		if id < 0 || id >= maxNUMANodes {
			return 0, fmt.Errorf("topology: NUMA node %d is outside 0-%d", id, maxNUMANodes-1)
		}
		m |= 1 << uint(id)
	}
	return m, nil
}

// Count is the number of nodes in m.
func (m NUMAMask) Count() int { return bits.OnesCount64(uint64(m)) }

// Has reports whether node id is in m.
func (m NUMAMask) Has(id int) bool { return id >= 0 && id < maxNUMANodes && m&(1<<uint(id)) != 0 }

// IDs returns the node IDs in m, ascending.
func (m NUMAMask) IDs() []int {
	var ids []int
	for v := uint64(m); v != 0; v &= v - 1 {
		ids = append(ids, bits.TrailingZeros64(v))
	}
	return ids
}

// NarrowerThan orders masks as the topology manager prefers them: fewer
// nodes first, then lower node IDs (smaller numeric value).
func (m NUMAMask) NarrowerThan(o NUMAMask) bool {
	if m.Count() != o.Count() {
		return m.Count() < o.Count()
	}
	return m < o
}

// String lists the node IDs ("0,2"), or "any" for the zero mask.
func (m NUMAMask) String() string {
	if m == 0 {
		return "any"
	}
	ids := m.IDs()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// Hint is one way a resource could be placed: on the NUMA nodes of
// NUMANodes (zero: anywhere), Preferred when that placement is as narrow
// as the request allows.
type Hint struct {
	NUMANodes NUMAMask
	Preferred bool
}

func (h Hint) String() string { return fmt.Sprintf("{%s preferred=%t}", h.NUMANodes, h.Preferred) }

// HintProvider is a resource manager the topology manager aligns: package
// cpumanager and memorymanager implement it. Hints are keyed by resource
// name; a nil map or a nil list means "no preference", an empty non-nil
// list means "cannot be satisfied anywhere".
type HintProvider interface {
	// TopologyHints returns the hints for one container of pod (container
	// scope). It must not change what is allocated.
	TopologyHints(ctx context.Context, pod *v1.Pod, c *v1.Container) map[string][]Hint
	// PodTopologyHints returns the hints for the whole pod (pod scope).
	PodTopologyHints(ctx context.Context, pod *v1.Pod) map[string][]Hint
	// Allocate gives container c of pod its resources, honouring affinity
	// (zero NUMANodes: no constraint). It is idempotent: a container that
	// already has an allocation keeps it. An error rejects the pod; an
	// error with a Reason() string method sets the rejection reason.
	Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, affinity Hint) error
}

// containers returns the pod's init containers then its app containers, in
// a new slice.
func containers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}
