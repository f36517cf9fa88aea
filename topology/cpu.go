package topology

import (
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"
)

// CPUInfo places one logical CPU (a hardware thread) on the machine.
type CPUInfo struct {
	// Socket is the physical package.
	Socket int
	// NUMANode is the memory node the CPU belongs to.
	NUMANode int
	// Core identifies the physical core, unique across the machine (not
	// the per-socket core_id of sysfs). Discover uses the lowest CPU ID
	// among the core's threads, as upstream kubelet does.
	Core int
}

// CPUTopology is how a machine's logical CPUs are laid out over cores,
// sockets and NUMA nodes. Build one with NewCPUTopology, Synthetic or
// Discover. It is immutable and safe for concurrent use; every set it
// returns is a fresh value the caller may keep.
type CPUTopology struct {
	info    map[int]CPUInfo
	all     cpuset.CPUSet
	cores   map[int]cpuset.CPUSet // core -> its CPUs
	sockets map[int]cpuset.CPUSet // socket -> its CPUs
	numas   map[int]cpuset.CPUSet // NUMA node -> its CPUs
}

// NewCPUTopology builds a topology from the placement of every logical CPU.
// IDs must be non-negative and a core must sit in one socket and one NUMA
// node; anything else is an error naming the CPU.
func NewCPUTopology(cpus map[int]CPUInfo) (*CPUTopology, error) {
	if len(cpus) == 0 {
		return nil, fmt.Errorf("topology: no CPUs")
	}
	t := &CPUTopology{
		info:    make(map[int]CPUInfo, len(cpus)),
		cores:   map[int]cpuset.CPUSet{},
		sockets: map[int]cpuset.CPUSet{},
		numas:   map[int]cpuset.CPUSet{},
	}
	coreHome := map[int]CPUInfo{}
	ids := make([]int, 0, len(cpus))
	for id, ci := range cpus {
		if id < 0 || ci.Socket < 0 || ci.NUMANode < 0 || ci.Core < 0 {
			return nil, fmt.Errorf("topology: CPU %d: negative ID in %+v", id, ci)
		}
		if ci.NUMANode >= maxNUMANodes {
			return nil, fmt.Errorf("topology: CPU %d: NUMA node %d is beyond the %d supported", id, ci.NUMANode, maxNUMANodes)
		}
		if home, ok := coreHome[ci.Core]; ok && (home.Socket != ci.Socket || home.NUMANode != ci.NUMANode) {
			return nil, fmt.Errorf("topology: CPU %d: core %d spans sockets or NUMA nodes (%+v and %+v)", id, ci.Core, home, ci)
		}
		coreHome[ci.Core] = ci
		t.info[id] = ci
		ids = append(ids, id)
	}
	slices.Sort(ids)
	byCore, bySocket, byNUMA := map[int][]int{}, map[int][]int{}, map[int][]int{}
	for _, id := range ids {
		ci := t.info[id]
		byCore[ci.Core] = append(byCore[ci.Core], id)
		bySocket[ci.Socket] = append(bySocket[ci.Socket], id)
		byNUMA[ci.NUMANode] = append(byNUMA[ci.NUMANode], id)
	}
	for k, v := range byCore {
		t.cores[k] = cpuset.New(v...)
	}
	for k, v := range bySocket {
		t.sockets[k] = cpuset.New(v...)
	}
	for k, v := range byNUMA {
		t.numas[k] = cpuset.New(v...)
	}
	t.all = cpuset.New(ids...)
	return t, nil
}

// maxNUMANodes is what a NUMAMask can hold.
const maxNUMANodes = 64

// NumCPUs is the number of logical CPUs.
func (t *CPUTopology) NumCPUs() int { return len(t.info) }

// NumCores is the number of physical cores.
func (t *CPUTopology) NumCores() int { return len(t.cores) }

// NumSockets is the number of sockets.
func (t *CPUTopology) NumSockets() int { return len(t.sockets) }

// NumNUMANodes is the number of NUMA nodes that hold CPUs.
func (t *CPUTopology) NumNUMANodes() int { return len(t.numas) }

// CPUsPerCore is the number of threads per core (NumCPUs/NumCores), the
// allocation unit of the full-pcpus-only policy option.
func (t *CPUTopology) CPUsPerCore() int { return t.NumCPUs() / t.NumCores() }

// CPUsPerSocket is NumCPUs/NumSockets.
func (t *CPUTopology) CPUsPerSocket() int { return t.NumCPUs() / t.NumSockets() }

// Info returns where cpu sits, and false for a CPU the machine lacks.
func (t *CPUTopology) Info(cpu int) (CPUInfo, bool) {
	ci, ok := t.info[cpu]
	return ci, ok
}

// CPUs returns every logical CPU.
func (t *CPUTopology) CPUs() cpuset.CPUSet { return t.all }

// Sockets returns the socket IDs.
func (t *CPUTopology) Sockets() cpuset.CPUSet { return keys(t.sockets) }

// NUMANodes returns the IDs of the NUMA nodes that hold CPUs.
func (t *CPUTopology) NUMANodes() cpuset.CPUSet { return keys(t.numas) }

// Cores returns the core IDs.
func (t *CPUTopology) Cores() cpuset.CPUSet { return keys(t.cores) }

// CPUsInCores returns the CPUs of the given cores.
func (t *CPUTopology) CPUsInCores(ids ...int) cpuset.CPUSet { return union(t.cores, ids) }

// CPUsInSockets returns the CPUs of the given sockets.
func (t *CPUTopology) CPUsInSockets(ids ...int) cpuset.CPUSet { return union(t.sockets, ids) }

// CPUsInNUMANodes returns the CPUs of the given NUMA nodes.
func (t *CPUTopology) CPUsInNUMANodes(ids ...int) cpuset.CPUSet { return union(t.numas, ids) }

// SocketsInNUMANodes returns the sockets with CPUs in the given NUMA nodes.
func (t *CPUTopology) SocketsInNUMANodes(ids ...int) cpuset.CPUSet {
	return t.project(t.CPUsInNUMANodes(ids...), func(ci CPUInfo) int { return ci.Socket })
}

// NUMANodesInSockets returns the NUMA nodes with CPUs in the given sockets.
func (t *CPUTopology) NUMANodesInSockets(ids ...int) cpuset.CPUSet {
	return t.project(t.CPUsInSockets(ids...), func(ci CPUInfo) int { return ci.NUMANode })
}

// CoreOf returns the core of cpu, and false for an unknown CPU.
func (t *CPUTopology) CoreOf(cpu int) (int, bool) {
	ci, ok := t.info[cpu]
	return ci.Core, ok
}

// NUMANodesOf returns the NUMA nodes the given CPUs sit on; unknown CPUs
// are ignored.
func (t *CPUTopology) NUMANodesOf(cpus cpuset.CPUSet) cpuset.CPUSet {
	return t.project(cpus, func(ci CPUInfo) int { return ci.NUMANode })
}

func (t *CPUTopology) project(cpus cpuset.CPUSet, f func(CPUInfo) int) cpuset.CPUSet {
	var out []int
	for _, c := range cpus.UnsortedList() {
		if ci, ok := t.info[c]; ok {
			out = append(out, f(ci))
		}
	}
	return cpuset.New(out...)
}

// String summarises the topology for logs.
func (t *CPUTopology) String() string {
	return fmt.Sprintf("%d CPUs, %d cores, %d sockets, %d NUMA nodes", t.NumCPUs(), t.NumCores(), t.NumSockets(), t.NumNUMANodes())
}

func keys(m map[int]cpuset.CPUSet) cpuset.CPUSet {
	ids := make([]int, 0, len(m))
	for k := range m {
		ids = append(ids, k)
	}
	return cpuset.New(ids...)
}

func union(m map[int]cpuset.CPUSet, ids []int) cpuset.CPUSet {
	if len(ids) == 1 {
		return m[ids[0]]
	}
	sets := make([]cpuset.CPUSet, 0, len(ids))
	for _, id := range ids {
		sets = append(sets, m[id])
	}
	return cpuset.New().Union(sets...)
}
