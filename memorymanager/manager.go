package memorymanager

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/topology"
)

// Memory manager policies (KubeletConfiguration memoryManagerPolicy).
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// PodLister gives the pods that may still run on the node. syncloop.Loop
// satisfies it.
type PodLister interface {
	// ActivePods returns the admitted pods that are not terminal. It must
	// not block; the pods are read-only.
	ActivePods() []*v1.Pod
}

// PodListerFunc adapts a function to PodLister.
type PodListerFunc func() []*v1.Pod

// ActivePods implements PodLister.
func (f PodListerFunc) ActivePods() []*v1.Pod { return f() }

var _ PodLister = PodListerFunc(nil)

// Config configures a Manager. StateDir is always required; the Static
// policy also needs Machine, ReservedMemory and ActivePods.
type Config struct {
	// Policy is None (default) or Static (memoryManagerPolicy).
	Policy string
	// Machine gives each NUMA node's memory and huge pages
	// (topology.Discover).
	Machine *topology.Machine
	// ReservedMemory is the memory kept for the system per NUMA node
	// (reservedMemory). Static needs some of type memory.
	ReservedMemory []kubeletconfig.MemoryReservation
	// NodeReservation, when set, is the node's allocatable reservation
	// (system-reserved + kube-reserved + hard eviction threshold); as
	// upstream, ReservedMemory must add up to it for memory and every
	// huge page size.
	NodeReservation v1.ResourceList
	// StateDir holds the checkpoint, StateDir/memory_manager_state.
	StateDir string
	// ActivePods tells the manager which pods still exist; the memory of
	// containers of any other pod is released.
	ActivePods PodLister
	// SourcesReady reports whether every pod source has been seen; until
	// then nothing is released. Nil means always ready.
	SourcesReady func() bool
}

// Manager is the memory manager. Under the Static policy it gives each
// container of a Guaranteed pod its memory and huge pages from chosen NUMA
// nodes (as a nodekit.Admitter, or as a topology.HintProvider behind the
// topology manager), keeps the accounting in its checkpoint, and tells the
// runtime side which NUMA nodes a container's memory may come from
// (CPUSetMems). It does not enforce limits. Its methods are safe for
// concurrent use.
type Manager struct {
	policy       string
	static       *static
	path         string
	pods         PodLister
	sourcesReady func() bool

	mu     sync.Mutex
	st     state
	noSync bool
}

var (
	_ nodekit.Admitter      = (*Manager)(nil)
	_ topology.HintProvider = (*Manager)(nil)
)

// New checks cfg, restores the checkpoint and validates it against the
// machine and reservation. It refuses to start when the checkpoint was
// written by another policy, does not add up, or is corrupt, with an error
// saying to drain the node and delete the file. A missing checkpoint is
// created.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	m := &Manager{policy: cfg.Policy, pods: cfg.ActivePods, sourcesReady: cfg.SourcesReady}
	if m.policy == "" {
		m.policy = PolicyNone
	}
	if m.sourcesReady == nil {
		m.sourcesReady = func() bool { return true }
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("memorymanager: Config.StateDir is empty")
	}
	switch m.policy {
	case PolicyNone:
	case PolicyStatic:
		if cfg.ActivePods == nil {
			return nil, fmt.Errorf("memorymanager: the Static policy needs Config.ActivePods")
		}
		if cfg.Machine == nil || len(cfg.Machine.NUMANodes) == 0 {
			return nil, fmt.Errorf("memorymanager: the Static policy needs Config.Machine with its NUMA nodes")
		}
		reserved, err := reservation(cfg.Machine, cfg.ReservedMemory, cfg.NodeReservation)
		if err != nil {
			return nil, fmt.Errorf("memorymanager: %w", err)
		}
		m.static = &static{machine: cfg.Machine, reserved: reserved, reuse: map[string]map[topology.NUMAMask]map[v1.ResourceName]uint64{}}
	default:
		return nil, fmt.Errorf("memorymanager: unknown policy: %q", cfg.Policy)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("memorymanager: %w", err)
	}
	m.path = filepath.Join(cfg.StateDir, StateFileName)
	policy, st, found, err := readCheckpoint(m.path)
	if err == nil && found && policy != m.policy {
		err = fmt.Errorf("[memorymanager] configured policy %q differs from state checkpoint policy %q", m.policy, policy)
	}
	if err != nil {
		return nil, fmt.Errorf("memorymanager: could not restore state from checkpoint: %w, please drain this node and delete the memory manager checkpoint file %q before restarting Kubelet", err, m.path)
	}
	if m.static != nil {
		if err := m.static.validate(&st); err != nil {
			return nil, fmt.Errorf("memorymanager: invalid state in %s, please drain the node and remove the file: %w", m.path, err)
		}
	}
	m.st = st
	if err := m.persist(st); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Memory manager started", "policy", m.policy)
	return m, nil
}

// reservation turns ReservedMemory into bytes per node and resource,
// checking it as upstream: known NUMA nodes, some memory reserved, and the
// totals equal to the node's allocatable reservation when given.
func reservation(machine *topology.Machine, list []kubeletconfig.MemoryReservation, node v1.ResourceList) (map[int]map[v1.ResourceName]uint64, error) {
	out := map[int]map[v1.ResourceName]uint64{}
	for _, id := range machine.NUMANodeIDs() {
		out[id] = map[v1.ResourceName]uint64{}
	}
	totals := map[v1.ResourceName]*resource.Quantity{}
	for _, r := range list {
		if _, ok := out[int(r.NumaNode)]; !ok {
			return nil, fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NumaNode)
		}
		for name, q := range r.Limits {
			v, ok := q.AsInt64()
			if !ok || v < 0 {
				return nil, fmt.Errorf("reserved %s on NUMA node %d is not a byte count: %s", name, r.NumaNode, q.String())
			}
			out[int(r.NumaNode)][name] += uint64(v)
			if totals[name] == nil {
				totals[name] = resource.NewQuantity(0, resource.BinarySI)
			}
			totals[name].Add(q)
		}
	}
	if node != nil {
		names := map[v1.ResourceName]bool{}
		for name := range totals {
			names[name] = true
		}
		for name := range node {
			if isMemoryResource(name) {
				names[name] = true
			}
		}
		for name := range names {
			want, got := resource.NewQuantity(0, resource.DecimalSI), resource.NewQuantity(0, resource.DecimalSI)
			if q, ok := node[name]; ok {
				want.Add(q)
			}
			if q := totals[name]; q != nil {
				got.Add(*q)
			}
			if !want.Equal(*got) {
				return nil, fmt.Errorf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature", got.String(), name, want.String())
			}
		}
	}
	if q := totals[v1.ResourceMemory]; q == nil || q.IsZero() {
		return nil, fmt.Errorf("[memorymanager] you should specify the system reserved memory")
	}
	return out, nil
}

func (m *Manager) persist(st state) error {
	b, err := encodeCheckpoint(m.policy, st)
	if err == nil {
		err = fsutil.WriteFileSwap(m.path, b, 0o644, fsutil.NoSync(m.noSync))
	}
	if err != nil {
		return fmt.Errorf("memorymanager: write checkpoint %s: %w", m.path, err)
	}
	return nil
}

// Policy returns the policy name.
func (m *Manager) Policy() string { return m.policy }

// Admit allocates memory for every container of req.Pod without NUMA
// affinity (as the topology manager's none policy) and rejects the pod
// with UnexpectedAdmissionError when it cannot. Use it when no
// topology.Manager drives the memory manager.
func (m *Manager) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	for i := range req.Pod.Spec.InitContainers {
		if err := m.Allocate(ctx, req.Pod, &req.Pod.Spec.InitContainers[i], topology.Hint{}); err != nil {
			return topology.AdmitDecision(err)
		}
	}
	for i := range req.Pod.Spec.Containers {
		if err := m.Allocate(ctx, req.Pod, &req.Pod.Spec.Containers[i], topology.Hint{}); err != nil {
			return topology.AdmitDecision(err)
		}
	}
	return nodekit.Admitted
}

// exclusive reports whether the Static policy manages pod's memory: a
// Guaranteed pod without pod-level resources.
func (m *Manager) exclusive(pod *v1.Pod) bool {
	return m.static != nil && guaranteed(pod) && !resourcehelper.IsPodLevelResourcesSet(pod)
}

// Allocate implements topology.HintProvider: it gives container c of a
// Guaranteed pod its memory and huge pages on the NUMA nodes of affinity
// (or the best ones, widened until the request fits) and writes the
// checkpoint. A container that has blocks keeps them.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, affinity topology.Hint) error {
	if !m.exclusive(pod) {
		return nil
	}
	req, err := containerRequests(c)
	if err != nil || len(req) == 0 {
		return err
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	uid := string(pod.UID)
	if blocks := m.st.blocks(uid, c.Name); blocks != nil {
		m.static.noteReuse(pod, c, blocks)
		return nil
	}
	next := m.st.clone()
	h, err := m.static.placement(next.machine, uid, req, affinity)
	if err != nil {
		return err
	}
	var blocks []Block
	for _, name := range sortedNames(req) {
		size := req[name]
		blocks = append(blocks, Block{NUMAAffinity: h.NUMANodes.IDs(), Type: name, Size: size})
		reserve(next.machine, h.NUMANodes.IDs(), name, size-min(size, m.static.reusable(uid, h.NUMANodes, name)))
	}
	next.setBlocks(uid, c.Name, blocks)
	shrinkInitBlocks(next, pod, c, blocks)
	if err := m.persist(next); err != nil {
		return err
	}
	m.st = next
	m.static.noteReuse(pod, c, blocks)
	klog.FromContext(ctx).V(2).Info("Allocated memory", "pod", klog.KObj(pod), "container", c.Name, "numaNodes", h.NUMANodes)
	return nil
}

// TopologyHints implements topology.HintProvider for container scope:
// per memory resource, the NUMA node sets that could hold c's request.
func (m *Manager) TopologyHints(ctx context.Context, pod *v1.Pod, c *v1.Container) map[string][]topology.Hint {
	if !m.exclusive(pod) {
		return nil
	}
	req, err := containerRequests(c)
	if err != nil || len(req) == 0 {
		return nil
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	if blocks := m.st.blocks(string(pod.UID), c.Name); blocks != nil {
		return regenerate(blocks, req)
	}
	return m.static.hints(m.st.machine, string(pod.UID), req)
}

// PodTopologyHints implements topology.HintProvider for pod scope.
func (m *Manager) PodTopologyHints(ctx context.Context, pod *v1.Pod) map[string][]topology.Hint {
	if !m.exclusive(pod) {
		return nil
	}
	req, err := podRequests(pod)
	if err != nil || len(req) == 0 {
		return nil
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if blocks := m.st.blocks(string(pod.UID), list[i].Name); blocks != nil {
				return regenerate(blocks, req)
			}
		}
	}
	return m.static.hints(m.st.machine, string(pod.UID), req)
}

// CPUSetMems returns the NUMA nodes (cpuset.mems format, "0,1") the memory
// of container name of pod podUID comes from; ok is false when the manager
// placed none. It does not block. The lead wires it into container
// creation as the CRI LinuxContainerResources.CpusetMems.
func (m *Manager) CPUSetMems(podUID types.UID, containerName string) (mems string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var nodes []int
	for _, b := range m.st.blocks(string(podUID), containerName) {
		nodes = append(nodes, b.NUMAAffinity...)
	}
	if len(nodes) == 0 {
		return "", false
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ","), true
}

// MemoryBlocks returns a copy of the container's blocks.
func (m *Manager) MemoryBlocks(podUID types.UID, containerName string) []Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.st.blocks(string(podUID), containerName); b != nil {
		return cloneBlocks(b)
	}
	return nil
}

// AllocatableMemory returns, under the static policy, one block per NUMA
// node and resource (memory, hugepages-*) of its allocatable bytes; none
// under the none policy (upstream's GetAllocatableMemory, reported by the
// podresources API). Blocks are ordered by node, then resource name.
func (m *Manager) AllocatableMemory() []Block {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Block
	for _, node := range slices.Sorted(maps.Keys(m.st.machine)) {
		n := m.st.machine[node]
		for _, name := range slices.Sorted(maps.Keys(n.MemoryMap)) {
			out = append(out, Block{NUMAAffinity: []int{node}, Type: name, Size: n.MemoryMap[name].Allocatable})
		}
	}
	return out
}

// Free returns the free bytes of a resource on a NUMA node.
func (m *Manager) Free(node int, name v1.ResourceName) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.machine.table(node, name).Free
}

// removeStale releases the memory of containers of pods that are gone:
// not among ActivePods nor extra (the pod being admitted). Nothing is
// released until SourcesReady.
func (m *Manager) removeStale(ctx context.Context, extra *v1.Pod) {
	if m.static == nil || !m.sourcesReady() {
		return
	}
	active := map[string]map[string]bool{}
	add := func(p *v1.Pod) {
		names := map[string]bool{}
		for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				names[list[i].Name] = true
			}
		}
		active[string(p.UID)] = names
	}
	for _, p := range m.pods.ActivePods() {
		add(p)
	}
	if extra != nil {
		add(extra)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next, changed := m.st.clone(), false
	for pod, containers := range m.st.assignments {
		for name, blocks := range containers {
			if !active[pod][name] {
				release(next.machine, blocks)
				next.remove(pod, name)
				changed = true
				klog.FromContext(ctx).V(2).Info("Released memory of a removed container", "podUID", pod, "container", name)
			}
		}
	}
	if changed {
		if err := m.persist(next); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to release the memory of removed containers")
			return
		}
		m.st = next
	}
}

// Release releases the memory of pods no longer among ActivePods, as
// Allocate and the hints do before they look; call it periodically (the
// sync loop's housekeeping) so memory comes back without waiting for the
// next admission.
func (m *Manager) Release(ctx context.Context) { m.removeStale(ctx, nil) }
