package cpumanager

import (
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/topology"
)

// ReasonSMTAlignment is the rejection reason of full-pcpus-only, as upstream.
const ReasonSMTAlignment = "SMTAlignmentError"

// SMTAlignmentError rejects a request the full-pcpus-only option cannot
// serve with whole physical cores. Its text is upstream's.
type SMTAlignmentError struct {
	RequestedCPUs         int
	CpusPerCore           int
	AvailablePhysicalCPUs int
	CausedByPhysicalCPUs  bool
}

func (e SMTAlignmentError) Error() string {
	if e.CausedByPhysicalCPUs {
		return fmt.Sprintf("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d", e.AvailablePhysicalCPUs, e.RequestedCPUs, e.CpusPerCore)
	}
	return fmt.Sprintf("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d", e.RequestedCPUs, e.CpusPerCore)
}

// Reason is the pod's status reason when admission fails with e.
func (e SMTAlignmentError) Reason() string { return ReasonSMTAlignment }

// static is the static policy: Guaranteed containers with integer CPU
// requests get CPUs of their own, taken from the shared pool minus the
// reserved CPUs; everyone else shares the pool.
type static struct {
	topo   *topology.CPUTopology
	layout *layout
	opts   staticOptions
	// reserved are never handed out exclusively; reservedCores adds their
	// core siblings (for full-pcpus-only accounting).
	reserved      cpuset.CPUSet
	reservedCores cpuset.CPUSet
	groupSize     int
}

func newStatic(topo *topology.CPUTopology, opts staticOptions, reservedList cpuset.CPUSet, reservedCPU resource.Quantity) (*static, error) {
	if topo == nil {
		return nil, fmt.Errorf("cpumanager: the static policy needs Config.Topology")
	}
	p := &static{topo: topo, layout: newLayout(topo), opts: opts, groupSize: topo.CPUsPerCore()}
	count := int(math.Ceil(float64(reservedCPU.MilliValue()) / 1000))
	switch {
	case !reservedList.IsEmpty():
		if !reservedList.IsSubsetOf(topo.CPUs()) {
			return nil, fmt.Errorf("cpumanager: reserved CPUs %q are not all on this machine (%q)", reservedList, topo.CPUs())
		}
		if !reservedCPU.IsZero() && count != reservedList.Size() {
			return nil, fmt.Errorf("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reservedList, count)
		}
		p.reserved = reservedList
	case count == 0:
		return nil, fmt.Errorf("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
	default:
		// Reserve topology-first from the lowest-numbered cores, as upstream.
		reserved, err := p.take(topo.CPUs(), count)
		if err != nil || reserved.Size() != count {
			return nil, fmt.Errorf("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reserved, count)
		}
		p.reserved = reserved
	}
	for _, cpu := range p.reserved.UnsortedList() {
		core, _ := topo.CoreOf(cpu)
		p.reservedCores = p.reservedCores.Union(topo.CPUsInCores(core))
	}
	return p, nil
}

// take picks n CPUs from avail the way the options ask.
func (p *static) take(avail cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	if p.opts.distributeAcrossNUMA {
		group := 1
		if p.opts.fullPCPUsOnly {
			group = p.groupSize
		}
		return takeDistributed(p.layout, avail, n, group)
	}
	return takePacked(p.layout, avail, n)
}

// initialDefault is the shared pool of a fresh state.
func (p *static) initialDefault() cpuset.CPUSet {
	if p.opts.strictReservation {
		return p.topo.CPUs().Difference(p.reserved)
	}
	return p.topo.CPUs()
}

// validate checks a restored state against this machine and configuration,
// with upstream's messages; an empty state is initialised.
func (p *static) validate(st *state) error {
	all := p.initialDefault()
	if st.defaultSet.IsEmpty() {
		if len(st.assignments) == 0 {
			st.defaultSet = all
			return nil
		}
		// With strict-cpu-reservation exclusive CPUs may take the whole
		// pool; otherwise the reserved CPUs are always in it.
		if !p.opts.strictReservation {
			return fmt.Errorf("default cpuset cannot be empty")
		}
	}
	if p.opts.strictReservation {
		if in := p.reserved.Intersection(st.defaultSet); !in.IsEmpty() {
			return fmt.Errorf("some of strictly reserved cpus: %q are present in defaultCpuSet: %q", in.String(), st.defaultSet.String())
		}
	} else if !p.reserved.IsSubsetOf(st.defaultSet) {
		return fmt.Errorf("not all reserved cpus: %q are present in defaultCpuSet: %q", p.reserved.String(), st.defaultSet.String())
	}
	known := st.defaultSet
	owner := map[int]string{}
	for pod, containers := range st.assignments {
		for name, cpus := range containers {
			if !st.defaultSet.Intersection(cpus).IsEmpty() {
				return fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", pod, name, cpus.String(), st.defaultSet.String())
			}
			// Containers of one pod may share (app containers reuse init
			// containers' CPUs); different pods never do.
			for _, cpu := range cpus.UnsortedList() {
				if other, ok := owner[cpu]; ok && other != pod {
					return fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with CPUs of pod %s", pod, name, cpus.String(), other)
				}
				owner[cpu] = pod
			}
			known = known.Union(cpus)
		}
	}
	if !known.Equals(all) {
		return fmt.Errorf("current set of available CPUs %q doesn't match with CPUs in state %q", all.String(), known.String())
	}
	return nil
}

// available is what can still be handed out exclusively.
func (p *static) available(st *state) cpuset.CPUSet { return st.defaultSet.Difference(p.reserved) }

// guaranteedCPUs is how many exclusive CPUs container c of pod gets: its
// CPU request when the pod is Guaranteed and the request is a whole number,
// else 0.
func guaranteedCPUs(pod *v1.Pod, c *v1.Container) int {
	if !guaranteed(pod) {
		return 0
	}
	q := c.Resources.Requests[v1.ResourceCPU]
	if q.Value()*1000 != q.MilliValue() {
		return 0
	}
	return int(q.Value())
}

// podGuaranteedCPUs is the pod's exclusive CPU need: the larger of the
// long-running containers' sum (app containers plus sidecars) and the
// biggest init container with the sidecars started before it.
func podGuaranteedCPUs(pod *v1.Pod) int {
	initMax, sidecars := 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if _, ok := c.Resources.Requests[v1.ResourceCPU]; !ok {
			continue
		}
		n := guaranteedCPUs(pod, c)
		if podutil.IsSidecar(c) {
			sidecars += n
		} else if sidecars+n > initMax {
			initMax = sidecars + n
		}
	}
	apps := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if _, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
			apps += guaranteedCPUs(pod, c)
		}
	}
	return max(initMax, apps+sidecars)
}

// podLevel reports pods with pod-level resources, which upstream v1.37
// (PodLevelResourceManagers off by default) leaves in the shared pool.
func podLevel(pod *v1.Pod) bool { return resourcehelper.IsPodLevelResourcesSet(pod) }

func (p *static) checkSMT(st *state, n int) error {
	if !p.opts.fullPCPUsOnly {
		return nil
	}
	if n%p.groupSize != 0 {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: p.groupSize}
	}
	if free := st.defaultSet.Difference(p.reservedCores).Size(); n > free {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: p.groupSize, AvailablePhysicalCPUs: free, CausedByPhysicalCPUs: true}
	}
	return nil
}

// allocate takes n CPUs from the available ones plus reusable, first from
// the NUMA nodes of affinity (when set), and removes them from the pool.
//
// Under full-pcpus-only the siblings of reserved CPUs are left out too:
// upstream only counts them out (checkSMT) and can hand out half a core
// when reserved CPUs split cores and distribute-cpus-across-numa spreads
// the request; nodekit never does.
func (p *static) allocate(st *state, n int, affinity topology.NUMAMask, reusable cpuset.CPUSet) (cpuset.CPUSet, error) {
	allocatable := p.available(st)
	if p.opts.fullPCPUsOnly {
		allocatable = allocatable.Difference(p.reservedCores)
	}
	allocatable = allocatable.Union(reusable)
	result := cpuset.New()
	if affinity != 0 {
		aligned := allocatable.Intersection(p.topo.CPUsInNUMANodes(affinity.IDs()...))
		cpus, err := p.take(aligned, min(n, aligned.Size()))
		if err != nil {
			return cpuset.New(), err
		}
		result = cpus
	}
	rest, err := p.take(allocatable.Difference(result), n-result.Size())
	if err != nil {
		return cpuset.New(), err
	}
	result = result.Union(rest)
	st.defaultSet = st.defaultSet.Difference(result)
	return result, nil
}

// release returns container's CPUs to the pool, except those a sibling in
// the same pod still holds.
func (p *static) release(st *state, pod, container string) bool {
	cpus, ok := st.get(pod, container)
	if !ok {
		return false
	}
	st.remove(pod, container)
	for _, other := range st.assignments[pod] {
		cpus = cpus.Difference(other)
	}
	st.defaultSet = st.defaultSet.Union(cpus)
	return true
}

// hints lists the NUMA node sets that could hold request CPUs out of
// available (plus reusable, which must all be inside the set), preferring
// the narrowest sets that could hold the request on an empty machine.
func (p *static) hints(available, reusable cpuset.CPUSet, request int) []topology.Hint {
	nodes := p.topo.NUMANodes().List()
	minWidth := len(nodes)
	hints := []topology.Hint{}
	forEachMask(nodes, func(ids []int) {
		in := p.topo.CPUsInNUMANodes(ids...)
		if in.Size() >= request && len(ids) < minWidth {
			minWidth = len(ids)
		}
		if !reusable.IsSubsetOf(in) {
			return
		}
		if reusable.Size()+available.Intersection(in).Size() < request {
			return
		}
		mask, _ := topology.NewNUMAMask(ids...)
		hints = append(hints, topology.Hint{NUMANodes: mask})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodes.Count() == minWidth
	}
	return hints
}

// forEachMask calls f with every non-empty subset of ids: all of size 1,
// then size 2, ..., each size in lexicographic order, as upstream.
func forEachMask(ids []int, f func([]int)) {
	for k := 1; k <= len(ids); k++ {
		combinations(ids, k, func(c []int) bool { f(c); return true })
	}
}
