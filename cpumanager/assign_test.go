package cpumanager

import (
	"testing"

	"github.com/nodekit/nodekit/topology"
)

type assignCase struct {
	name  string
	topo  func(testing.TB) *topology.CPUTopology
	avail string // cpuset list
	n     int
	want  string // cpuset list, or the error text
	err   bool
}

// packedCases are upstream's expected takeByTopologyNUMAPacked choices
// (cpu_assignment_test.go) on the machines they describe; the first block
// holds for the distributed allocator with group size 1 too.
func commonAssignCases() []assignCase {
	return []assignCase{
		{"more than available, single socket HT", singleSocketHT, "0,2,4,6", 5, "not enough cpus available to satisfy request: requested=5, available=4", true},
		{"zero CPUs", singleSocketHT, "0-7", 0, "", false},
		{"one CPU", singleSocketHT, "0-7", 1, "0", false},
		{"one CPU, some taken: sibling of a busy core first", singleSocketHT, "1,3,5-7", 1, "6", false},
		{"two CPUs = one core", singleSocketHT, "0-7", 2, "0,4", false},
		{"all CPUs", singleSocketHT, "0-7", 8, "0-7", false},
		{"two CPUs, one whole core free", singleSocketHT, "0-3,6", 2, "2,6", false},
		{"a socket, dual socket HT", dualSocketHT, "0-11", 6, "0,2,4,6,8,10", false},
		{"a socket, multi-NUMA socket", dualSocketMultiNUMAHT, "0-79", 40, "0-19,40-59", false},
		{"a NUMA node, multi-NUMA socket", dualSocketMultiNUMAHT, "0-79", 20, "0-9,40-49", false},
		{"a NUMA node with node 0 taken", dualSocketMultiNUMAHT, "10-39,50-79", 20, "10-19,50-59", false},
		{"a socket and a NUMA node", dualSocketMultiNUMAHT, "0-79", 60, "0-29,40-69", false},
		{"a socket and a NUMA node, one core taken", dualSocketMultiNUMAHT, "1-39,41-79", 60, "10-39,50-79", false},
	}
}

func TestTakePackedMatchesUpstream(t *testing.T) {
	cases := append(commonAssignCases(),
		assignCase{"one CPU, dual socket HT: core from socket 0", dualSocketHT, "1-5,7-11", 1, "2", false},
		assignCase{"4 cores: fill NUMA node 0, then 1 core of node 1", dualSocketHT, "0-11", 8, "0-2,4,6-8,10", false},
		assignCase{"32 cores: fill 3 NUMA nodes, then 2 cores of the 4th", dualSocketMultiNUMAHT, "0-79", 64, "0-31,40-71", false},
		// From upstream's static policy tests (policy_static_test.go).
		assignCase{"6 CPUs with CPU 2 taken: the other socket", dualSocketHT, "1,3-11", 6, "1,3,5,7,9,11", false},
		assignCase{"6 CPUs with core 1 taken: three cores of socket 0", dualSocketHT, "2-4,6-11", 6, "2-4,8-10", false},
		assignCase{"8 CPUs with CPU 2 taken: socket 1 and a core", dualSocketHT, "1,3-11", 8, "1,3-5,7,9-11", false},
		assignCase{"4 of dual socket no HT: the free socket", dualSocketNoHT, "1,3-7", 4, "4-7", false},
		assignCase{"4 of dual socket no HT, mixed", dualSocketNoHT, "1,3,6-7", 4, "1,3,6-7", false},
		assignCase{"2 with cores 2 and 3 taken: core 1", singleSocketHT, "1,4-5", 2, "1,5", false},
		assignCase{"1 with CPU 0 reserved: its sibling", singleSocketHT, "1-7", 1, "4", false},
		assignCase{"triple socket: a whole socket first", tripleSocketHT, "0-17", 6, "6-11", false},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(tc.topo(t))
			got, err := takePacked(l, set(t, tc.avail), tc.n)
			checkAssign(t, tc, got.String(), err)
		})
	}
}

func TestTakeDistributedMatchesUpstream(t *testing.T) {
	type distCase struct {
		assignCase
		group int
	}
	var cases []distCase
	for _, c := range commonAssignCases() {
		cases = append(cases, distCase{c, 1})
	}
	cases = append(cases, []distCase{
		{assignCase{"4 cores, 2 per NUMA node", dualSocketHT, "0-11", 8, "0-3,6-9", false}, 1},
		{assignCase{"32 cores, 8 per NUMA node", dualSocketMultiNUMAHT, "0-79", 64, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77", false}, 1},
		{assignCase{"24 cores over the first 3 nodes", dualSocketMultiNUMAHT, "0-79", 48, "0-7,10-17,20-27,40-47,50-57,60-67", false}, 1},
		{assignCase{"24 cores, most of node 0", dualSocketMultiNUMAHT, "1-29,32-39,41-69,72-79", 48, "1-8,10-17,20-27,41-48,50-57,60-67", false}, 1},
		{assignCase{"24 cores over the last 3 nodes for balance", dualSocketMultiNUMAHT, "2-29,31-39,42-69,71-79", 48, "10-17,20-27,31-38,50-57,60-67,71-78", false}, 1},
		{assignCase{"8 cores, 2 per node", dualSocketMultiNUMAHT, "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71", false}, 1},
		{assignCase{"one CPU from socket 1", dualSocketHT, "1-5,7-11", 1, "1", false}, 1},
		{assignCase{"one CPU, group of 2: packs", dualSocketHT, "1-5,7-11", 1, "2", false}, 2},
		{assignCase{"13 cores over 2 nodes", dualSocketMultiNUMAHT, "0-79", 26, "0-6,10-16,40-45,50-55", false}, 1},
		{assignCase{"13 cores over 2 nodes, group 2", dualSocketMultiNUMAHT, "0-79", 26, "0-6,10-15,40-46,50-55", false}, 2},
		{assignCase{"31 cores, remainder to nodes 0 and 1", dualSocketMultiNUMAHT, "0-79", 62, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76", false}, 1},
		{assignCase{"31 cores, group 2, remainder to nodes 0-2", dualSocketMultiNUMAHT, "0-79", 62, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76", false}, 2},
		{assignCase{"31 cores, remainder to nodes 2 and 3 for balance", dualSocketMultiNUMAHT, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77", false}, 1},
		{assignCase{"31 cores, group 2, remainder to nodes 0, 2, 3", dualSocketMultiNUMAHT, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77", false}, 2},
		{assignCase{"remainder only to nodes that can take it", dualSocketMultiNUMAHT, "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74", false}, 1},
		{assignCase{"live machine regression", dualSocketMultiNUMAHTLarge,
			"0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255", 28,
			"43-47,75-79,96,101-105,171-174,203-206,229-232", false}, 1},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(tc.topo(t))
			got, err := takeDistributed(l, set(t, tc.avail), tc.n, tc.group)
			checkAssign(t, tc.assignCase, got.String(), err)
		})
	}
}

func checkAssign(t *testing.T, tc assignCase, got string, err error) {
	t.Helper()
	if tc.err {
		if err == nil || err.Error() != tc.want {
			t.Fatalf("error %v, want %q", err, tc.want)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got != tc.want {
		t.Fatalf("took %s, want %s", got, tc.want)
	}
}
