package topology

import (
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"
)

// Machine is what the CPU and memory managers need to know about the host:
// the CPU layout and, per NUMA node, its memory, huge pages and distances.
type Machine struct {
	CPU *CPUTopology
	// NUMANodes, sorted by ID. Nodes without CPUs are listed too.
	NUMANodes []NUMANode
}

// NUMANode is one memory node.
type NUMANode struct {
	ID   int
	CPUs cpuset.CPUSet
	// MemoryBytes is the node's total memory (MemTotal).
	MemoryBytes uint64
	// HugePages are the node's pre-allocated huge pages, by page size.
	HugePages []HugePages
	// Distances to every node, indexed by node ID as the kernel lists them;
	// nil when unknown.
	Distances []uint64
}

// HugePages is a pool of huge pages of one size.
type HugePages struct {
	PageSizeBytes uint64
	Count         uint64
}

// NUMANodeIDs returns the IDs of m's NUMA nodes.
func (m *Machine) NUMANodeIDs() []int {
	ids := make([]int, 0, len(m.NUMANodes))
	for _, n := range m.NUMANodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// Layout describes a regular machine for Synthetic: every socket has the
// same NUMA nodes, every NUMA node the same cores, every core the same
// threads.
type Layout struct {
	Sockets int
	// NUMANodesPerSocket defaults to 1.
	NUMANodesPerSocket int
	// CoresPerSocket must divide evenly into NUMANodesPerSocket.
	CoresPerSocket int
	// ThreadsPerCore defaults to 1 (no SMT).
	ThreadsPerCore int
	// MemoryPerNUMANode is each node's MemoryBytes.
	MemoryPerNUMANode uint64
	// HugePagesPerNUMANode is copied to every node.
	HugePagesPerNUMANode []HugePages
}

// Synthetic builds the machine l describes, numbering CPUs as Linux does on
// most x86 servers: first thread of every core in core order (socket 0's
// cores, then socket 1's), then the second thread of every core, and so on.
// A core's ID is its first thread's CPU ID. So a 2-socket, 16-core, SMT-2
// machine has CPUs 0-63, core 0 = CPUs {0,32}, socket 0 = 0-15,32-47.
func Synthetic(l Layout) (*Machine, error) {
	if l.NUMANodesPerSocket == 0 {
		l.NUMANodesPerSocket = 1
	}
	if l.ThreadsPerCore == 0 {
		l.ThreadsPerCore = 1
	}
	if l.Sockets <= 0 || l.CoresPerSocket <= 0 || l.NUMANodesPerSocket < 0 || l.ThreadsPerCore < 0 {
		return nil, fmt.Errorf("topology: layout %+v: Sockets and CoresPerSocket must be positive", l)
	}
	if l.CoresPerSocket%l.NUMANodesPerSocket != 0 {
		return nil, fmt.Errorf("topology: layout %+v: CoresPerSocket is not a multiple of NUMANodesPerSocket", l)
	}
	totalCores := l.Sockets * l.CoresPerSocket
	coresPerNUMA := l.CoresPerSocket / l.NUMANodesPerSocket
	cpus := map[int]CPUInfo{}
	for t := 0; t < l.ThreadsPerCore; t++ {
		for core := 0; core < totalCores; core++ {
			socket := core / l.CoresPerSocket
			numa := socket*l.NUMANodesPerSocket + (core%l.CoresPerSocket)/coresPerNUMA
			cpus[t*totalCores+core] = CPUInfo{Socket: socket, NUMANode: numa, Core: core}
		}
	}
	topo, err := NewCPUTopology(cpus)
	if err != nil {
		return nil, err
	}
	m := &Machine{CPU: topo}
	n := l.Sockets * l.NUMANodesPerSocket
	for id := 0; id < n; id++ {
		dist := make([]uint64, n)
		for j := range dist {
			switch {
			case j == id:
				dist[j] = 10
			case j/l.NUMANodesPerSocket == id/l.NUMANodesPerSocket:
				dist[j] = 11
			default:
				dist[j] = 21
			}
		}
		m.NUMANodes = append(m.NUMANodes, NUMANode{
			ID: id, CPUs: topo.CPUsInNUMANodes(id), MemoryBytes: l.MemoryPerNUMANode,
			HugePages: slices.Clone(l.HugePagesPerNUMANode), Distances: dist,
		})
	}
	return m, nil
}
