package cpumanager

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"testing/quick"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/topology"
)

// naivePacked is the reference for takePacked, written from the rule
// rather than for speed: every phase snapshots the free counts, gives each
// NUMA node, socket, core and CPU a sort key that spells out the order in
// full (outer group's free count and ID, inner group's, the core's own),
// sorts globally by key and takes in that order. takePacked instead nests
// per-group sorts and keeps counts incrementally; on machines where one of
// socket and NUMA node contains the other, both must agree exactly.
func naivePacked(topo *topology.CPUTopology, avail cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	free := avail.Intersection(topo.CPUs())
	if n < 1 {
		return cpuset.New(), nil
	}
	if n > free.Size() {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, avail.Size())
	}
	numaFirst := topo.NumSockets() >= topo.NumNUMANodes()
	result := cpuset.New()
	need := n
	freeOf := func(s cpuset.CPUSet) int { return s.Intersection(free).Size() }
	// key of a CPU's place, outer level first.
	key := func(cpu int) []int {
		ci, _ := topo.Info(cpu)
		numa := []int{freeOf(topo.CPUsInNUMANodes(ci.NUMANode)), ci.NUMANode}
		socket := []int{freeOf(topo.CPUsInSockets(ci.Socket)), ci.Socket}
		core := []int{freeOf(topo.CPUsInCores(ci.Core)), ci.Core}
		if numaFirst {
			return slices.Concat(numa, socket, core)
		}
		return slices.Concat(socket, numa, core)
	}
	take := func(cpus cpuset.CPUSet) {
		result = result.Union(cpus)
		free = free.Difference(cpus)
		need -= cpus.Size()
	}
	// wholeUnits takes every whole unit (in key order of its first CPU,
	// cut to the unit's own levels) the request still fills.
	wholeUnits := func(units cpuset.CPUSet, cpusOf func(...int) cpuset.CPUSet, keyLen func() int) {
		type unit struct {
			cpus cpuset.CPUSet
			key  []int
		}
		var us []unit
		for _, u := range units.List() {
			cpus := cpusOf(u)
			if cpus.IsEmpty() || !cpus.IsSubsetOf(free) {
				continue
			}
			us = append(us, unit{cpus, key(cpus.List()[0])[:keyLen()]})
		}
		slices.SortStableFunc(us, func(a, b unit) int { return slices.Compare(a.key, b.key) })
		for _, u := range us {
			if need >= u.cpus.Size() {
				take(u.cpus)
			}
		}
	}
	numaLevel := func() int {
		if numaFirst {
			return 2
		}
		return 4
	}
	socketLevel := func() int {
		if numaFirst {
			return 4
		}
		return 2
	}
	if numaFirst {
		wholeUnits(topo.NUMANodes(), topo.CPUsInNUMANodes, numaLevel)
		wholeUnits(topo.Sockets(), topo.CPUsInSockets, socketLevel)
	} else {
		wholeUnits(topo.Sockets(), topo.CPUsInSockets, socketLevel)
		wholeUnits(topo.NUMANodes(), topo.CPUsInNUMANodes, numaLevel)
	}
	if need < 1 {
		return result, nil
	}
	wholeUnits(topo.Cores(), topo.CPUsInCores, func() int { return 6 })
	if need < 1 {
		return result, nil
	}
	threads := free.List()
	keys := map[int][]int{}
	for _, cpu := range threads {
		keys[cpu] = append(key(cpu), cpu)
	}
	slices.SortFunc(threads, func(a, b int) int { return slices.Compare(keys[a], keys[b]) })
	for _, cpu := range threads[:need] {
		take(cpuset.New(cpu))
	}
	return result, nil
}

// scenario is a random machine, a random set of free CPUs and a request.
type scenario struct {
	cpus  map[int]topology.CPUInfo
	avail []int
	n     int
}

// GoString keeps quick's failure report short; the failing check logs the
// machine and request in full.
func (s scenario) GoString() string {
	return fmt.Sprintf("scenario{%d CPUs, %d free, n=%d}", len(s.cpus), len(s.avail), s.n)
}

func (scenario) Generate(r *rand.Rand, _ int) reflect.Value {
	sockets, threads := 1+r.Intn(4), 1+r.Intn(4)
	coresPerSocket := 1 + r.Intn(6)
	// Either each socket splits into NUMA nodes, or NUMA nodes group
	// sockets: one level always contains the other.
	numaPerSocket, socketsPerNUMA := 1, 1
	if r.Intn(2) == 0 {
		numaPerSocket = 1 + r.Intn(2)
		coresPerSocket *= numaPerSocket
	} else {
		socketsPerNUMA = 1 + r.Intn(2)
		sockets = sockets * socketsPerNUMA
	}
	total := sockets * coresPerSocket * threads
	ids := r.Perm(total) // CPU IDs in random order, so ID ties matter
	cpus := map[int]topology.CPUInfo{}
	i := 0
	for s := 0; s < sockets; s++ {
		for c := 0; c < coresPerSocket; c++ {
			numa := s/socketsPerNUMA*numaPerSocket + c/(coresPerSocket/numaPerSocket)
			var threadIDs []int
			for th := 0; th < threads; th++ {
				threadIDs = append(threadIDs, ids[i])
				i++
			}
			for _, id := range threadIDs {
				cpus[id] = topology.CPUInfo{Socket: s, NUMANode: numa, Core: slices.Min(threadIDs)}
			}
		}
	}
	var avail []int
	p := r.Float64()
	for id := 0; id < total; id++ {
		if r.Float64() < p {
			avail = append(avail, id)
		}
	}
	return reflect.ValueOf(scenario{cpus: cpus, avail: avail, n: r.Intn(len(avail) + 2)})
}

func TestTakePackedAgreesWithNaive(t *testing.T) {
	check := func(s scenario) bool {
		topo, err := topology.NewCPUTopology(s.cpus)
		if err != nil {
			t.Log(err)
			return false
		}
		avail := cpuset.New(s.avail...)
		got, gotErr := takePacked(newLayout(topo), avail, s.n)
		want, wantErr := naivePacked(topo, avail, s.n)
		if (gotErr != nil) != (wantErr != nil) || !got.Equals(want) {
			t.Logf("machine %v, free %s, n=%d: fast %s (%v), naive %s (%v)", topo, avail, s.n, got, gotErr, want, wantErr)
			return false
		}
		return gotErr != nil || (got.Size() == s.n && got.IsSubsetOf(avail))
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 3000, Rand: rand.New(rand.NewSource(1))}); err != nil {
		t.Fatal(err)
	}
}

func TestTakeDistributedProperties(t *testing.T) {
	check := func(s scenario, group uint8) bool {
		topo, err := topology.NewCPUTopology(s.cpus)
		if err != nil {
			return false
		}
		g := 1 + int(group)%2
		avail := cpuset.New(s.avail...)
		got, err := takeDistributed(newLayout(topo), avail, s.n, g)
		if err != nil {
			return s.n > avail.Size()
		}
		if got.Size() != max(s.n, 0) || !got.IsSubsetOf(avail) {
			t.Logf("machine %v, free %s, n=%d group %d: took %s", topo, avail, s.n, g, got)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 2000, Rand: rand.New(rand.NewSource(2))}); err != nil {
		t.Fatal(err)
	}
}
