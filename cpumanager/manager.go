package cpumanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/podutil"
	"github.com/nodekit/nodekit/topology"
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

// Config configures a Manager. StateDir is always required; the static
// policy also needs Topology, a CPU reservation and ActivePods.
type Config struct {
	// Policy is none (default) or static (cpuManagerPolicy).
	Policy string
	// Options are the cpuManagerPolicyOptions (static only).
	Options map[string]string
	// Topology is the machine's CPU layout (topology.Discover).
	Topology *topology.CPUTopology
	// ReservedSystemCPUs is the explicit reserved list (reservedSystemCPUs).
	ReservedSystemCPUs cpuset.CPUSet
	// ReservedCPU is systemReserved.cpu + kubeReserved.cpu. Without a
	// reserved list, that many CPUs (rounded up) are reserved, taken
	// topology-first from the lowest cores. The static policy needs one
	// of the two.
	ReservedCPU resource.Quantity
	// StateDir holds the checkpoint, StateDir/cpu_manager_state (the
	// kubelet root dir upstream).
	StateDir string
	// ActivePods tells the manager which pods still exist; the CPUs of
	// containers of any other pod are released.
	ActivePods PodLister
	// SourcesReady reports whether every pod source has been seen; until
	// it does nothing is released, so a restarting agent keeps the CPUs of
	// pods it has not been told about yet. Nil means always ready.
	SourcesReady func() bool
	// Status and Runtime are what Reconcile needs: container IDs and
	// states from the pod statuses, and the call that changes a running
	// container's cpuset. Without them Reconcile does nothing.
	Status  PodStatusGetter
	Runtime ResourceUpdater
	// ReconcilePeriod is Run's period (cpuManagerReconcilePeriod); default 10s.
	ReconcilePeriod time.Duration
	// Clock drives Run. Default: the real clock.
	Clock clock.WithTicker
}

// Manager is the CPU manager. It decides which CPUs each container runs on
// and keeps the decision in its checkpoint:
//
//   - as a nodekit.Admitter (Admit) or a topology.HintProvider driven by
//     the topology manager (TopologyHints, PodTopologyHints, Allocate), it
//     gives Guaranteed containers with integer CPU requests exclusive CPUs
//     under the static policy, or rejects the pod;
//   - CPUSet tells the runtime side which cpuset to create a container with;
//   - Reconcile (and Run) pushes changes of the shared pool to running
//     containers.
//
// Its methods are safe for concurrent use.
type Manager struct {
	policy       string
	static       *static // nil for the none policy
	path         string
	pods         PodLister
	sourcesReady func() bool
	status       PodStatusGetter
	runtime      ResourceUpdater
	period       time.Duration
	clock        clock.WithTicker

	mu sync.Mutex
	st state
	// reuse holds, for the pod being admitted, the CPUs of its finished
	// init containers that its later containers may take (upstream's
	// cpusToReuse).
	reuse map[string]cpuset.CPUSet
	// applied is the cpuset Reconcile last pushed to each container.
	applied map[nodekit.ContainerID]string
	// noSync skips fsync of the checkpoint; tests that write thousands
	// of them set it.
	noSync bool
}

var (
	_ nodekit.Admitter      = (*Manager)(nil)
	_ topology.HintProvider = (*Manager)(nil)
)

// New checks cfg, restores the checkpoint and validates it against the
// machine, as upstream's Start does. It refuses to start when the
// checkpoint was written by another policy, does not match the machine or
// the reservation, or is corrupt, with an error saying to drain the node
// and delete the file. A missing checkpoint is created.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	logger := klog.FromContext(ctx)
	m := &Manager{
		policy: cfg.Policy, pods: cfg.ActivePods, sourcesReady: cfg.SourcesReady,
		status: cfg.Status, runtime: cfg.Runtime, period: cfg.ReconcilePeriod, clock: cfg.Clock,
		reuse: map[string]cpuset.CPUSet{}, applied: map[nodekit.ContainerID]string{},
	}
	if m.policy == "" {
		m.policy = PolicyNone
	}
	if m.period <= 0 {
		m.period = 10 * time.Second
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if m.sourcesReady == nil {
		m.sourcesReady = func() bool { return true }
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("cpumanager: Config.StateDir is empty")
	}
	opts, err := parseOptions(m.policy, cfg.Options)
	if err != nil {
		return nil, err
	}
	switch m.policy {
	case PolicyNone:
	case PolicyStatic:
		if cfg.ActivePods == nil {
			return nil, fmt.Errorf("cpumanager: the static policy needs Config.ActivePods")
		}
		if m.static, err = newStatic(cfg.Topology, opts, cfg.ReservedSystemCPUs, cfg.ReservedCPU); err != nil {
			return nil, err
		}
		logger.Info("CPU manager static policy", "topology", cfg.Topology, "reserved", m.static.reserved, "options", cfg.Options)
	default:
		return nil, fmt.Errorf("cpumanager: unknown policy: %q", cfg.Policy)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("cpumanager: %w", err)
	}
	m.path = filepath.Join(cfg.StateDir, StateFileName)
	policy, st, found, err := readCheckpoint(m.path)
	if err == nil && found && policy != m.policy {
		err = fmt.Errorf("configured policy %q differs from state checkpoint policy %q", m.policy, policy)
	}
	if err != nil {
		return nil, fmt.Errorf("cpumanager: could not restore state from checkpoint: %w, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", err, m.path)
	}
	if m.static != nil {
		if err := m.static.validate(&st); err != nil {
			return nil, fmt.Errorf("cpumanager: invalid state in %s, please drain the node and remove the file: %w", m.path, err)
		}
	}
	m.st = st
	if err := m.persist(st); err != nil {
		return nil, err
	}
	return m, nil
}

// persist writes st to the checkpoint.
func (m *Manager) persist(st state) error {
	b, err := encodeCheckpoint(m.policy, st)
	if err == nil {
		err = fsutil.WriteFileSwap(m.path, b, 0o644, fsutil.NoSync(m.noSync))
	}
	if err != nil {
		return fmt.Errorf("cpumanager: write checkpoint %s: %w", m.path, err)
	}
	return nil
}

// commit persists next and makes it the state; on a write error the state
// is left as it was.
func (m *Manager) commit(next state) error {
	if err := m.persist(next); err != nil {
		return err
	}
	m.st = next
	return nil
}

// Policy returns the policy name.
func (m *Manager) Policy() string { return m.policy }

// Admit allocates CPUs for every container of req.Pod without NUMA
// affinity, as the topology manager's none policy does, and rejects the pod
// when they cannot be had: SMTAlignmentError (full-pcpus-only) or
// UnexpectedAdmissionError. Use it when no topology.Manager drives the CPU
// manager; chaining both is harmless (allocation is idempotent).
func (m *Manager) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	for _, c := range podContainers(req.Pod) {
		if err := m.Allocate(ctx, req.Pod, c, topology.Hint{}); err != nil {
			return topology.AdmitDecision(err)
		}
	}
	return nodekit.Admitted
}

// Allocate implements topology.HintProvider: it gives container c of pod
// exclusive CPUs if it qualifies, preferring the NUMA nodes of affinity,
// and writes the checkpoint before returning. A container that already has
// CPUs keeps them. It blocks on the checkpoint write only.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, affinity topology.Hint) error {
	if m.static == nil {
		return nil
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := guaranteedCPUs(pod, c)
	if n == 0 || podLevel(pod) {
		return nil
	}
	uid := string(pod.UID)
	if cpus, ok := m.st.get(uid, c.Name); ok {
		m.noteReuse(pod, c, cpus)
		return nil
	}
	if err := m.static.checkSMT(&m.st, n); err != nil {
		return err
	}
	next := m.st.clone()
	cpus, err := m.static.allocate(&next, n, affinity.NUMANodes, m.reuse[uid])
	if err != nil {
		return err
	}
	next.set(uid, c.Name, cpus)
	if err := m.commit(next); err != nil {
		return err
	}
	m.noteReuse(pod, c, cpus)
	klog.FromContext(ctx).V(2).Info("Allocated exclusive CPUs", "pod", klog.KObj(pod), "container", c.Name, "cpus", cpus.String(), "affinity", affinity)
	return nil
}

// noteReuse records that a regular init container's CPUs may be reused by
// the pod's later containers, and that an app container or sidecar took
// some of them. Only the pod being admitted is remembered.
func (m *Manager) noteReuse(pod *v1.Pod, c *v1.Container, cpus cpuset.CPUSet) {
	uid := string(pod.UID)
	for other := range m.reuse {
		if other != uid {
			delete(m.reuse, other)
		}
	}
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name == c.Name && !podutil.IsSidecar(ic) {
			m.reuse[uid] = m.reuse[uid].Union(cpus)
			return
		}
	}
	m.reuse[uid] = m.reuse[uid].Difference(cpus)
}

// TopologyHints implements topology.HintProvider for container scope: the
// NUMA node sets that could hold c's exclusive CPUs, under resource "cpu".
// Containers without exclusive CPUs have no preference (nil).
func (m *Manager) TopologyHints(ctx context.Context, pod *v1.Pod, c *v1.Container) map[string][]topology.Hint {
	if m.static == nil {
		return nil
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := guaranteedCPUs(pod, c)
	if n == 0 || podLevel(pod) {
		return nil
	}
	if cpus, ok := m.st.get(string(pod.UID), c.Name); ok {
		if cpus.Size() != n {
			return map[string][]topology.Hint{string(v1.ResourceCPU): {}}
		}
		return map[string][]topology.Hint{string(v1.ResourceCPU): m.static.hints(cpus, cpuset.New(), n)}
	}
	return map[string][]topology.Hint{
		string(v1.ResourceCPU): m.static.hints(m.static.available(&m.st), m.reuse[string(pod.UID)], n),
	}
}

// PodTopologyHints implements topology.HintProvider for pod scope.
func (m *Manager) PodTopologyHints(ctx context.Context, pod *v1.Pod) map[string][]topology.Hint {
	if m.static == nil {
		return nil
	}
	m.removeStale(ctx, pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := podGuaranteedCPUs(pod)
	if n == 0 || podLevel(pod) {
		return nil
	}
	assigned := cpuset.New()
	for _, c := range podContainers(pod) {
		if cpus, ok := m.st.get(string(pod.UID), c.Name); ok {
			if cpus.Size() != guaranteedCPUs(pod, c) {
				return map[string][]topology.Hint{string(v1.ResourceCPU): {}}
			}
			assigned = assigned.Union(cpus)
		}
	}
	if assigned.Size() == n {
		return map[string][]topology.Hint{string(v1.ResourceCPU): m.static.hints(assigned, cpuset.New(), n)}
	}
	reusable := m.reuse[string(pod.UID)].Union(assigned)
	return map[string][]topology.Hint{
		string(v1.ResourceCPU): m.static.hints(m.static.available(&m.st), reusable, n),
	}
}

// CPUSet returns the cpuset (in Linux list format, "2-3,7") container name
// of pod podUID should be created with: its exclusive CPUs, or else the
// shared pool. ok is false when there is nothing to pin to: the none
// policy, or a shared pool emptied under strict-cpu-reservation (upstream
// then leaves the cpuset unset too). It does not block. The runtime side
// sets it as the CRI LinuxContainerResources.CpusetCpus at creation;
// Reconcile corrects containers created before a pool change.
func (m *Manager) CPUSet(podUID types.UID, containerName string) (cpus string, ok bool) {
	if m.static == nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.cpusFor(string(podUID), containerName)
	return set.String(), !set.IsEmpty()
}

func (m *Manager) cpusFor(pod, container string) cpuset.CPUSet {
	if cpus, ok := m.st.get(pod, container); ok {
		return cpus
	}
	return m.st.defaultSet
}

// ExclusiveCPUs returns the CPUs held exclusively by the container (empty
// when none).
func (m *Manager) ExclusiveCPUs(podUID types.UID, containerName string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	cpus, _ := m.st.get(string(podUID), containerName)
	return cpus
}

// SharedCPUs returns the shared pool: the CPUs of containers without
// exclusive ones (it includes the reserved CPUs unless
// strict-cpu-reservation). Empty under the none policy.
func (m *Manager) SharedCPUs() cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.defaultSet
}

// AllocatableCPUs returns the CPUs that can be handed out exclusively: the
// machine's CPUs minus the reserved ones under the static policy, none
// under the none policy (upstream's GetAllocatableCPUs, reported by the
// podresources API).
func (m *Manager) AllocatableCPUs() cpuset.CPUSet {
	if m.static == nil {
		return cpuset.New()
	}
	return m.static.topo.CPUs().Difference(m.static.reserved)
}

// ReservedCPUs returns the CPUs never handed out exclusively.
func (m *Manager) ReservedCPUs() cpuset.CPUSet {
	if m.static == nil {
		return cpuset.New()
	}
	return m.static.reserved
}

// removeStale releases the CPUs of containers of pods that are gone: not
// among ActivePods nor extra (the pod being admitted). Nothing is released
// until SourcesReady. A failed checkpoint write is logged and retried on
// the next call.
func (m *Manager) removeStale(ctx context.Context, extra *v1.Pod) {
	if m.static == nil || !m.sourcesReady() {
		return
	}
	active := map[string]map[string]bool{}
	add := func(p *v1.Pod) {
		names := map[string]bool{}
		for _, c := range podContainers(p) {
			names[c.Name] = true
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
		for name := range containers {
			if !active[pod][name] {
				changed = m.static.release(&next, pod, name) || changed
				klog.FromContext(ctx).V(2).Info("Released CPUs of a removed container", "podUID", pod, "container", name)
			}
		}
	}
	if changed {
		if err := m.commit(next); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to release the CPUs of removed containers")
		}
	}
}

// podContainers returns pointers to the pod's init then app containers, in
// a new slice.
func podContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}
