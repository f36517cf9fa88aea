package memorymanager

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/topology"
)

// static is the Static policy: a Guaranteed container's memory and huge
// pages come out of the NUMA nodes of one affinity, single-node when they
// fit, never mixing single- and cross-node allocations on a node.
type static struct {
	machine *topology.Machine
	// reserved is the reserved memory per NUMA node and resource.
	reserved map[int]map[v1.ResourceName]uint64
	// reuse holds, for the pod being admitted, what its regular init
	// containers got, by affinity and resource: later containers reuse it.
	reuse map[string]map[topology.NUMAMask]map[v1.ResourceName]uint64
}

// hugePagesName is the resource name of a page size ("hugepages-2Mi").
func hugePagesName(pageSize uint64) v1.ResourceName {
	q := resource.NewQuantity(int64(pageSize), resource.BinarySI)
	return v1.ResourceName(v1.ResourceHugePagesPrefix + q.String())
}

func isMemoryResource(name v1.ResourceName) bool {
	return name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// defaultMachine is the accounting of an empty machine: per node, each
// huge page size and the memory not in huge pages, minus the reservation.
func (p *static) defaultMachine() (numaNodeMap, error) {
	out := numaNodeMap{}
	for _, n := range p.machine.NUMANodes {
		ns := &numaNodeState{MemoryMap: map[v1.ResourceName]*memoryTable{}, Cells: []int{n.ID}}
		var inHugePages uint64
		for _, hp := range n.HugePages {
			name := hugePagesName(hp.PageSizeBytes)
			total := hp.Count * hp.PageSizeBytes
			res := p.reserved[n.ID][name]
			if res > total {
				return nil, fmt.Errorf("[memorymanager] NUMA node %d: reserved %s (%d) exceeds its %d bytes", n.ID, name, res, total)
			}
			ns.MemoryMap[name] = &memoryTable{TotalMemSize: total, SystemReserved: res, Allocatable: total - res, Free: total - res}
			inHugePages += total
		}
		res := p.reserved[n.ID][v1.ResourceMemory]
		if res+inHugePages > n.MemoryBytes {
			return nil, fmt.Errorf("[memorymanager] NUMA node %d: reserved memory (%d) and huge pages (%d) exceed its %d bytes", n.ID, res, inHugePages, n.MemoryBytes)
		}
		alloc := n.MemoryBytes - res - inHugePages
		ns.MemoryMap[v1.ResourceMemory] = &memoryTable{TotalMemSize: n.MemoryBytes, SystemReserved: res, Allocatable: alloc, Free: alloc}
		out[n.ID] = ns
	}
	return out, nil
}

// validate checks a restored state against the machine and reservation; an
// empty state is initialised.
func (p *static) validate(st *state) error {
	def, err := p.defaultMachine()
	if err != nil {
		return err
	}
	if len(st.machine) == 0 {
		if len(st.assignments) != 0 {
			return fmt.Errorf("[memorymanager] machine state can not be empty when it has memory assignments")
		}
		st.machine = def
		return nil
	}
	for pod, containers := range st.assignments {
		for name, blocks := range containers {
			for _, b := range blocks {
				for _, node := range b.NUMAAffinity {
					ns, ok := def[node]
					if !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses the NUMA that does not exist", pod, name)
					}
					if _, ok := ns.MemoryMap[b.Type]; !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses memory resource that does not exist", pod, name)
					}
				}
				reserve(def, b.NUMAAffinity, b.Type, b.Size)
			}
		}
	}
	if diff := machineDiff(st.machine, def); diff != "" {
		return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: %s", diff)
	}
	return nil
}

// machineDiff describes the first difference between the restored and the
// expected accounting, or "". Free and reserved are compared per group of
// nodes allocated together, as upstream.
func machineDiff(got, want numaNodeMap) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d NUMA nodes, expected %d", len(got), len(want))
	}
	for id, g := range got {
		w, ok := want[id]
		switch {
		case !ok:
			return fmt.Sprintf("unexpected NUMA node %d", id)
		case g.NumberOfAssignments != w.NumberOfAssignments:
			return fmt.Sprintf("NUMA node %d has %d assignments, expected %d", id, g.NumberOfAssignments, w.NumberOfAssignments)
		case !sameGroup(g.Cells, w.Cells):
			return fmt.Sprintf("NUMA node %d is grouped with %v, expected %v", id, g.Cells, w.Cells)
		case len(g.MemoryMap) != len(w.MemoryMap):
			return fmt.Sprintf("NUMA node %d has %d memory types, expected %d", id, len(g.MemoryMap), len(w.MemoryMap))
		}
		for name, gt := range g.MemoryMap {
			wt, ok := w.MemoryMap[name]
			if !ok {
				return fmt.Sprintf("NUMA node %d has unexpected %s", id, name)
			}
			if gt.TotalMemSize != wt.TotalMemSize || gt.SystemReserved != wt.SystemReserved || gt.Allocatable != wt.Allocatable {
				return fmt.Sprintf("NUMA node %d %s: total/reserved/allocatable %d/%d/%d, expected %d/%d/%d",
					id, name, gt.TotalMemSize, gt.SystemReserved, gt.Allocatable, wt.TotalMemSize, wt.SystemReserved, wt.Allocatable)
			}
			var gFree, gRes, wFree, wRes uint64
			for _, c := range g.Cells {
				gFree += got.table(c, name).Free
				gRes += got.table(c, name).Reserved
				wFree += want.table(c, name).Free
				wRes += want.table(c, name).Reserved
			}
			if gFree != wFree || gRes != wRes {
				return fmt.Sprintf("NUMA node %d %s: free/reserved %d/%d, expected %d/%d from the assignments", id, name, gFree, gRes, wFree, wRes)
			}
		}
	}
	return ""
}

func sameGroup(a, b []int) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// reserve accounts size bytes of a resource on nodes, filling them in
// order, and groups the nodes.
func reserve(m numaNodeMap, nodes []int, name v1.ResourceName, size uint64) {
	for _, id := range nodes {
		n := m[id]
		if n == nil {
			continue
		}
		n.NumberOfAssignments++
		n.Cells = slices.Clone(nodes)
		if size == 0 {
			continue
		}
		t := m.table(id, name)
		take := min(t.Free, size)
		t.Free -= take
		t.Reserved += take
		size -= take
	}
}

// release undoes reserve for a container's blocks.
func release(m numaNodeMap, blocks []Block) {
	for _, b := range blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			n := m[id]
			if n == nil {
				continue
			}
			n.NumberOfAssignments--
			if n.NumberOfAssignments == 0 {
				n.Cells = []int{id}
			}
			if size == 0 {
				continue
			}
			t := m.table(id, b.Type)
			give := min(t.Reserved, size)
			t.Reserved -= give
			t.Free += give
			size -= give
		}
	}
}

// containerRequests are c's memory and huge page requests in bytes.
func containerRequests(c *v1.Container) (map[v1.ResourceName]uint64, error) {
	out := map[v1.ResourceName]uint64{}
	for name, q := range c.Resources.Requests {
		if !isMemoryResource(name) {
			continue
		}
		v, ok := q.AsInt64()
		if !ok || v < 0 {
			return nil, fmt.Errorf("[memorymanager] failed to represent quantity as int64")
		}
		out[name] = uint64(v)
	}
	return out, nil
}

// podRequests is the pod's need per resource: the larger of the
// long-running containers' sum and the biggest init container with the
// sidecars started before it.
func podRequests(pod *v1.Pod) (map[v1.ResourceName]uint64, error) {
	initMax, sidecars := map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		req, err := containerRequests(c)
		if err != nil {
			return nil, err
		}
		for name, v := range req {
			if podutil.IsSidecar(c) {
				sidecars[name] += v
			} else if sidecars[name]+v > initMax[name] {
				initMax[name] = sidecars[name] + v
			}
		}
	}
	apps := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.Containers {
		req, err := containerRequests(&pod.Spec.Containers[i])
		if err != nil {
			return nil, err
		}
		for name, v := range req {
			apps[name] += v
		}
	}
	out := map[v1.ResourceName]uint64{}
	for name, v := range apps {
		out[name] = max(v+sidecars[name], initMax[name])
	}
	return out, nil
}

func sortedNames(req map[v1.ResourceName]uint64) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(req))
	for name := range req {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (p *static) reusable(pod string, mask topology.NUMAMask, name v1.ResourceName) uint64 {
	return p.reuse[pod][mask][name]
}

// hints lists, per requested resource, the NUMA node sets whose allocatable
// memory could hold the request and whose free memory (plus what the pod's
// init containers leave to reuse) still can, without mixing single- and
// cross-node allocations; the narrowest that could on an empty machine are
// preferred.
func (p *static) hints(m numaNodeMap, pod string, req map[v1.ResourceName]uint64) map[string][]topology.Hint {
	nodes := make([]int, 0, len(m))
	for id := range m {
		nodes = append(nodes, id)
	}
	slices.Sort(nodes)
	minWidth := len(nodes)
	out := map[string][]topology.Hint{}
	for k := 1; k <= len(nodes); k++ {
		combinations(nodes, k, func(ids []int) {
			mask, err := topology.NewNUMAMask(ids...)
			if err != nil {
				return
			}
			for name, want := range req {
				var alloc uint64
				for _, id := range ids {
					alloc += m.table(id, name).Allocatable
				}
				if alloc < want {
					return
				}
			}
			minWidth = min(minWidth, len(ids))
			if len(ids) == 1 && len(m[ids[0]].Cells) > 1 {
				return // the node holds cross-node allocations
			}
			if len(ids) > 1 {
				for _, id := range ids {
					if n := m[id]; n.NumberOfAssignments > 0 && (len(n.Cells) == 1 || !sameGroup(n.Cells, ids)) {
						return
					}
				}
			}
			for name, want := range req {
				var free uint64
				for _, id := range ids {
					free += m.table(id, name).Free
				}
				if free+p.reusable(pod, mask, name) < want {
					return
				}
			}
			for name := range req {
				out[string(name)] = append(out[string(name)], topology.Hint{NUMANodes: mask})
			}
		})
	}
	for name := range out {
		for i := range out[name] {
			out[name][i].Preferred = out[name][i].NUMANodes.Count() == minWidth
		}
	}
	return out
}

// best picks the preferred, then narrowest hint.
func best(hints []topology.Hint) topology.Hint {
	var b topology.Hint
	for _, h := range hints {
		switch {
		case b.NUMANodes == 0:
			b = h
		case h.Preferred && !b.Preferred:
			b = h
		case h.Preferred == b.Preferred && h.NUMANodes.NarrowerThan(b.NUMANodes):
			b = h
		}
	}
	return b
}

func fits(m numaNodeMap, mask topology.NUMAMask, req map[v1.ResourceName]uint64) bool {
	for name, want := range req {
		var free uint64
		for _, id := range mask.IDs() {
			free += m.table(id, name).Free
		}
		if free < want {
			return false
		}
	}
	return true
}

// mixes reports whether allocating on mask would put a single-node and a
// cross-node allocation on one node, or join node groups.
func mixes(m numaNodeMap, mask topology.NUMAMask) bool {
	ids := mask.IDs()
	if len(ids) == 1 {
		return false
	}
	for _, id := range ids {
		n := m[id]
		if n == nil {
			return true
		}
		if n.NumberOfAssignments > 0 && (len(n.Cells) == 1 || !sameGroup(n.Cells, ids)) {
			return true
		}
	}
	return false
}

// placement picks the NUMA nodes for a container's request: the topology
// manager's affinity, else the best hint, widened to the narrowest set
// that holds the request.
func (p *static) placement(m numaNodeMap, pod string, req map[v1.ResourceName]uint64, affinity topology.Hint) (topology.Hint, error) {
	h := affinity
	if h.NUMANodes == 0 {
		all := p.hints(m, pod, req)
		if len(all) == 0 {
			return h, fmt.Errorf("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
		}
		def := best(all[string(v1.ResourceMemory)])
		if !def.Preferred && affinity.Preferred {
			return h, fmt.Errorf("[memorymanager] failed to find the default preferred hint")
		}
		h = def
	}
	if !fits(m, h.NUMANodes, req) {
		var within []topology.Hint
		for _, c := range p.hints(m, pod, req)[string(v1.ResourceMemory)] {
			if c.NUMANodes&h.NUMANodes == h.NUMANodes {
				within = append(within, c)
			}
		}
		if len(within) == 0 {
			return h, fmt.Errorf("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
		}
		ext := best(within)
		if !ext.Preferred && h.Preferred {
			return h, fmt.Errorf("[memorymanager] failed to find the extended preferred hint")
		}
		h = ext
	}
	if mixes(m, h.NUMANodes) {
		return h, fmt.Errorf("[memorymanager] preferred hint violates NUMA node allocation")
	}
	return h, nil
}

// regenerate gives the hints of a container that already has blocks: the
// blocks' own affinities, or nil when they do not match the request.
func regenerate(blocks []Block, req map[v1.ResourceName]uint64) map[string][]topology.Hint {
	if len(blocks) != len(req) {
		return nil
	}
	out := map[string][]topology.Hint{}
	for name := range req {
		out[string(name)] = []topology.Hint{}
	}
	for _, b := range blocks {
		want, ok := req[b.Type]
		if !ok || b.Size != want {
			return nil
		}
		mask, err := topology.NewNUMAMask(b.NUMAAffinity...)
		if err != nil {
			return nil
		}
		out[string(b.Type)] = append(out[string(b.Type)], topology.Hint{NUMANodes: mask, Preferred: true})
	}
	return out
}

// noteReuse remembers a regular init container's blocks for reuse by the
// pod's later containers, or deducts what a later container reused. Only
// the pod being admitted is remembered.
func (p *static) noteReuse(pod *v1.Pod, c *v1.Container, blocks []Block) {
	uid := string(pod.UID)
	for other := range p.reuse {
		if other != uid {
			delete(p.reuse, other)
		}
	}
	if isRegularInit(pod, c) {
		if p.reuse[uid] == nil {
			p.reuse[uid] = map[topology.NUMAMask]map[v1.ResourceName]uint64{}
		}
		for _, b := range blocks {
			mask, _ := topology.NewNUMAMask(b.NUMAAffinity...)
			if p.reuse[uid][mask] == nil {
				p.reuse[uid][mask] = map[v1.ResourceName]uint64{}
			}
			p.reuse[uid][mask][b.Type] = max(p.reuse[uid][mask][b.Type], b.Size)
		}
		return
	}
	for _, b := range blocks {
		mask, _ := topology.NewNUMAMask(b.NUMAAffinity...)
		if r := p.reusable(uid, mask, b.Type); r != 0 {
			p.reuse[uid][mask][b.Type] = r - min(r, b.Size)
		}
	}
}

// shrinkInitBlocks deducts what container c reused from the blocks of the
// regular init containers before it, so the pod's blocks add up to what it
// holds.
func shrinkInitBlocks(st state, pod *v1.Pod, c *v1.Container, blocks []Block) {
	uid := string(pod.UID)
	for _, cb := range blocks {
		size := cb.Size
		for i := range pod.Spec.InitContainers {
			ic := &pod.Spec.InitContainers[i]
			if ic.Name == c.Name || size == 0 {
				break
			}
			if podutil.IsSidecar(ic) {
				continue
			}
			initBlocks := st.blocks(uid, ic.Name)
			if len(initBlocks) == 0 {
				continue
			}
			initBlocks = cloneBlocks(initBlocks)
			for j := range initBlocks {
				ib := &initBlocks[j]
				if ib.Size == 0 || ib.Type != cb.Type || !slices.Equal(slices.Sorted(slices.Values(ib.NUMAAffinity)), slices.Sorted(slices.Values(cb.NUMAAffinity))) {
					continue
				}
				d := min(ib.Size, size)
				ib.Size -= d
				size -= d
			}
			st.setBlocks(uid, ic.Name, initBlocks)
		}
	}
}

func isRegularInit(pod *v1.Pod, c *v1.Container) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return !podutil.IsSidecar(&pod.Spec.InitContainers[i])
		}
	}
	return false
}

// combinations calls f with every k-element subset of ids in lexicographic
// order; the slice is reused between calls.
func combinations(ids []int, k int, f func([]int)) {
	buf := make([]int, k)
	var walk func(start, depth int)
	walk = func(start, depth int) {
		if depth == k {
			f(buf)
			return
		}
		for i := start; i <= len(ids)-(k-depth); i++ {
			buf[depth] = ids[i]
			walk(i+1, depth+1)
		}
	}
	walk(0, 0)
}
