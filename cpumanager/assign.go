package cpumanager

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/topology"
)

// layout is a CPU topology in the shape the allocator walks: sizes and
// members of every core, socket and NUMA node, and which cores sit where.
// Built once per manager; read-only.
type layout struct {
	topo *topology.CPUTopology
	// numaFirst: NUMA nodes are at least as big as sockets (a node holds
	// one or more sockets), so whole NUMA nodes are taken before whole
	// sockets and the sort orders nest sockets inside nodes. Otherwise
	// sockets come first and hold NUMA nodes.
	numaFirst bool

	cpuInfo    map[int]topology.CPUInfo
	coreCPUs   map[int][]int // ascending
	socketSize map[int]int
	numaSize   map[int]int
	// pairs are the (socket, NUMA node) combinations that hold cores, with
	// those cores.
	pairCores     map[pair][]int
	socketNUMAs   map[int][]int
	numaSockets   map[int][]int
	socketIDs     []int
	numaIDs       []int
	cpusPerCore   int // NumCPUs / NumCores, the full-pcpus-only group size
	numCPUs       int
	numaNodeCount int
}

type pair struct{ socket, numa int }

func newLayout(topo *topology.CPUTopology) *layout {
	l := &layout{
		topo:        topo,
		numaFirst:   topo.NumSockets() >= topo.NumNUMANodes(),
		cpuInfo:     map[int]topology.CPUInfo{},
		coreCPUs:    map[int][]int{},
		socketSize:  map[int]int{},
		numaSize:    map[int]int{},
		pairCores:   map[pair][]int{},
		socketNUMAs: map[int][]int{},
		numaSockets: map[int][]int{},
		cpusPerCore: topo.CPUsPerCore(),
		numCPUs:     topo.NumCPUs(),
	}
	for _, cpu := range topo.CPUs().List() {
		ci, _ := topo.Info(cpu)
		l.cpuInfo[cpu] = ci
		if len(l.coreCPUs[ci.Core]) == 0 {
			p := pair{ci.Socket, ci.NUMANode}
			if len(l.pairCores[p]) == 0 {
				l.socketNUMAs[ci.Socket] = append(l.socketNUMAs[ci.Socket], ci.NUMANode)
				l.numaSockets[ci.NUMANode] = append(l.numaSockets[ci.NUMANode], ci.Socket)
			}
			l.pairCores[p] = append(l.pairCores[p], ci.Core)
		}
		l.coreCPUs[ci.Core] = append(l.coreCPUs[ci.Core], cpu)
		l.socketSize[ci.Socket]++
		l.numaSize[ci.NUMANode]++
	}
	l.socketIDs = topo.Sockets().List()
	l.numaIDs = topo.NUMANodes().List()
	l.numaNodeCount = len(l.numaIDs)
	return l
}

// accumulator gathers CPUs for one request, keeping free counts per core,
// socket, NUMA node and (socket, NUMA node) pair up to date as it takes.
type accumulator struct {
	l          *layout
	free       map[int]bool
	freeCore   map[int]int
	freeSocket map[int]int
	freeNUMA   map[int]int
	freePair   map[pair]int
	need       int
	result     []int
}

func newAccumulator(l *layout, avail cpuset.CPUSet, n int) *accumulator {
	a := &accumulator{
		l: l, free: map[int]bool{}, need: n,
		freeCore: map[int]int{}, freeSocket: map[int]int{}, freeNUMA: map[int]int{}, freePair: map[pair]int{},
	}
	for _, cpu := range avail.UnsortedList() {
		ci, ok := l.cpuInfo[cpu]
		if !ok {
			continue // not on this machine: never handed out
		}
		a.free[cpu] = true
		a.freeCore[ci.Core]++
		a.freeSocket[ci.Socket]++
		a.freeNUMA[ci.NUMANode]++
		a.freePair[pair{ci.Socket, ci.NUMANode}]++
	}
	return a
}

func (a *accumulator) take(cpus ...int) {
	for _, cpu := range cpus {
		if !a.free[cpu] {
			continue
		}
		ci := a.l.cpuInfo[cpu]
		delete(a.free, cpu)
		a.freeCore[ci.Core]--
		a.freeSocket[ci.Socket]--
		a.freeNUMA[ci.NUMANode]--
		a.freePair[pair{ci.Socket, ci.NUMANode}]--
		a.result = append(a.result, cpu)
		a.need--
	}
}

func (a *accumulator) satisfied() bool { return a.need < 1 }
func (a *accumulator) failed() bool    { return a.need > len(a.free) }

// byFree sorts ids by ascending free count, then by ID: the allocator
// fills the most used places first, keeping free ones whole.
func byFree(ids []int, free map[int]int) {
	slices.SortFunc(ids, func(x, y int) int {
		if c := cmp.Compare(free[x], free[y]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
}

// appendNew appends the ids not yet seen.
func appendNew(out []int, seen map[int]bool, ids []int) []int {
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// sortedSockets lists the sockets with free CPUs in allocation order.
func (a *accumulator) sortedSockets() []int {
	if !a.l.numaFirst {
		var ids []int
		for _, s := range a.l.socketIDs {
			if a.freeSocket[s] > 0 {
				ids = append(ids, s)
			}
		}
		byFree(ids, a.freeSocket)
		return ids
	}
	var out []int
	seen := map[int]bool{}
	for _, n := range a.sortedNUMAs() {
		var ids []int
		for _, s := range a.l.numaSockets[n] {
			if a.freePair[pair{s, n}] > 0 {
				ids = append(ids, s)
			}
		}
		byFree(ids, a.freeSocket)
		out = appendNew(out, seen, ids)
	}
	return out
}

// sortedNUMAs lists the NUMA nodes with free CPUs in allocation order.
func (a *accumulator) sortedNUMAs() []int {
	if a.l.numaFirst {
		var ids []int
		for _, n := range a.l.numaIDs {
			if a.freeNUMA[n] > 0 {
				ids = append(ids, n)
			}
		}
		byFree(ids, a.freeNUMA)
		return ids
	}
	var out []int
	seen := map[int]bool{}
	for _, s := range a.sortedSockets() {
		var ids []int
		for _, n := range a.l.socketNUMAs[s] {
			if a.freePair[pair{s, n}] > 0 {
				ids = append(ids, n)
			}
		}
		byFree(ids, a.freeNUMA)
		out = appendNew(out, seen, ids)
	}
	return out
}

// sortedCores lists the cores with free CPUs in allocation order: inside
// the lower of socket and NUMA node, ordered as sortedSockets or
// sortedNUMAs orders those.
func (a *accumulator) sortedCores() []int {
	var out []int
	seen := map[int]bool{}
	collect := func(p pair) []int {
		var ids []int
		for _, c := range a.l.pairCores[p] {
			if a.freeCore[c] > 0 {
				ids = append(ids, c)
			}
		}
		return ids
	}
	if a.l.numaFirst {
		for _, s := range a.sortedSockets() {
			var ids []int
			for _, n := range a.l.socketNUMAs[s] {
				ids = append(ids, collect(pair{s, n})...)
			}
			byFree(ids, a.freeCore)
			out = appendNew(out, seen, ids)
		}
		return out
	}
	for _, n := range a.sortedNUMAs() {
		var ids []int
		for _, s := range a.l.numaSockets[n] {
			ids = append(ids, collect(pair{s, n})...)
		}
		byFree(ids, a.freeCore)
		out = appendNew(out, seen, ids)
	}
	return out
}

// sortedCPUs lists the free CPUs core by core in sortedCores order,
// ascending within a core.
func (a *accumulator) sortedCPUs() []int {
	var out []int
	for _, c := range a.sortedCores() {
		for _, cpu := range a.l.coreCPUs[c] {
			if a.free[cpu] {
				out = append(out, cpu)
			}
		}
	}
	return out
}

func (a *accumulator) takeWholeNUMAs() {
	for _, n := range a.sortedNUMAs() {
		if size := a.l.numaSize[n]; a.freeNUMA[n] == size && a.need >= size {
			a.take(a.l.topo.CPUsInNUMANodes(n).List()...)
		}
	}
}

func (a *accumulator) takeWholeSockets() {
	for _, s := range a.sortedSockets() {
		if size := a.l.socketSize[s]; a.freeSocket[s] == size && a.need >= size {
			a.take(a.l.topo.CPUsInSockets(s).List()...)
		}
	}
}

func (a *accumulator) takeWholeCores() {
	for _, c := range a.sortedCores() {
		if cpus := a.l.coreCPUs[c]; a.freeCore[c] == len(cpus) && a.need >= len(cpus) {
			a.take(cpus...)
		}
	}
}

func (a *accumulator) takeThreads() {
	for _, cpu := range a.sortedCPUs() {
		if a.satisfied() {
			return
		}
		a.take(cpu)
	}
}

func errNotEnough(n int, avail cpuset.CPUSet) error {
	return fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, avail.Size())
}

// takePacked picks n CPUs from avail, packed as upstream's
// takeByTopologyNUMAPacked: whole NUMA nodes and whole sockets (the higher
// of the two first) while n is at least that big, then whole cores, then
// single threads; every level fills the places with the fewest free CPUs
// first (ties by lowest ID), so partly used cores and nodes are filled up
// before whole ones are broken.
func takePacked(l *layout, avail cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	a := newAccumulator(l, avail, n)
	if a.satisfied() {
		return cpuset.New(), nil
	}
	if a.failed() {
		return cpuset.New(), errNotEnough(n, avail)
	}
	steps := []func(){a.takeWholeNUMAs, a.takeWholeSockets, a.takeWholeCores, a.takeThreads}
	if !l.numaFirst {
		steps[0], steps[1] = steps[1], steps[0]
	}
	for _, step := range steps {
		step()
		if a.satisfied() {
			return cpuset.New(a.result...), nil
		}
	}
	return cpuset.New(), fmt.Errorf("failed to allocate cpus")
}

// takeDistributed picks n CPUs from avail as upstream's
// takeByTopologyNUMADistributed (distribute-cpus-across-numa): if one NUMA
// node cannot hold the request, it spreads it evenly, in groups of
// groupSize CPUs (a whole core with full-pcpus-only), over the fewest NUMA
// nodes that can, choosing the nodes and where the remainder goes so that
// the free CPUs left per node are as balanced as possible (lowest standard
// deviation). Each node's share is then taken with takePacked. When no
// even spread exists, or n is not a multiple of groupSize, it packs.
func takeDistributed(l *layout, avail cpuset.CPUSet, n, groupSize int) (cpuset.CPUSet, error) {
	if groupSize < 1 || n%groupSize != 0 {
		return takePacked(l, avail, n)
	}
	a := newAccumulator(l, avail, n)
	if a.satisfied() {
		return cpuset.New(), nil
	}
	if a.failed() {
		return cpuset.New(), errNotEnough(n, avail)
	}
	numas := a.sortedNUMAs()
	minNodes, maxNodes := a.nodesNeeded(groupSize)
	for k := minNodes; k <= maxNodes; k++ {
		combo, remainderNodes, ok := a.bestSpread(numas, k, n, groupSize)
		if !ok {
			continue
		}
		share := (n / len(combo) / groupSize) * groupSize
		for _, numa := range combo {
			share = min(share, a.freeNUMA[numa]/groupSize*groupSize)
		}
		for _, numa := range combo {
			cpus, _ := takePacked(l, a.freeIn(numa), share)
			a.take(cpus.List()...)
		}
		remainder := n - share*len(combo)
		for progress := true; remainder > 0 && progress; {
			progress = false
			for _, numa := range remainderNodes {
				if remainder == 0 {
					break
				}
				if a.freeNUMA[numa] < groupSize {
					continue
				}
				cpus, _ := takePacked(l, a.freeIn(numa), groupSize)
				a.take(cpus.List()...)
				remainder -= groupSize
				progress = true
			}
		}
		if a.need != 0 {
			return cpuset.New(), fmt.Errorf("accounting error, not enough CPUs allocated, remaining: %v", a.need)
		}
		return cpuset.New(a.result...), nil
	}
	return takePacked(l, avail, n)
}

// freeIn returns the free CPUs of a NUMA node.
func (a *accumulator) freeIn(numa int) cpuset.CPUSet {
	var out []int
	for _, cpu := range a.l.topo.CPUsInNUMANodes(numa).UnsortedList() {
		if a.free[cpu] {
			out = append(out, cpu)
		}
	}
	return cpuset.New(out...)
}

// nodesNeeded bounds how many NUMA nodes a spread of a.need CPUs in groups
// of groupSize can use: at least what an evenly sized node could hold, at
// most one group per node or every node with free CPUs.
func (a *accumulator) nodesNeeded(groupSize int) (lo, hi int) {
	groups := (a.l.numCPUs-1)/groupSize + 1
	perNode := (groups-1)/a.l.numaNodeCount + 1
	needed := (a.need-1)/groupSize + 1
	nodesWithFree := 0
	for _, n := range a.l.numaIDs {
		if a.freeNUMA[n] > 0 {
			nodesWithFree++
		}
	}
	return (needed-1)/perNode + 1, min(needed, nodesWithFree)
}

// bestSpread finds, among the k-node combinations of numas, the one whose
// even spread of n CPUs (plus remainder) leaves the most balanced free
// counts, and the nodes that take the remainder.
func (a *accumulator) bestSpread(numas []int, k, n, groupSize int) (combo, remainderNodes []int, ok bool) {
	bestBalance := math.MaxFloat64
	combinations(numas, k, func(c []int) bool {
		if bestBalance == 0 {
			return false
		}
		total, groups := 0, 0
		for _, numa := range c {
			total += a.freeNUMA[numa]
			groups += a.freeNUMA[numa] / groupSize
		}
		if total < n || groups*groupSize < n {
			return true
		}
		share := (n / len(c) / groupSize) * groupSize
		for _, numa := range c {
			if a.freeNUMA[numa] < share {
				return true
			}
		}
		after := make(map[int]int, len(numas))
		for _, numa := range numas {
			after[numa] = a.freeNUMA[numa]
		}
		for _, numa := range c {
			after[numa] -= share
		}
		remainder := n - share*len(c)
		var candidates []int
		for _, numa := range c {
			if after[numa] >= groupSize {
				candidates = append(candidates, numa)
			}
		}
		localBest, localNodes := math.MaxFloat64, []int(nil)
		if remainder == 0 {
			localBest = balance(numas, after)
		}
		for size := len(candidates); remainder > 0 && size >= 1; size-- {
			combinations(candidates, size, func(subset []int) bool {
				left := maps.Clone(after)
				sum := 0
				for _, numa := range subset {
					sum += left[numa]
				}
				if sum < remainder {
					return true
				}
				rem := remainder
				for progress := true; rem > 0 && progress; {
					progress = false
					for _, numa := range subset {
						if rem == 0 {
							break
						}
						if left[numa] >= groupSize {
							left[numa] -= groupSize
							rem -= groupSize
							progress = true
						}
					}
				}
				if rem > 0 {
					return true // the subset cannot hold the remainder in whole groups
				}
				if b := balance(numas, left); b < localBest {
					localBest, localNodes = b, slices.Clone(subset)
				}
				return true
			})
		}
		if localBest < bestBalance {
			bestBalance, combo, remainderNodes = localBest, slices.Clone(c), localNodes
		}
		return true
	})
	return combo, remainderNodes, combo != nil
}

// combinations calls f with every k-element subset of ids, in lexicographic
// order of positions, until f returns false. The slice passed to f is
// reused between calls.
func combinations(ids []int, k int, f func([]int) bool) {
	if k < 1 || k > len(ids) {
		return
	}
	buf := make([]int, k)
	var walk func(start, depth int) bool
	walk = func(start, depth int) bool {
		if depth == k {
			return f(buf)
		}
		for i := start; i <= len(ids)-(k-depth); i++ {
			buf[depth] = ids[i]
			if !walk(i+1, depth+1) {
				return false
			}
		}
		return true
	}
	walk(0, 0)
}

// balance is the standard deviation of the free counts of numas, rounded to
// three decimals as upstream (so float noise does not decide ties).
func balance(numas []int, free map[int]int) float64 {
	var sum float64
	for _, n := range numas {
		sum += float64(free[n])
	}
	mean := math.Round(sum/float64(len(numas))*1000) / 1000
	var sq float64
	for _, n := range numas {
		d := float64(free[n]) - mean
		sq += d * d
	}
	return math.Round(math.Sqrt(sq/float64(len(numas)))*1000) / 1000
}
