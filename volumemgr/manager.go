package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/selinux"
)

// Defaults, as upstream where it has them.
const (
	// DefaultReconcilePeriod is how often Run reconciles when nothing wakes
	// it (upstream's reconciler loop period).
	DefaultReconcilePeriod = 100 * time.Millisecond
	// DefaultRefreshPeriod is how often configMap, secret, downwardAPI and
	// projected volumes are rewritten from their sources (the kubelet's
	// default sync frequency).
	DefaultRefreshPeriod = time.Minute
	// DefaultMountTimeout bounds WaitForAttachAndMount and WaitForUnmount
	// (upstream's podAttachAndMountTimeout).
	DefaultMountTimeout = 2*time.Minute + 3*time.Second
)

// Config configures a Manager. RootDir is required; everything else has a
// default.
type Config struct {
	// RootDir is the agent's root directory; pod directories are
	// ROOT/pods/UID (syncloop.PodDir).
	RootDir string
	// Objects serves ConfigMaps and Secrets (podopts.Client or Client fit).
	// Nil fails configMap and secret volumes and sources (standalone).
	Objects ObjectGetter
	// Tokens serves service-account tokens. Nil fails serviceAccountToken
	// projections (standalone).
	Tokens TokenRequester
	// Mounter mounts tmpfs and bind mounts; nil means HostMounter{}.
	Mounter Mounter
	// Clock times refreshes, retries, token lifetimes and the waits; nil
	// means the real clock.
	Clock clock.WithTicker
	// Events receives FailedMount warnings; nil discards them.
	Events EventRecorder
	// Plugins are tried before the built-in ones, so a vendor may add a
	// volume type or replace a built-in one.
	Plugins []Plugin
	// NodeAllocatable stands in for cpu, memory and ephemeral-storage limits
	// that a container does not set (downwardAPI resourceFieldRef), and
	// bounds memory-backed volumes.
	NodeAllocatable v1.ResourceList
	// ContainerEnv resolves a container's environment for subPathExpr; nil
	// uses the literal values of the container's env (no valueFrom).
	ContainerEnv func(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]nodekit.EnvVar, error)
	// RecursiveReadOnly tells whether a pod's runtime handler supports
	// recursive read-only mounts (recursiveReadOnly IfPossible and
	// Enabled); nil: none does (IfPossible mounts plain read-only, Enabled
	// fails the container, as upstream on such a runtime).
	RecursiveReadOnly RecursiveReadOnlyChecker
	// SELinux is the host's SELinux (labels of the volumes' containers,
	// SetUpRequest.SELinuxLabel); nil means the real host's.
	SELinux SELinux
	// ReconcilePeriod, RefreshPeriod and MountTimeout default to the
	// Default* constants.
	ReconcilePeriod time.Duration
	RefreshPeriod   time.Duration
	MountTimeout    time.Duration
}

// Manager owns the volumes of the pods on the node: the desired state (the
// pods it was given and the volumes their containers mount), the actual
// state (what is set up on disk), and the reconciler that converges the two.
// All methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	mounter Mounter
	clock   clock.WithTicker
	events  EventRecorder
	plugins []Plugin
	tokens  *tokenCache

	// reconcileMu serializes Reconcile.
	reconcileMu sync.Mutex

	mu sync.Mutex
	// desired: the pods whose volumes must be set up.
	desired map[types.UID]*desiredPod
	// actual: what is set up (or was found on disk), by pod and volume.
	actual map[types.UID]*actualPod
	// released: pods found on disk that the caller said are gone.
	released map[types.UID]bool
	scanned  bool
	// podRetry and podBackoff space the attempts to remove a gone pod's
	// directories.
	podRetry   map[types.UID]time.Time
	podBackoff map[types.UID]time.Duration
	// waiting holds, by pod, what the callers waiting on that pod's
	// actual state wait for: a change of it wakes only them, not every
	// pod's worker (all of a burst's pods wait here at once).
	waiting map[types.UID]*podWaiters
	wake    chan struct{}
	// reportedInUse: the attachable volumes the node's status lists in
	// volumesInUse (MarkVolumesAsReportedInUse; inuse.go).
	reportedInUse map[v1.UniqueVolumeName]bool
}

type desiredPod struct {
	pod *v1.Pod
	// volumes are the pod volumes some container mounts, by name.
	volumes map[string]*v1.Volume
	// refreshNow asks for the refreshable volumes to be rewritten at once
	// (the pod's labels or annotations changed).
	refreshNow bool
	// unsupported are the volumes no plugin handles or whose containers'
	// SELinux labels fail (selinux.go), with the error
	// WaitForAttachAndMount reports for each; the reconciler skips them.
	unsupported map[string]error
	// labels are the volumes' SELinux labels (SetUpRequest.SELinuxLabel).
	labels map[string]string
}

type actualPod struct {
	// claimed is set once the pod was desired during this run: its volumes
	// go when it stops being desired. Volumes found on disk of a pod never
	// claimed wait for RemovePod or CleanupPods.
	claimed bool
	volumes map[string]*volumeState
}

type volumeState struct {
	name   string
	plugin Plugin
	dir    string
	// spec is the pod volume (nil when found on disk and not yet claimed).
	spec *v1.Volume
	// setUp: SetUp succeeded during this run; path and readOnly are valid.
	setUp    bool
	path     string
	readOnly bool
	// dirNamed: the plugin, a DirNamer, named dir (once per volume).
	dirNamed bool
	// device is the host path of a block volume's device (SetUpResult.Device).
	device string
	// relabel is SetUpResult.SELinuxRelabel.
	relabel bool
	// refresh and refreshAt: SetUp runs again at refreshAt.
	refresh   bool
	refreshAt time.Time
	// err is the last SetUp or TearDown error; no new attempt before
	// retryAt.
	err     error
	retryAt time.Time
	backoff time.Duration
	// unique is the volume's unique name when a controller attaches it
	// (AttachablePlugin), uniqueKnown once the plugin was asked;
	// unattached: the last set-up waited on the attachment (PendingError).
	unique      v1.UniqueVolumeName
	uniqueKnown bool
	unattached  bool
	// unprocessed: the last set-up failed with a ProcessError.
	unprocessed bool
}

// New checks cfg and returns a Manager. It does no I/O: the pod directories
// and the mount table are scanned by the first Reconcile.
func New(cfg Config) (*Manager, error) {
	if cfg.RootDir == "" {
		return nil, errors.New("volumemgr: Config.RootDir is required")
	}
	if cfg.Mounter == nil {
		cfg.Mounter = HostMounter{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Events == nil {
		cfg.Events = discardEvents{}
	}
	if cfg.SELinux == nil {
		cfg.SELinux = selinux.Host{}
	}
	if cfg.ReconcilePeriod <= 0 {
		cfg.ReconcilePeriod = DefaultReconcilePeriod
	}
	if cfg.RefreshPeriod <= 0 {
		cfg.RefreshPeriod = DefaultRefreshPeriod
	}
	if cfg.MountTimeout <= 0 {
		cfg.MountTimeout = DefaultMountTimeout
	}
	m := &Manager{
		cfg: cfg, mounter: cfg.Mounter, clock: cfg.Clock, events: cfg.Events,
		desired: map[types.UID]*desiredPod{}, actual: map[types.UID]*actualPod{},
		released: map[types.UID]bool{},
		podRetry: map[types.UID]time.Time{}, podBackoff: map[types.UID]time.Duration{},
		waiting: map[types.UID]*podWaiters{}, wake: make(chan struct{}, 1),
	}
	if cfg.Tokens != nil {
		m.tokens = newTokenCache(cfg.Tokens, cfg.Clock)
	}
	h := &host{mounter: cfg.Mounter, objects: cfg.Objects, tokens: m.tokens, clock: cfg.Clock, allocatable: cfg.NodeAllocatable}
	seen := map[string]bool{}
	for i, p := range cfg.Plugins {
		if p == nil {
			return nil, fmt.Errorf("volumemgr: Config.Plugins[%d] is nil", i)
		}
		if seen[p.Name()] {
			return nil, fmt.Errorf("volumemgr: two plugins named %q", p.Name())
		}
		seen[p.Name()] = true
	}
	m.plugins = append(slices.Clone(cfg.Plugins), builtinPlugins(h)...)
	return m, nil
}

// podDir is ROOT/pods/UID.
func (m *Manager) podDir(uid types.UID) string {
	return podDirOf(m.cfg.RootDir, uid)
}

// pluginFor returns the plugin for vol, or nil.
func (m *Manager) pluginFor(vol *v1.Volume) Plugin {
	for _, p := range m.plugins {
		if p.CanSupport(vol) {
			return p
		}
	}
	return nil
}

// pluginNamed returns the first plugin called name, or nil.
func (m *Manager) pluginNamed(name string) Plugin {
	for _, p := range m.plugins {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// mountedVolumes returns the pod volumes that some container (init,
// regular or ephemeral) mounts, by name; the others are not set up, as
// upstream.
func mountedVolumes(pod *v1.Pod) map[string]*v1.Volume {
	used := map[string]bool{}
	for _, ms := range allContainerMounts(pod) {
		for _, vm := range ms {
			used[vm.Name] = true
		}
	}
	// A block device (volumeDevices) needs its volume as much as a mount
	// does; a plugin that gives no device (SetUpResult.Device) fails its
	// set-up, and the pod waits with an error rather than running without
	// its device.
	for _, c := range pod.Spec.InitContainers {
		markDevices(used, c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		markDevices(used, c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		markDevices(used, c.VolumeDevices)
	}
	out := map[string]*v1.Volume{}
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; used[v.Name] {
			out[v.Name] = v
		}
	}
	return out
}

func markDevices(used map[string]bool, devices []v1.VolumeDevice) {
	for _, d := range devices {
		used[d.Name] = true
	}
}

// AddPod adds pod to the desired state, or updates it (a change of labels
// or annotations rewrites its downwardAPI and projected volumes at the next
// Reconcile). It does not block; the reconciler sets the volumes up. The
// Manager keeps pod: the caller must not change it afterwards.
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.desired[pod.UID]
	if ok && (!maps.Equal(d.pod.Labels, pod.Labels) || !maps.Equal(d.pod.Annotations, pod.Annotations)) {
		d.refreshNow = true
	}
	if !ok {
		d = &desiredPod{}
		m.desired[pod.UID] = d
	}
	d.pod = pod
	d.volumes = mountedVolumes(pod)
	prev := d.labels
	d.unsupported, d.labels = nil, nil
	for name, vol := range d.volumes {
		err := noPluginError(vol)
		if m.pluginFor(vol) != nil {
			var label string
			if label, err = volumeSELinuxLabel(m.cfg.SELinux, pod, vol); label != "" {
				if d.labels == nil {
					d.labels = map[string]string{}
				}
				// The label is the one first computed for the pod's
				// volume, as upstream fixes it when the volume enters
				// its desired state: options without a level translate
				// to random categories at each call on a real host.
				if p := prev[name]; p != "" {
					label = p
				}
				d.labels[name] = label
			}
		}
		if err != nil {
			if d.unsupported == nil {
				d.unsupported = map[string]error{}
			}
			d.unsupported[name] = err
		}
	}
	delete(m.released, pod.UID)
	if a := m.actual[pod.UID]; a != nil {
		a.claimed = true
	}
	m.kick()
}

// kick wakes Run without blocking.
func (m *Manager) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// podWaiters is what the calls waiting on one pod's actual state share:
// changed is closed at its next change; n counts the calls holding it.
type podWaiters struct {
	changed chan struct{}
	n       int
}

// waitLocked returns the channel closed at the pod's next change; the
// caller calls the function returned, with m.mu held, once it stops
// waiting on it.
func (m *Manager) waitLocked(uid types.UID) (<-chan struct{}, func()) {
	w := m.waiting[uid]
	if w == nil {
		w = &podWaiters{changed: make(chan struct{})}
		m.waiting[uid] = w
	}
	w.n++
	return w.changed, func() {
		w.n--
		if w.n == 0 && m.waiting[uid] == w {
			delete(m.waiting, uid)
		}
	}
}

// notifyLocked tells the callers waiting on the pod that its actual state
// changed.
func (m *Manager) notifyLocked(uid types.UID) {
	if w := m.waiting[uid]; w != nil {
		close(w.changed)
		delete(m.waiting, uid)
	}
}

// notifyAllLocked tells every waiting caller that the actual state
// changed.
func (m *Manager) notifyAllLocked() {
	for uid := range m.waiting {
		m.notifyLocked(uid)
	}
}

// WaitForAttachAndMount adds pod to the desired state (see AddPod) and
// blocks until every volume its containers mount is set up, ctx is done or
// the mount timeout passes. The error then names the volumes that are not
// mounted and the last error of each. It is idempotent and cheap once the
// volumes are mounted. Run (or calls to Reconcile) must be running. The
// error wraps ctx.Err(), or context.DeadlineExceeded after the timeout.
func (m *Manager) WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error {
	if pod == nil {
		return nil
	}
	m.AddPod(pod)
	names := slices.Sorted(maps.Keys(mountedVolumes(pod)))
	if len(names) == 0 {
		return nil
	}
	if err := m.unprocessable(pod.UID, names); err != nil {
		return err
	}
	var timer clock.Timer
	for {
		m.mu.Lock()
		pending := m.unmountedLocked(pod.UID, names)
		unprocessed := m.unprocessedLocked(m.actual[pod.UID], pending) // process.go
		if len(pending) == 0 || unprocessed != nil {
			m.mu.Unlock()
			return unprocessed
		}
		changed, done := m.waitLocked(pod.UID)
		m.mu.Unlock()
		if timer == nil { // only when there is something to wait for
			timer = m.clock.NewTimer(m.cfg.MountTimeout)
			defer timer.Stop()
		}
		var cause error
		select {
		case <-changed:
		case <-ctx.Done():
			cause = ctx.Err()
		case <-timer.C():
			cause = context.DeadlineExceeded
		}
		m.mu.Lock()
		done()
		if cause == nil {
			m.mu.Unlock()
			continue
		}
		pending = m.unmountedLocked(pod.UID, names)
		reasons := m.errorsLocked(pod.UID, pending)
		unattached := m.unattachedLocked(m.actual[pod.UID], pending)
		m.mu.Unlock()
		if len(pending) == 0 {
			return nil
		}
		return fmt.Errorf("unmounted volumes=%v, unattached volumes=%v, failed to process volumes=[]: %w%s", pending, unattached, cause, reasons)
	}
}

// unprocessable fails at once, as upstream's desired-state populator does,
// when some of the named volumes have no plugin: waiting would not help.
// The error has upstream's shape: every volume not mounted, then those it
// could not process and why.
func (m *Manager) unprocessable(uid types.UID, names []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.desired[uid]
	if d == nil || len(d.unsupported) == 0 {
		return nil
	}
	var failed []string
	var errs []error
	for _, n := range names {
		if err, ok := d.unsupported[n]; ok {
			failed = append(failed, n)
			errs = append(errs, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("unmounted volumes=%v, unattached volumes=[], failed to process volumes=%v: %w",
		m.unmountedLocked(uid, names), failed, joinErrors(errs))
}

// unmountedLocked returns the names not yet set up.
func (m *Manager) unmountedLocked(uid types.UID, names []string) []string {
	var out []string
	a := m.actual[uid]
	for _, n := range names {
		if a == nil || a.volumes[n] == nil || !a.volumes[n].setUp {
			out = append(out, n)
		}
	}
	return out
}

// errorsLocked renders the last errors of the named volumes as
// `; volume "a": why`.
func (m *Manager) errorsLocked(uid types.UID, names []string) string {
	a := m.actual[uid]
	if a == nil {
		return ""
	}
	var b strings.Builder
	for _, n := range names {
		if v := a.volumes[n]; v != nil && v.err != nil {
			fmt.Fprintf(&b, "; volume %q: %v", n, v.err)
		}
	}
	return b.String()
}

// WaitForUnmount removes pod from the desired state (see RemovePod) and
// blocks until its volumes are torn down and their directories removed,
// ctx is done or the mount timeout passes. Call it once the pod's
// containers are stopped.
func (m *Manager) WaitForUnmount(ctx context.Context, pod *v1.Pod) error {
	if pod == nil {
		return nil
	}
	m.RemovePod(pod.UID)
	timer := m.clock.NewTimer(m.cfg.MountTimeout)
	defer timer.Stop()
	for {
		m.mu.Lock()
		if _, left := m.actual[pod.UID]; !left {
			m.mu.Unlock()
			return nil
		}
		changed, done := m.waitLocked(pod.UID)
		m.mu.Unlock()
		var cause error
		select {
		case <-changed:
		case <-ctx.Done():
			cause = ctx.Err()
		case <-timer.C():
			cause = context.DeadlineExceeded
		}
		m.mu.Lock()
		done()
		if cause == nil {
			m.mu.Unlock()
			continue
		}
		defer m.mu.Unlock()
		a := m.actual[pod.UID]
		if a == nil {
			return nil
		}
		names := slices.Sorted(maps.Keys(a.volumes))
		return fmt.Errorf("mounted volumes=%v: %w%s", names, cause, m.errorsLocked(pod.UID, names))
	}
}

// RemovePod removes the pod from the desired state: the reconciler tears
// its volumes down, including volumes found on disk at start-up. It does not
// block and may be called for unknown pods.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.desired, uid)
	if _, ok := m.actual[uid]; ok {
		m.released[uid] = true
	}
	m.kick()
}

// CleanupPods removes from the desired state every pod not in keep and lets
// the reconciler tear down the volumes of every pod not in keep, including
// those found on disk at start-up. keep must hold every pod whose
// containers may still run (the housekeeping's desired and known pods).
// Until it is first called, volumes found on disk whose pods were not added
// again are left alone, so a restarting agent keeps what it has not yet been
// told about.
func (m *Manager) CleanupPods(keep map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.desired {
		if !keep[uid] {
			delete(m.desired, uid)
		}
	}
	for uid := range m.actual {
		if !keep[uid] {
			m.released[uid] = true
		}
	}
	m.kick()
}

// MountedVolume describes a volume that is set up.
type MountedVolume struct {
	Name     string
	Plugin   string
	Path     string
	ReadOnly bool
}

// MountedVolumes returns the pod's volumes that are set up, sorted by name.
// The result belongs to the caller.
func (m *Manager) MountedVolumes(uid types.UID) []MountedVolume {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []MountedVolume
	if a := m.actual[uid]; a != nil {
		for _, v := range a.volumes {
			if v.setUp {
				out = append(out, MountedVolume{Name: v.name, Plugin: v.plugin.Name(), Path: v.path, ReadOnly: v.readOnly})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// logger returns the context's logger with the package name.
func logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithName("volumemgr")
}
