package memorymanager

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Block is memory of one type (memory or hugepages-<size>) handed to a
// container, spread over the NUMA nodes of NUMAAffinity. It is the
// checkpoint's block, field for field.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// memoryTable is one resource of one NUMA node, in bytes.
type memoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// numaNodeState is one NUMA node: how many blocks use it, its resources,
// and the group of nodes it is allocated together with (Cells; itself
// alone while it holds no cross-node block).
type numaNodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*memoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}

type numaNodeMap map[int]*numaNodeState

type containerAssignments map[string]map[string][]Block

func (m numaNodeMap) clone() numaNodeMap {
	out := make(numaNodeMap, len(m))
	for id, n := range m {
		if n == nil {
			out[id] = nil
			continue
		}
		c := &numaNodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: slices.Clone(n.Cells)}
		if n.MemoryMap != nil {
			c.MemoryMap = make(map[v1.ResourceName]*memoryTable, len(n.MemoryMap))
			for name, t := range n.MemoryMap {
				tc := *t
				c.MemoryMap[name] = &tc
			}
		}
		out[id] = c
	}
	return out
}

// table returns node's table for a resource, or an empty one when the node
// lacks it (a huge page size only some nodes have).
func (m numaNodeMap) table(node int, name v1.ResourceName) *memoryTable {
	if n := m[node]; n != nil {
		if t := n.MemoryMap[name]; t != nil {
			return t
		}
	}
	return &memoryTable{}
}

func (a containerAssignments) clone() containerAssignments {
	out := make(containerAssignments, len(a))
	for pod, containers := range a {
		out[pod] = make(map[string][]Block, len(containers))
		for name, blocks := range containers {
			out[pod][name] = cloneBlocks(blocks)
		}
	}
	return out
}

func cloneBlocks(blocks []Block) []Block {
	out := make([]Block, len(blocks))
	for i, b := range blocks {
		out[i] = Block{NUMAAffinity: slices.Clone(b.NUMAAffinity), Type: b.Type, Size: b.Size}
	}
	return out
}

// state is what the memory manager holds: the NUMA nodes' accounting and
// each container's blocks.
type state struct {
	machine     numaNodeMap
	assignments containerAssignments
}

func (s state) clone() state {
	return state{machine: s.machine.clone(), assignments: s.assignments.clone()}
}

func (s state) blocks(pod, container string) []Block { return s.assignments[pod][container] }

func (s state) setBlocks(pod, container string, blocks []Block) {
	if s.assignments[pod] == nil {
		s.assignments[pod] = map[string][]Block{}
	}
	s.assignments[pod][container] = blocks
}

func (s state) remove(pod, container string) {
	delete(s.assignments[pod], container)
	if len(s.assignments[pod]) == 0 {
		delete(s.assignments, pod)
	}
}
