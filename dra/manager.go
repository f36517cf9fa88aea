package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ClaimGetter reads a ResourceClaim from the API server.
type ClaimGetter interface {
	GetResourceClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// ClaimGetterFunc adapts a function to ClaimGetter.
type ClaimGetterFunc func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// GetResourceClaim implements ClaimGetter.
func (f ClaimGetterFunc) GetResourceClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return f(ctx, namespace, name)
}

// SliceDeleter deletes this node's ResourceSlices of a driver ("" is
// every driver), as upstream's DeleteCollection with the field selectors
// spec.nodeName and spec.driver.
type SliceDeleter interface {
	DeleteResourceSlices(ctx context.Context, driver string) error
}

// SliceDeleterFunc adapts a function to SliceDeleter.
type SliceDeleterFunc func(ctx context.Context, driver string) error

// DeleteResourceSlices implements SliceDeleter.
func (f SliceDeleterFunc) DeleteResourceSlices(ctx context.Context, driver string) error {
	return f(ctx, driver)
}

// Config configures a Manager.
type Config struct {
	// RootDir holds the checkpoint (RootDir/dra_manager_state). Required.
	RootDir string
	// Claims reads the pods' ResourceClaims. Required.
	Claims ClaimGetter
	// Slices, when set, deletes the node's ResourceSlices at start-up (Run)
	// and WipeDelay after a driver's last endpoint deregistered.
	Slices SliceDeleter
	// ActivePods lists the pods that may still use their claims; Reconcile
	// unprepares the claims of every other pod. Nil disables Reconcile.
	ActivePods func() []*v1.Pod
	// SourcesReady says every pod source has been seen; until then
	// Reconcile does nothing (a pod not yet seen is not gone). Nil is
	// always ready.
	SourcesReady func() bool
	// WipeDelay is how long a driver may be gone before its slices are
	// deleted; 0 is upstream's 30s.
	WipeDelay time.Duration
	// ReconcilePeriod is how often Run reconciles; 0 is upstream's 60s.
	ReconcilePeriod time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithDelayedExecution
	// ReportHealth follows the device health of drivers that serve the
	// health service (DRAResourceHealth, v1 or v1alpha1), for the
	// containers' allocatedResourcesStatus (AllocatedResourcesStatus) and
	// HealthUpdates: the ResourceHealthStatus gate. Off, no health stream
	// is opened and every device reads Unknown.
	ReportHealth bool
	// HealthMessages puts the drivers' health messages into the statuses
	// (the ResourceHealthStatusMessage gate).
	HealthMessages bool
}

// claim is the cache entry of one prepared (or being prepared) claim.
type claim struct {
	claimState
	unpreparing bool
}

// Manager prepares and unprepares the ResourceClaims of pods. It is safe
// for concurrent use.
type Manager struct {
	cfg  Config
	path string

	mu        sync.Mutex
	claims    map[string]*claim // namespace/name
	drivers   map[string][]*driver
	wipes     map[string]clock.Timer
	wipeLater []string
	wipeCh    chan string

	health        *healthStore
	healthErr     error // from reading the health checkpoint
	healthUpdates chan types.UID
	// watches counts the running health watches; Run waits for them.
	watches sync.WaitGroup
}

// New restores the checkpoint under cfg.RootDir and returns the Manager.
// A corrupt checkpoint is an error: the node must be drained and the file
// removed, as upstream.
func New(cfg Config) (*Manager, error) {
	if cfg.RootDir == "" {
		return nil, errors.New("dra: Config.RootDir is required")
	}
	if cfg.Claims == nil {
		return nil, errors.New("dra: Config.Claims is required")
	}
	if cfg.WipeDelay == 0 {
		cfg.WipeDelay = 30 * time.Second
	}
	if cfg.ReconcilePeriod == 0 {
		cfg.ReconcilePeriod = 60 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SourcesReady == nil {
		cfg.SourcesReady = func() bool { return true }
	}
	if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		return nil, fmt.Errorf("dra: RootDir: %w", err)
	}
	m := &Manager{
		cfg: cfg, path: filepath.Join(cfg.RootDir, CheckpointFile),
		claims: map[string]*claim{}, drivers: map[string][]*driver{},
		wipes: map[string]clock.Timer{}, wipeCh: make(chan string, 1),
		healthUpdates: make(chan types.UID, 100),
	}
	// An unreadable health checkpoint is not fatal, as upstream: Run
	// logs it and the drivers report again.
	m.health, m.healthErr = newHealthStore(cfg.Clock, filepath.Join(cfg.RootDir, HealthCheckpointFile))
	restored, err := readCheckpoint(m.path)
	if err != nil {
		return nil, err
	}
	for _, st := range restored {
		if st.PodUIDs == nil {
			st.PodUIDs = map[string]struct{}{}
		}
		m.claims[st.Namespace+"/"+st.ClaimName] = &claim{claimState: st}
	}
	return m, nil
}

// Run deletes the node's ResourceSlices once (drivers publish theirs again
// when they register, as upstream), then reconciles every ReconcilePeriod
// and carries out the slice cleanups DeRegisterPlugin scheduled, until ctx
// is done. It closes the driver connections when it returns.
func (m *Manager) Run(ctx context.Context) error {
	defer m.closeDrivers()
	if m.healthErr != nil {
		klog.FromContext(ctx).Error(m.healthErr, "Failed to load the DRA health checkpoint, proceeding with no device health")
	}
	m.wipe(ctx, "")
	tick := m.cfg.Clock.NewTimer(m.cfg.ReconcilePeriod)
	defer tick.Stop()
	for {
		m.mu.Lock()
		later := m.wipeLater
		m.wipeLater = nil
		m.mu.Unlock()
		for _, name := range later {
			m.wipe(ctx, name)
		}
		select {
		case <-ctx.Done():
			return nil
		case name := <-m.wipeCh:
			m.wipe(ctx, name)
		case <-tick.C():
			m.Reconcile(ctx)
			tick.Reset(m.cfg.ReconcilePeriod)
		}
	}
}

// Reconcile unprepares the claims of pods that are no longer active (gone
// while the agent was down, or whose unprepare failed), once the sources
// are ready. Errors are logged; the next pass retries.
func (m *Manager) Reconcile(ctx context.Context) {
	if m.cfg.ActivePods == nil || !m.cfg.SourcesReady() {
		return
	}
	active := map[string]bool{}
	for _, p := range m.cfg.ActivePods() {
		active[string(p.UID)] = true
	}
	m.mu.Lock()
	gone := map[string]string{} // pod UID -> namespace
	for _, c := range m.claims {
		for uid := range c.PodUIDs {
			if !active[uid] {
				gone[uid] = c.Namespace
			}
		}
	}
	m.mu.Unlock()
	for uid := range gone {
		if err := m.unprepare(ctx, types.UID(uid)); err != nil {
			klog.FromContext(ctx).Info("Unpreparing the claims of a gone pod failed, will retry", "podUID", uid, "err", err)
		}
	}
}

// podClaimNames returns the names of the ResourceClaims pod uses: those of
// spec.resourceClaims (generated ones from status.resourceClaimStatuses;
// one not generated yet is an error, one the controller decided not to
// create is skipped) and the claim of status.extendedResourceClaimStatus.
// owner says, per name, that the claim must be owned by the pod.
func podClaimNames(pod *v1.Pod) (names []string, owner map[string]bool, err error) {
	owner = map[string]bool{}
	for i := range pod.Spec.ResourceClaims {
		name, mustOwn, err := claimObjectName(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, nil, err
		}
		if name == nil {
			continue
		}
		names = append(names, *name)
		owner[*name] = mustOwn
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		names = append(names, st.ResourceClaimName)
	}
	return names, owner, nil
}

// allPrepared says every claim of names is prepared and held by pod, so a
// sync of a running pod needs no API call.
func (m *Manager) allPrepared(pod *v1.Pod, names []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		c := m.claims[pod.Namespace+"/"+n]
		if c == nil || !c.Prepared {
			return false
		}
		if _, ok := c.PodUIDs[string(pod.UID)]; !ok {
			return false
		}
	}
	return true
}

// save writes the checkpoint; m.mu must be held.
func (m *Manager) save() error {
	keys := slices.Sorted(maps.Keys(m.claims))
	list := make([]claimState, 0, len(keys))
	for _, k := range keys {
		list = append(list, m.claims[k].claimState)
	}
	return writeCheckpoint(m.path, list)
}

// driverStates returns, per driver of c's allocation, an empty state. A
// result that skips node operations is refused: nodekit, as upstream
// kubelet with DRAOptionalNodeOperations off (its default), calls every
// driver.
func driverStates(c *resourceapi.ResourceClaim) (map[string]driverState, error) {
	if c.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	out := map[string]driverState{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if len(r.SkipNodeOperations) > 0 {
			return nil, errors.New("DRAOptionalNodeOperations feature gate is disabled on kubelet")
		}
		out[r.Driver] = driverState{}
	}
	return out, nil
}
