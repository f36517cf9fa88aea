package cpumanager

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/topology"
)

// The machines of upstream's CPU manager tests (pkg/kubelet/cm/cpumanager
// policy_test.go), described here in a few lines each.

// singleSocketHT: 1 socket, 4 cores, SMT-2; core i = CPUs {i, i+4}.
func singleSocketHT(t testing.TB) *topology.CPUTopology {
	return synthetic(t, topology.Layout{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2})
}

// dualSocketHT: 2 sockets (= NUMA nodes), 6 cores, SMT-2, numbered
// alternately: CPU i is on socket i%2, core i%6.
func dualSocketHT(t testing.TB) *topology.CPUTopology {
	cpus := map[int]topology.CPUInfo{}
	for i := 0; i < 12; i++ {
		cpus[i] = topology.CPUInfo{Socket: i % 2, NUMANode: i % 2, Core: i % 6}
	}
	return mustTopo(t, cpus)
}

// dualSocketNoHT: 2 sockets of 4 single-thread cores, CPUs 0-3 and 4-7.
func dualSocketNoHT(t testing.TB) *topology.CPUTopology {
	return synthetic(t, topology.Layout{Sockets: 2, CoresPerSocket: 4})
}

// tripleSocketHT: 3 sockets of 3 SMT-2 cores; sibling CPUs are adjacent
// and socket 1 holds CPUs 0-5.
func tripleSocketHT(t testing.TB) *topology.CPUTopology {
	cpus := map[int]topology.CPUInfo{}
	socketOf := []int{1, 0, 2}
	for i := 0; i < 18; i++ {
		s := socketOf[i/6]
		cpus[i] = topology.CPUInfo{Socket: s, NUMANode: s, Core: i / 2}
	}
	return mustTopo(t, cpus)
}

// dualSocketMultiNUMAHT: dual Xeon Gold 6230: 2 sockets, 2 NUMA nodes per
// socket, 20 cores per socket, SMT-2; node 0 = 0-9,40-49, node 3 =
// 30-39,70-79.
func dualSocketMultiNUMAHT(t testing.TB) *topology.CPUTopology {
	return synthetic(t, topology.Layout{Sockets: 2, NUMANodesPerSocket: 2, CoresPerSocket: 20, ThreadsPerCore: 2})
}

// dualSocketMultiNUMAHTLarge: 2 sockets, 4 NUMA nodes per socket, 64 cores
// per socket, SMT-2; node 5 = 80-95,208-223.
func dualSocketMultiNUMAHTLarge(t testing.TB) *topology.CPUTopology {
	return synthetic(t, topology.Layout{Sockets: 2, NUMANodesPerSocket: 4, CoresPerSocket: 64, ThreadsPerCore: 2})
}

func synthetic(t testing.TB, l topology.Layout) *topology.CPUTopology {
	t.Helper()
	m, err := topology.Synthetic(l)
	if err != nil {
		t.Fatal(err)
	}
	return m.CPU
}

func mustTopo(t testing.TB, cpus map[int]topology.CPUInfo) *topology.CPUTopology {
	t.Helper()
	topo, err := topology.NewCPUTopology(cpus)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func set(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	c, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return c
}

func TestTopologiesMatchUpstream(t *testing.T) {
	if got := dualSocketMultiNUMAHT(t).CPUsInNUMANodes(3).String(); got != "30-39,70-79" {
		t.Errorf("6230 node 3 = %s", got)
	}
	if got := dualSocketMultiNUMAHTLarge(t).CPUsInNUMANodes(5).String(); got != "80-95,208-223" {
		t.Errorf("large node 5 = %s", got)
	}
	if got := dualSocketHT(t).CPUsInSockets(0).String(); got != "0,2,4,6,8,10" {
		t.Errorf("dual socket HT socket 0 = %s", got)
	}
	if got := tripleSocketHT(t).CPUsInSockets(1).String(); got != "0-5" {
		t.Errorf("triple socket socket 1 = %s", got)
	}
}
