package cgroupmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/qos"
)

// Values of Config.EnforceNodeAllocatable, as KubeletConfiguration's
// enforceNodeAllocatable.
const (
	EnforcePods                       = "pods"
	EnforceSystemReserved             = "system-reserved"
	EnforceKubeReserved               = "kube-reserved"
	EnforceSystemReservedCompressible = "system-reserved-compressible"
	EnforceKubeReservedCompressible   = "kube-reserved-compressible"
	EnforceNone                       = "none"
)

const (
	kubepodsName    = "kubepods"
	burstableName   = "burstable"
	bestEffortName  = "besteffort"
	podCgroupPrefix = "pod"

	defaultRoot              = "/sys/fs/cgroup"
	defaultCPUCFSQuotaPeriod = 100 * time.Millisecond
	minCPUCFSQuotaPeriod     = time.Millisecond
	maxCPUCFSQuotaPeriod     = time.Second

	enforceNodeAllocatableFieldMessage = "Config.EnforceNodeAllocatable"
)

// Config configures a Manager. The fields mirror KubeletConfiguration's.
type Config struct {
	// Root is where the cgroup file system is mounted; "" is
	// /sys/fs/cgroup.
	Root string
	// Version is the layout under Root; VersionUnknown detects it at
	// Start. Set it to use a Root that is not a cgroup mount (tests).
	Version Version
	// Driver is "cgroupfs" (the default) or "systemd": how cgroups are
	// named and created.
	Driver string
	// Backend, when set, creates and removes cgroups instead of the
	// built-in driver; names still follow Driver.
	Backend Driver
	// SystemdBus is the D-Bus address of the bus the systemd driver finds
	// systemd on; "" is DefaultSystemdBus (the system bus, as kubelet).
	SystemdBus string
	// SystemdCgroupBase is systemd's root cgroup below every hierarchy,
	// in cgroupfs form; "" is the hierarchies' root (systemd is the
	// host's init). Set it when systemd runs in a cgroup namespace of its
	// own (a container, the tests' private systemd): its kubepods.slice
	// is then SystemdCgroupBase/kubepods.slice on the host.
	SystemdCgroupBase string
	// CgroupRoot is the cgroup, in cgroupfs form, that kubepods goes
	// under; "" is "/". With CgroupsPerQOS it must exist at Start.
	CgroupRoot string
	// CgroupsPerQOS creates the kubepods tree (kubepods, kubepods/burstable,
	// kubepods/besteffort, a cgroup per pod). Upstream's default is true;
	// without it the Manager leaves pods in the runtime's default cgroup.
	CgroupsPerQOS bool
	// EnforceNodeAllocatable lists what to enforce: "pods" sizes kubepods
	// to capacity - reserved (otherwise it gets the capacity);
	// "system-reserved" and "kube-reserved" (and their "-compressible"
	// variants: cpu only) size the existing SystemReservedCgroup and
	// KubeReservedCgroup; "none" alone is nothing.
	EnforceNodeAllocatable []string
	// Capacity is the node's capacity (cpu, memory, hugepages-<size>, and
	// "pid" for pids.max); KubeReserved and SystemReserved are subtracted
	// from it when "pods" is enforced.
	Capacity       v1.ResourceList
	KubeReserved   v1.ResourceList
	SystemReserved v1.ResourceList
	// KubeReservedCgroup and SystemReservedCgroup (cgroupfs form) are
	// required when their reservation is enforced.
	KubeReservedCgroup   string
	SystemReservedCgroup string
	// QOSReserved maps a resource to the percentage (0-100) of the
	// requests of higher QoS classes kept from lower ones; only memory is
	// supported, as upstream (there behind the alpha gate QOSReserved).
	QOSReserved map[v1.ResourceName]int64
	// DisableCPUCFSQuota leaves pod cgroups without a CFS quota
	// (cpuCFSQuota: false); CPUCFSQuotaPeriod is the period, default 100ms.
	DisableCPUCFSQuota bool
	CPUCFSQuotaPeriod  time.Duration
	// PodPidsLimit is pids.max of every pod cgroup; 0 or -1 is none.
	PodPidsLimit int64
	// KillProcess kills one process left in a cgroup being destroyed; nil
	// sends SIGKILL. A process already gone must not be an error.
	KillProcess func(pid int) error
	// Clock paces the retries of a cgroup removal and times operations;
	// nil is the real clock.
	Clock clock.Clock
	// Metrics, when set, is told how long each pod and QoS cgroup
	// operation took (upstream's kubelet_cgroup_manager_duration_seconds).
	Metrics OperationObserver
}

// OperationObserver records cgroup operations: op is "create" (a pod
// cgroup that did not exist), "update" (a pod or QoS cgroup resized) or
// "destroy", as upstream labels them.
type OperationObserver interface {
	ObserveCgroupOperation(op string, d time.Duration)
}

// observe reports an operation begun at start to Config.Metrics.
func (m *Manager) observe(op string, start time.Time) {
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.ObserveCgroupOperation(op, m.cfg.Clock.Since(start))
	}
}

// Manager owns the kubepods cgroup tree: the node-allocatable cgroup, the
// QoS tiers and a cgroup per pod. It is safe for concurrent use.
type Manager struct {
	cfg        Config
	root       CgroupName // CgroupRoot
	kubepods   CgroupName // root/kubepods, the Guaranteed tier
	burstable  CgroupName
	bestEffort CgroupName
	enforce    map[string]bool
	periodUS   uint64

	mu sync.Mutex
	// driver is set by Start.
	driver Driver
	// pendingRoot is the kubepods config Start could not write to an
	// existing kubepods (usage above a lowered limit); UpdateQOS retries.
	pendingRoot *ResourceConfig
	// written is what the last update of the QoS tiers that wrote every
	// tier at its wanted values sized them to; nil when the last one did
	// not (EnsureQOS then writes).
	written *qosSizes
}

// New checks cfg and returns a Manager; it touches nothing until Start.
func New(cfg Config) (*Manager, error) {
	if cfg.Root == "" {
		cfg.Root = defaultRoot
	}
	switch cfg.Driver {
	case "":
		cfg.Driver = DriverCgroupfs
	case DriverCgroupfs, DriverSystemd:
	default:
		return nil, fmt.Errorf("cgroupmgr: Config.Driver: %q is neither %q nor %q", cfg.Driver, DriverCgroupfs, DriverSystemd)
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/"
	}
	if !strings.HasPrefix(cfg.CgroupRoot, "/") {
		return nil, fmt.Errorf("cgroupmgr: Config.CgroupRoot: %q is not absolute", cfg.CgroupRoot)
	}
	if cfg.CPUCFSQuotaPeriod == 0 {
		cfg.CPUCFSQuotaPeriod = defaultCPUCFSQuotaPeriod
	}
	if cfg.CPUCFSQuotaPeriod < minCPUCFSQuotaPeriod || cfg.CPUCFSQuotaPeriod > maxCPUCFSQuotaPeriod {
		return nil, fmt.Errorf("cgroupmgr: Config.CPUCFSQuotaPeriod: %v is outside [1ms, 1s]", cfg.CPUCFSQuotaPeriod)
	}
	if cfg.KillProcess == nil {
		cfg.KillProcess = killProcess
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	for name, pct := range cfg.QOSReserved {
		if name != v1.ResourceMemory {
			return nil, fmt.Errorf("cgroupmgr: Config.QOSReserved: only memory is supported, got %q", name)
		}
		if pct < 0 || pct > 100 {
			return nil, fmt.Errorf("cgroupmgr: Config.QOSReserved[memory]: %d is not a percentage (0-100)", pct)
		}
	}
	root, err := NewCgroupName(nil, ParseCgroupfs(cfg.CgroupRoot)...)
	if err != nil {
		return nil, fmt.Errorf("cgroupmgr: Config.CgroupRoot: %w", err)
	}
	m := &Manager{cfg: cfg, root: root, enforce: map[string]bool{}, periodUS: uint64(cfg.CPUCFSQuotaPeriod / time.Microsecond)}
	if err := m.checkEnforce(); err != nil {
		return nil, err
	}
	m.kubepods = root
	if cfg.CgroupsPerQOS {
		m.kubepods = append(slices.Clip(root), kubepodsName)
	}
	m.burstable = append(slices.Clip(m.kubepods), burstableName)
	m.bestEffort = append(slices.Clip(m.kubepods), bestEffortName)
	return m, nil
}

func (m *Manager) checkEnforce() error {
	for _, e := range m.cfg.EnforceNodeAllocatable {
		switch e {
		case EnforcePods, EnforceSystemReserved, EnforceKubeReserved, EnforceSystemReservedCompressible, EnforceKubeReservedCompressible:
		case EnforceNone:
			if len(m.cfg.EnforceNodeAllocatable) > 1 {
				return fmt.Errorf("cgroupmgr: %s: %q cannot be combined with other values", enforceNodeAllocatableFieldMessage, EnforceNone)
			}
			continue
		default:
			return fmt.Errorf("cgroupmgr: %s: unknown value %q", enforceNodeAllocatableFieldMessage, e)
		}
		m.enforce[e] = true
	}
	if len(m.enforce) > 0 && !m.cfg.CgroupsPerQOS {
		return fmt.Errorf("cgroupmgr: %s: enforcing node allocatable needs CgroupsPerQOS", enforceNodeAllocatableFieldMessage)
	}
	if (m.enforce[EnforceSystemReserved] || m.enforce[EnforceSystemReservedCompressible]) && m.cfg.SystemReservedCgroup == "" {
		return fmt.Errorf("cgroupmgr: Config.SystemReservedCgroup is required to enforce %q", EnforceSystemReserved)
	}
	if (m.enforce[EnforceKubeReserved] || m.enforce[EnforceKubeReservedCompressible]) && m.cfg.KubeReservedCgroup == "" {
		return fmt.Errorf("cgroupmgr: Config.KubeReservedCgroup is required to enforce %q", EnforceKubeReserved)
	}
	return nil
}

// Start sets up the tree: checks that CgroupRoot exists, creates or
// updates kubepods (sized to capacity - reserved when "pods" is enforced,
// else to capacity), kubepods/burstable and kubepods/besteffort (cpu.shares
// 2), and enforces the kube- and system-reserved limits asked for. Call
// UpdateQOS after it to size the tiers to the pods. Calling Start again
// re-applies everything.
func (m *Manager) Start(ctx context.Context) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.written = nil // the tiers are written again below
	d, closeOnFailure, err := m.startDriver(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			closeOnFailure()
		}
	}()
	if m.cfg.CgroupsPerQOS {
		if err := m.ensureQOSTree(ctx, d); err != nil {
			return err
		}
	} else if len(m.root) > 0 {
		// Upstream sizes a non-root cgroup root to the capacity even
		// without the QoS tree.
		if err := d.Apply(ctx, m.root, configForLimits(m.cfg.Capacity, false)); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to update the limits of the cgroup root", "cgroup", m.literal(m.root))
		}
	}
	if err := m.enforceReserved(ctx, d); err != nil {
		return err
	}
	if c, ok := m.driver.(closer); ok && m.driver != d {
		c.Close()
	}
	m.driver = d
	return nil
}

// startDriver returns the driver Start works with: Config.Backend when
// set, else a new systemd or cgroupfs driver (the latter checked to have
// the controllers it needs). closeOnFailure releases a driver opened here
// that Start then does not keep; it does nothing for the others.
func (m *Manager) startDriver(ctx context.Context) (d Driver, closeOnFailure func(), err error) {
	if m.cfg.Backend != nil {
		return m.cfg.Backend, func() {}, nil
	}
	if m.cfg.Driver == DriverSystemd {
		sd, err := newSystemdDriver(ctx, m.cfg)
		if err != nil {
			return nil, nil, err
		}
		return sd, sd.Close, nil
	}
	fsd, err := newFSDriver(m.cfg.Root, m.cfg.Version, m.cfg.KillProcess, m.cfg.Clock)
	if err != nil {
		return nil, nil, err
	}
	if err := fsd.checkControllers(); err != nil {
		return nil, nil, err
	}
	return fsd, func() {}, nil
}

// ensureQOSTree checks that the cgroup root exists, then creates or
// updates kubepods and its burstable and besteffort tiers through d. A
// failure to resize an existing kubepods is logged and left for UpdateQOS
// to retry.
func (m *Manager) ensureQOSTree(ctx context.Context, d Driver) error {
	if ok, err := d.Exists(ctx, m.root); err != nil {
		return fmt.Errorf("cgroupmgr: check Config.CgroupRoot %q: %w", m.cfg.CgroupRoot, err)
	} else if !ok {
		return fmt.Errorf("cgroupmgr: Config.CgroupRoot %q does not exist (in every cgroup hierarchy); create it or use \"/\"", m.cfg.CgroupRoot)
	}
	existed, err := d.Exists(ctx, m.kubepods)
	if err != nil {
		return err
	}
	rc, err := m.kubepodsConfig()
	if err != nil {
		return err
	}
	if err := d.Apply(ctx, m.kubepods, rc); err != nil {
		if !existed {
			return fmt.Errorf("cgroupmgr: create %s: %w", m.literal(m.kubepods), err)
		}
		// Upstream keeps retrying: pods may use more than a lowered
		// allocatable until evictions bring them down.
		klog.FromContext(ctx).Error(err, "Failed to update node allocatable limits; retrying at UpdateQOS", "cgroup", m.literal(m.kubepods))
		m.pendingRoot = rc
	}
	unbounded := unboundedHugePages
	if err := d.Apply(ctx, m.burstable, &ResourceConfig{HugePageLimit: map[int64]int64{}, HugePageOthers: &unbounded}); err != nil {
		return fmt.Errorf("cgroupmgr: create %s: %w", m.literal(m.burstable), err)
	}
	if err := d.Apply(ctx, m.bestEffort, &ResourceConfig{CPUShares: ptr(uint64(MinShares)), HugePageLimit: map[int64]int64{}, HugePageOthers: &unbounded}); err != nil {
		return fmt.Errorf("cgroupmgr: create %s: %w", m.literal(m.bestEffort), err)
	}
	return nil
}

// enforceReserved applies the system- and kube-reserved limits to their
// cgroups, which must already exist, for each that enforceNodeAllocatable
// names (only the compressible resources when only the -compressible key
// is given).
func (m *Manager) enforceReserved(ctx context.Context, d Driver) error {
	for _, r := range []struct {
		key, compressibleKey, cgroup string
		limits                       v1.ResourceList
	}{
		{EnforceSystemReserved, EnforceSystemReservedCompressible, m.cfg.SystemReservedCgroup, m.cfg.SystemReserved},
		{EnforceKubeReserved, EnforceKubeReservedCompressible, m.cfg.KubeReservedCgroup, m.cfg.KubeReserved},
	} {
		if !m.enforce[r.key] && !m.enforce[r.compressibleKey] {
			continue
		}
		name := ParseCgroupfs(r.cgroup)
		if m.cfg.Driver == DriverSystemd {
			name = ParseSystemd(r.cgroup)
		}
		if ok, err := d.Exists(ctx, name); err != nil {
			return fmt.Errorf("cgroupmgr: enforce %s on %q: %w", r.key, r.cgroup, err)
		} else if !ok {
			return fmt.Errorf("cgroupmgr: enforce %s on %q: the cgroup does not exist", r.key, r.cgroup)
		}
		if err := d.Apply(ctx, name, configForLimits(r.limits, !m.enforce[r.key])); err != nil {
			return fmt.Errorf("cgroupmgr: enforce %s on %q: %w", r.key, r.cgroup, err)
		}
	}
	return nil
}

// Close releases what the driver holds (the systemd driver's D-Bus
// connection); the cgroups stay. The Manager is unusable until Start.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.driver.(closer); ok {
		c.Close()
	}
	m.driver = nil
}

// kubepodsConfig sizes kubepods: the capacity, or capacity - reserved
// with "pods" enforced.
func (m *Manager) kubepodsConfig() (*ResourceConfig, error) {
	limits := m.cfg.Capacity
	if m.enforce[EnforcePods] {
		a, err := NodeAllocatable(m.cfg.Capacity, m.cfg.KubeReserved, m.cfg.SystemReserved, nil)
		if err != nil {
			return nil, err
		}
		limits = a.Kubepods
	}
	return configForLimits(limits, false), nil
}

func (m *Manager) literal(name CgroupName) string { return literalName(m.cfg.Driver, name) }

func (m *Manager) started() (Driver, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.driver == nil {
		return nil, errors.New("cgroupmgr: Manager.Start has not succeeded")
	}
	return m.driver, nil
}

// PodCgroupName is the cgroup of pod: pod<UID> under its QoS tier
// (kubepods itself for Guaranteed pods).
func (m *Manager) PodCgroupName(pod *v1.Pod) (CgroupName, error) {
	if pod == nil || pod.UID == "" {
		return nil, errors.New("cgroupmgr: pod without a UID")
	}
	parent := m.kubepods
	switch qos.Class(pod) {
	case v1.PodQOSBurstable:
		parent = m.burstable
	case v1.PodQOSBestEffort:
		parent = m.bestEffort
	}
	name, err := NewCgroupName(parent, podCgroupPrefix+string(pod.UID))
	if err != nil {
		return nil, fmt.Errorf("cgroupmgr: pod %s/%s: UID %q: %w", pod.Namespace, pod.Name, pod.UID, err)
	}
	return name, nil
}

// PodCgroupPath is pod's cgroup as the path below every hierarchy's
// mount point, in the driver's form: "/kubepods/burstable/pod<UID>" for
// cgroupfs, the nested slices for systemd (what EnsurePod returns, without
// creating anything). stats reads the pod's pressure there.
func (m *Manager) PodCgroupPath(pod *v1.Pod) (string, error) {
	name, err := m.PodCgroupName(pod)
	if err != nil {
		return "", err
	}
	return m.literal(name), nil
}

// PodCgroupParent is the cgroup parent to give the runtime for pod's
// sandbox, as EnsurePod returns it, without creating or writing anything:
// "" without CgroupsPerQOS. With PodCgroupExists it lets a caller leave an
// existing pod cgroup as it is, as upstream's EnsureExists does.
func (m *Manager) PodCgroupParent(pod *v1.Pod) (string, error) {
	if !m.cfg.CgroupsPerQOS {
		return "", nil
	}
	return m.PodCgroupPath(pod)
}

// EnsurePod creates pod's cgroup, or updates it, with the limits of
// ResourceConfigForPod (and PodPidsLimit), and returns the cgroup parent
// to give the runtime for the pod's sandbox: the literal path in the
// driver's form, "/kubepods/burstable/pod<UID>" for cgroupfs. Without
// CgroupsPerQOS it does nothing and returns "" (the runtime's default).
func (m *Manager) EnsurePod(ctx context.Context, pod *v1.Pod) (string, error) {
	if !m.cfg.CgroupsPerQOS {
		return "", nil
	}
	name, err := m.PodCgroupName(pod)
	if err != nil {
		return "", err
	}
	d, err := m.started()
	if err != nil {
		return "", err
	}
	rc := ResourceConfigForPod(pod, !m.cfg.DisableCPUCFSQuota, m.periodUS)
	if m.cfg.PodPidsLimit > 0 {
		rc.PidsLimit = ptr(m.cfg.PodPidsLimit)
	}
	op := "update"
	if m.cfg.Metrics != nil {
		if ok, err := d.Exists(ctx, name); err == nil && !ok {
			op = "create"
		}
	}
	start := m.cfg.Clock.Now()
	if err := d.Apply(ctx, name, rc); err != nil {
		return "", fmt.Errorf("cgroupmgr: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	m.observe(op, start)
	return m.literal(name), nil
}

// PodMemoryUsage is the memory charged to pod's cgroup, in bytes (the
// check before a pod's memory limit is lowered in place:
// allocation.PodMemoryUsage). Without CgroupsPerQOS, or with a driver that
// cannot read usage, it fails.
func (m *Manager) PodMemoryUsage(ctx context.Context, pod *v1.Pod) (uint64, error) {
	if !m.cfg.CgroupsPerQOS {
		return 0, fmt.Errorf("cgroupmgr: no pod cgroups (cgroupsPerQOS is off)")
	}
	name, err := m.PodCgroupName(pod)
	if err != nil {
		return 0, err
	}
	d, err := m.started()
	if err != nil {
		return 0, err
	}
	mu, ok := d.(memoryUser)
	if !ok {
		return 0, fmt.Errorf("cgroupmgr: the cgroup driver cannot read memory usage")
	}
	v, err := mu.MemoryUsage(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("cgroupmgr: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return uint64(max(v, 0)), nil
}

// PodCgroupExists reports whether pod's cgroup exists (completely, in
// every hierarchy that matters). Without CgroupsPerQOS it is always true,
// as upstream.
func (m *Manager) PodCgroupExists(ctx context.Context, pod *v1.Pod) (bool, error) {
	if !m.cfg.CgroupsPerQOS {
		return true, nil
	}
	name, err := m.PodCgroupName(pod)
	if err != nil {
		return false, err
	}
	d, err := m.started()
	if err != nil {
		return false, err
	}
	return d.Exists(ctx, name)
}

// DestroyPod kills whatever still runs in the cgroup of the pod with uid
// (under any QoS tier) and removes it with its children. Call it once the
// pod is terminated and its containers are removed. A pod without a
// cgroup is no error.
func (m *Manager) DestroyPod(ctx context.Context, uid types.UID) error {
	if !m.cfg.CgroupsPerQOS {
		return nil
	}
	d, err := m.started()
	if err != nil {
		return err
	}
	defer m.observe("destroy", m.cfg.Clock.Now())
	var errs []error
	for _, parent := range []CgroupName{m.kubepods, m.burstable, m.bestEffort} {
		name, err := NewCgroupName(parent, podCgroupPrefix+string(uid))
		if err != nil {
			return fmt.Errorf("cgroupmgr: pod UID %q: %w", uid, err)
		}
		if err := d.Destroy(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ListPodCgroups returns the UIDs of the pod cgroups on disk under every
// QoS tier, sorted, so that housekeeping can destroy those of pods that
// no longer exist.
func (m *Manager) ListPodCgroups(ctx context.Context) ([]types.UID, error) {
	if !m.cfg.CgroupsPerQOS {
		return nil, nil
	}
	d, err := m.started()
	if err != nil {
		return nil, err
	}
	set := map[types.UID]bool{}
	for _, parent := range []CgroupName{m.kubepods, m.burstable, m.bestEffort} {
		children, err := d.Children(ctx, parent)
		if err != nil {
			return nil, err
		}
		for _, c := range children {
			if uid, ok := strings.CutPrefix(c, podCgroupPrefix); ok && uid != "" {
				set[types.UID(uid)] = true
			}
		}
	}
	out := make([]types.UID, 0, len(set))
	for uid := range set {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
