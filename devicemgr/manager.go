package devicemgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// Names and defaults, as upstream kubelet.
const (
	// DefaultDir is the device plugin directory: the registration socket,
	// the plugins' sockets and the checkpoint live there.
	DefaultDir = "/var/lib/kubelet/device-plugins"
	// SocketName is the registration socket's name in the directory.
	SocketName = "kubelet.sock"
	// CheckpointName is the checkpoint's name in the directory.
	CheckpointName = "kubelet_internal_checkpoint"
	// DefaultGracePeriod is how long a resource whose plugin went away
	// stays in the node's capacity before it is removed.
	DefaultGracePeriod = 5 * time.Minute
	// ReasonUnexpectedAdmissionError is the rejection reason when devices
	// cannot be allocated, as upstream.
	ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"
)

// Config configures a Manager. Every field is optional.
type Config struct {
	// Dir is the device plugin directory; default DefaultDir. Its path
	// plus "/kubelet.sock" must fit a unix socket path (about 107 bytes).
	Dir string
	// ActivePods returns the admitted pods that are not terminal. Devices
	// of any other pod are reclaimed before new devices are allocated.
	// Nil means the pods of the AdmitRequest being handled.
	ActivePods func() []*v1.Pod
	// SourcesReady reports whether every pod source has been seen; until
	// then nothing is reclaimed, and a container RunningAtStart keeps its
	// checkpointed devices even while its plugin has not re-registered.
	// Nil means always ready.
	SourcesReady func() bool
	// RunningAtStart reports whether a container was running when the
	// agent started (upstream's initial container map and running set).
	// Nil means none was.
	RunningAtStart func(podUID types.UID, container string) bool
	// GracePeriod is how long the resource of a plugin that went away is
	// kept (its devices unhealthy) before Resources reports it removed;
	// default DefaultGracePeriod.
	GracePeriod time.Duration
	// Clock measures the grace period. Default: the real clock.
	Clock clock.WithDelayedExecution
	// NoCDI, when not empty, says why the container runtime cannot
	// inject CDI devices (for example "containerd 1.6 has no CDI device
	// injection"). A container whose plugins answer Allocate with CDI
	// device names then fails to be created with an error naming the
	// devices and this reason, instead of running without them.
	NoCDI string
	// ReportHealth sends on HealthUpdates the pods whose devices' health
	// changed (the ResourceHealthStatus gate), so their containers'
	// allocatedResourcesStatus is published again.
	ReportHealth bool
}

// Manager is the device plugin manager. It runs the registration server
// plugins register with, tracks their devices and health, hands devices
// out to containers at admission (as a nodekit.Admitter), and keeps the
// allocations in its checkpoint. Its methods are safe for concurrent use.
type Manager struct {
	dir          string
	socket       string
	ckPath       string
	grace        time.Duration
	clock        clock.WithDelayedExecution
	activePods   func() []*v1.Pod
	sourcesReady func() bool
	running      func(types.UID, string) bool
	noCDI        string
	logger       klog.Logger
	changes      chan struct{}
	reportHealth bool
	healthUpd    chan types.UID

	// allocMu serializes allocations (Admit and ContainerOptions), so
	// devices picked but not yet committed are never picked twice.
	allocMu sync.Mutex
	// regMu serializes plugin registrations, startMu Start calls.
	regMu   sync.Mutex
	startMu sync.Mutex
	// ckMu serializes checkpoint writes.
	ckMu sync.Mutex
	// noSync skips fsync of the checkpoint (tests).
	noSync bool

	mu        sync.Mutex
	resources map[string]*resourceState
	pods      podDevices
	// allocated is every device held by a pod (pods.devices()), plus the
	// devices picked by an allocation in progress.
	allocated map[string]sets.Set[string]
	// run is the running registration server, nil when stopped; last is
	// the run most recently stopped.
	run, last *run
}

// run is one Start..Stop of the registration server.
type run struct {
	srv    *grpc.Server
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the server and the plugin streams; done is closed when
	// Stop has waited for them.
	wg   sync.WaitGroup
	done chan struct{}
}

// resourceState is one extended resource served by a plugin.
type resourceState struct {
	// ep is the plugin's connection; nil for a resource restored from the
	// checkpoint whose plugin has not registered since.
	ep        *endpoint
	devices   map[string]*pluginapi.Device
	healthy   sets.Set[string]
	unhealthy sets.Set[string]
	// stopped is when the plugin went away; zero while it is connected.
	stopped time.Time
	expiry  clock.Timer
}

var _ nodekit.Admitter = (*Manager)(nil)

// ErrCorruptCheckpoint is wrapped by New's error when the checkpoint is
// not valid JSON or its checksum does not match its content.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupted")

// New creates cfg.Dir if needed and restores the checkpoint from it, so
// allocations survive an agent restart. Resources found in it have no healthy devices (and a zero
// capacity, as upstream) until their plugin registers again, and are
// removed after the grace period if it does not. A missing checkpoint is
// an empty state; a corrupt one is an error naming the file (wrapping
// ErrCorruptCheckpoint): drain the node and delete it. The registration
// server starts with Start or Run. The logger comes from ctx.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	m := &Manager{
		dir: cfg.Dir, grace: cfg.GracePeriod, clock: cfg.Clock,
		activePods: cfg.ActivePods, sourcesReady: cfg.SourcesReady, running: cfg.RunningAtStart,
		noCDI:        cfg.NoCDI,
		logger:       klog.FromContext(ctx),
		changes:      make(chan struct{}, 1),
		reportHealth: cfg.ReportHealth, healthUpd: make(chan types.UID, 100),
		resources: map[string]*resourceState{},
		pods:      podDevices{},
		allocated: map[string]sets.Set[string]{},
	}
	if m.dir == "" {
		m.dir = DefaultDir
	}
	if !filepath.IsAbs(m.dir) {
		return nil, fmt.Errorf("devicemgr: Config.Dir %q is not an absolute path", m.dir)
	}
	m.dir = filepath.Clean(m.dir)
	if m.grace <= 0 {
		m.grace = DefaultGracePeriod
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if m.sourcesReady == nil {
		m.sourcesReady = func() bool { return true }
	}
	if m.running == nil {
		m.running = func(types.UID, string) bool { return false }
	}
	m.socket = filepath.Join(m.dir, SocketName)
	m.ckPath = filepath.Join(m.dir, CheckpointName)
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return nil, fmt.Errorf("devicemgr: create the device plugin directory: %w", err)
	}
	if err := m.restore(); err != nil {
		return nil, err
	}
	return m, nil
}

// SocketPath is the registration socket plugins register with.
func (m *Manager) SocketPath() string { return m.socket }

// Changes signals that Resources may have changed: a plugin registered or
// went away, its devices or their health changed, or a grace period
// expired. Signals coalesce; the agent calls Resources and updates the
// node status.
func (m *Manager) Changes() <-chan struct{} { return m.changes }

func (m *Manager) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

// Resources returns the node's device plugin resources, as upstream's
// GetCapacity: capacity counts every device of a registered resource,
// allocatable only the healthy ones, and removed lists the resources
// whose plugin has been gone longer than the grace period. A removed
// resource is reported once and forgotten: the agent deletes it from the
// node status.
func (m *Manager) Resources() (capacity, allocatable v1.ResourceList, removed []string) {
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	m.mu.Lock()
	for name, rs := range m.resources {
		if !rs.stopped.IsZero() && m.clock.Since(rs.stopped) > m.grace {
			removed = append(removed, name)
			if rs.expiry != nil {
				rs.expiry.Stop()
			}
			delete(m.resources, name)
			continue
		}
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(rs.healthy.Len()+rs.unhealthy.Len()), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(rs.healthy.Len()), resource.DecimalSI)
	}
	m.mu.Unlock()
	if len(removed) > 0 {
		sort.Strings(removed)
		m.logger.Info("Device plugin resources removed after their grace period", "resources", removed)
		if err := m.persist(); err != nil {
			m.logger.Error(err, "Failed to write the device manager checkpoint")
		}
	}
	return capacity, allocatable, removed
}

// resourceFor returns the state of name, creating it.
func (m *Manager) resourceFor(name string) *resourceState {
	rs := m.resources[name]
	if rs == nil {
		rs = &resourceState{devices: map[string]*pluginapi.Device{}, healthy: sets.New[string](), unhealthy: sets.New[string]()}
		m.resources[name] = rs
	}
	return rs
}

// markStopped records that the plugin of rs went away now: its devices
// become unhealthy and the grace period starts.
func (m *Manager) markStopped(rs *resourceState) {
	rs.stopped = m.clock.Now()
	rs.unhealthy = rs.unhealthy.Union(rs.healthy)
	rs.healthy = sets.New[string]()
	if rs.expiry != nil {
		rs.expiry.Stop()
	}
	// Resources checks the expiry itself; the timer only wakes the agent
	// a little after it, so the removal is reported promptly.
	rs.expiry = m.clock.AfterFunc(m.grace+time.Millisecond, m.notify)
}

// isPluginResource reports whether name is served by a plugin now or was
// allocated from one, as upstream. Callers hold m.mu.
func (m *Manager) isPluginResource(name string) bool {
	if _, ok := m.resources[name]; ok {
		return true
	}
	_, ok := m.allocated[name]
	return ok
}

// SanitizeAllocatable returns the node allocatable the resource-fit
// admission check should see for pod, as upstream's
// sanitizeNodeAllocatable: when pod already holds devices (a pod
// re-admitted after an agent restart, before its plugin is back), each
// plugin resource is raised to at least the number of devices allocated,
// so pods that already run keep passing. Otherwise allocatable is
// returned as is. The argument is not modified.
func (m *Manager) SanitizeAllocatable(pod *v1.Pod, allocatable v1.ResourceList) v1.ResourceList {
	if pod == nil {
		return allocatable
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[string(pod.UID)]; !ok {
		return allocatable
	}
	out, copied := allocatable, false
	for name, ids := range m.allocated {
		q, ok := allocatable[v1.ResourceName(name)]
		if ok && q.Value() >= int64(ids.Len()) {
			continue
		}
		if !copied {
			out, copied = v1.ResourceList{}, true
			maps.Copy(out, allocatable)
		}
		out[v1.ResourceName(name)] = *resource.NewQuantity(int64(ids.Len()), resource.DecimalSI)
	}
	return out
}
