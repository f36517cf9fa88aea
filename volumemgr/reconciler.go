package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/poddir"
)

const (
	// Retry back-off of failed set-ups and tear-downs, as upstream's
	// operation executor.
	initialRetry = 500 * time.Millisecond
	maxRetry     = 2*time.Minute + 2*time.Second
	// minRefresh keeps a plugin that asks for a refresh in the past from
	// being called in a loop.
	minRefresh = time.Second
	// operationTimeout bounds one SetUp or TearDown.
	operationTimeout = 2 * time.Minute
	// maxParallelOps bounds the operations one Reconcile runs at a time.
	maxParallelOps = 8
)

// podDirOf is ROOT/pods/UID.
func podDirOf(root string, uid types.UID) string { return poddir.Pod(root, uid) }

// Run reconciles every reconcile period, and at once when a pod is added or
// removed, until ctx is done; then it returns ctx.Err(). Volumes stay
// mounted when it stops: stopping the agent is not a reason to unmount.
func (m *Manager) Run(ctx context.Context) error {
	t := m.clock.NewTicker(m.cfg.ReconcilePeriod)
	defer t.Stop()
	for {
		m.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		case <-m.wake:
		}
	}
}

// op is one SetUp or TearDown the reconciler decided on.
type op struct {
	uid     types.UID
	pod     *v1.Pod // nil for a tear-down
	vol     *volumeState
	tear    bool
	refresh bool   // a refresh of a volume already set up
	label   string // SetUpRequest.SELinuxLabel
}

// Reconcile is one pass of the reconciler: on its first call it scans the
// pod directories and the mount table for volumes left by an earlier run;
// then it sets up the desired volumes that are not set up (or are due for a
// refresh), tears down the volumes of pods no longer desired and removes
// their directories. It blocks until the operations it started are done
// (they run in parallel, each bounded by a timeout); calls are serialized.
// Failures are retried at later calls with exponential back-off; a failed
// set-up is reported as a FailedMount event on the pod.
func (m *Manager) Reconcile(ctx context.Context) {
	m.reconcileMu.Lock()
	defer m.reconcileMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	m.scanOnce(ctx)
	if m.tokens != nil {
		m.tokens.gc()
	}
	ops := m.plan()
	sem := make(chan struct{}, maxParallelOps)
	var wg sync.WaitGroup
	for _, o := range ops {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.run(ctx, o)
		})
	}
	wg.Wait()
	m.finishPods(ctx)
}

// plan decides the operations of this pass.
func (m *Manager) plan() []op {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var ops []op
	for uid, d := range m.desired {
		a := m.actual[uid]
		if a == nil {
			a = &actualPod{volumes: map[string]*volumeState{}}
			m.actual[uid] = a
		}
		a.claimed = true
		for name, vol := range d.volumes {
			if _, ok := d.unsupported[name]; ok {
				continue // no plugin: WaitForAttachAndMount reports it
			}
			v := a.volumes[name]
			if v == nil {
				v = &volumeState{name: name}
				a.volumes[name] = v
			}
			if v.spec == nil {
				v.spec = vol
				if p := m.pluginFor(vol); p != nil && (v.plugin == nil || v.plugin.Name() != p.Name()) {
					v.plugin = p
					v.dir = VolumeDir(m.podDir(uid), p.Name(), name)
				}
			}
			switch {
			case !v.setUp && !now.Before(v.retryAt):
				ops = append(ops, op{uid: uid, pod: d.pod, vol: v, label: d.labels[name]})
			case v.setUp && v.refresh && (d.refreshNow || !now.Before(v.refreshAt)):
				ops = append(ops, op{uid: uid, pod: d.pod, vol: v, refresh: true, label: d.labels[name]})
			}
		}
		d.refreshNow = false
	}
	for uid, a := range m.actual {
		if _, ok := m.desired[uid]; ok || (!a.claimed && !m.released[uid]) {
			continue
		}
		for _, v := range a.volumes {
			if !now.Before(v.retryAt) {
				ops = append(ops, op{uid: uid, vol: v, tear: true})
			}
		}
	}
	return ops
}

// run carries out one operation and records its result.
func (m *Manager) run(parent context.Context, o op) {
	ctx, cancel := context.WithTimeout(parent, operationTimeout)
	defer cancel()
	log := logger(ctx).WithValues("podUID", o.uid, "volume", o.vol.name)
	if o.tear {
		err := m.tearDown(ctx, o)
		m.mu.Lock()
		defer m.mu.Unlock()
		if err != nil && parent.Err() != nil {
			return
		}
		if err != nil {
			log.Error(err, "Unable to tear down a volume; will retry")
			m.failLocked(o.vol, err)
			return
		}
		log.V(2).Info("Volume torn down")
		if a := m.actual[o.uid]; a != nil && a.volumes[o.vol.name] == o.vol {
			delete(a.volumes, o.vol.name)
		}
		m.notifyLocked(o.uid)
		return
	}

	res, err := m.setUp(ctx, o)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && parent.Err() != nil {
		return // the agent is stopping: nothing to report
	}
	var pending *PendingError
	if err != nil && !o.refresh && errors.As(err, &pending) {
		log.V(2).Info("Volume waits for its attachment; will retry", "err", err)
		m.failPendingLocked(o.vol, err)
		m.notifyLocked(o.uid)
		return
	}
	var unprocessed *ProcessError
	if err != nil && !o.refresh && errors.As(err, &unprocessed) {
		log.V(2).Info("Unable to process a volume; will retry", "err", err)
		m.failUnprocessedLocked(o.vol, err) // process.go
		m.notifyLocked(o.uid)
		return
	}
	if err != nil {
		if o.refresh {
			log.Error(err, "Unable to refresh a volume; keeping its current content")
		} else {
			log.V(2).Info("Unable to set up a volume; will retry", "err", err)
		}
		m.events.Eventf(o.pod, v1.EventTypeWarning, "FailedMount", "%s", failedMountMessage(o.vol.name, err))
		if o.vol.unattached || o.vol.unprocessed {
			// The wait on the attachment (or the volume's processing) is
			// over: the set-up's own back-off starts afresh, as
			// upstream's mount operation follows the attach verification
			// with a back-off of its own.
			o.vol.backoff = 0
		}
		m.failLocked(o.vol, err)
		o.vol.unattached, o.vol.unprocessed = false, false
		if o.vol.setUp {
			o.vol.refreshAt = o.vol.retryAt
		}
		m.notifyLocked(o.uid)
		return
	}
	now := m.clock.Now()
	v := o.vol
	if !v.setUp {
		log.V(2).Info("Volume set up")
	}
	v.setUp, v.err, v.backoff, v.retryAt, v.unattached, v.unprocessed = true, nil, 0, time.Time{}, false, false
	v.path, v.readOnly, v.refresh, v.device, v.relabel = res.Path, res.ReadOnly, res.Refresh, res.Device, res.SELinuxRelabel
	if v.path == "" {
		v.path = v.dir
	}
	m.adoptFoundDeviceLocked(o.uid, v)
	if v.refresh {
		next := now.Add(m.cfg.RefreshPeriod)
		if !res.RefreshBy.IsZero() && res.RefreshBy.Before(next) {
			next = res.RefreshBy
		}
		v.refreshAt = maxTime(next, now.Add(minRefresh))
	}
	m.notifyLocked(o.uid)
}

// adoptFoundDeviceLocked forgets the block volume found on disk whose
// entry (POD/volumeDevices/PLUGIN/NAME) v's set-up returned as its device:
// it is v, set up again, as upstream's reconstructed volumes are matched to
// the desired ones by their unique name.
func (m *Manager) adoptFoundDeviceLocked(uid types.UID, v *volumeState) {
	if v.device != "" {
		m.forgetFoundLocked(uid, v, v.device)
	}
}

// forgetFoundLocked forgets the volumes of pod uid found on disk at dir
// and not claimed by a pod volume: v, the pod's volume, is that one.
func (m *Manager) forgetFoundLocked(uid types.UID, v *volumeState, dir string) {
	a := m.actual[uid]
	if a == nil {
		return
	}
	for name, f := range a.volumes {
		if f != v && f.spec == nil && f.dir == dir {
			delete(a.volumes, name)
		}
	}
}

// setUp calls the plugin's SetUp, once the volume passed the in-use gate
// if a controller attaches it.
func (m *Manager) setUp(ctx context.Context, o op) (*SetUpResult, error) {
	if o.vol.plugin == nil {
		return nil, fmt.Errorf("no volume plugin matched volume %q", o.vol.name)
	}
	if !o.refresh {
		if err := m.nameDir(ctx, o); err != nil {
			return nil, err
		}
		if err := m.attachGate(ctx, o); err != nil { // inuse.go
			return nil, err
		}
	}
	res, err := o.vol.plugin.SetUp(ctx, &SetUpRequest{Pod: o.pod, Volume: o.vol.spec, PodDir: m.podDir(o.uid), Dir: o.vol.dir, SELinuxLabel: o.label})
	if err == nil && res == nil {
		err = fmt.Errorf("plugin %s returned no result", o.vol.plugin.Name())
	}
	if err == nil {
		err = checkVolumeMode(o.pod, o.vol.name, res.Device != "")
	}
	return res, err
}

// nameDir asks a DirNamer plugin, once per volume, for the name of the
// volume's directory and moves the volume there: a volume found on disk
// in that directory (unclaimed: its directory is not a pod volume's name)
// is this one, and is forgotten, as upstream matches reconstructed volumes
// to the desired ones by their unique name.
func (m *Manager) nameDir(ctx context.Context, o op) error {
	dn, ok := o.vol.plugin.(DirNamer)
	m.mu.Lock()
	named := o.vol.dirNamed
	m.mu.Unlock()
	if !ok || named {
		return nil
	}
	name, err := dn.VolumeDirName(ctx, o.pod, o.vol.spec)
	if err != nil {
		return err
	}
	if name != "" && (name != filepath.Base(name) || name == "." || name == "..") {
		return fmt.Errorf("plugin %s named the directory of volume %q %q, not a file name", o.vol.plugin.Name(), o.vol.name, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := o.vol
	v.dirNamed = true
	if name == "" {
		return nil
	}
	v.dir = VolumeDir(m.podDir(o.uid), v.plugin.Name(), name)
	m.forgetFoundLocked(o.uid, v, v.dir)
	return nil
}

// failLocked records an error and schedules the retry.
func (m *Manager) failLocked(v *volumeState, err error) {
	v.err = err
	v.backoff = nextBackoff(v.backoff)
	v.retryAt = m.clock.Now().Add(v.backoff)
}

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return initialRetry
	}
	return min(2*d, maxRetry)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tearDown removes the subPath bind mounts of the volume, then has the
// plugin tear it down.
func (m *Manager) tearDown(ctx context.Context, o op) error {
	podDir := m.podDir(o.uid)
	if err := cleanSubPaths(ctx, m.mounter, podDir, o.vol.name); err != nil {
		return err
	}
	if o.vol.plugin == nil {
		return nil // never set up: nothing on disk
	}
	return o.vol.plugin.TearDown(ctx, &TearDownRequest{
		PodUID: o.uid, Volume: o.vol.spec, VolumeName: o.vol.name, PodDir: podDir, Dir: o.vol.dir,
	})
}

// finishPods removes the volume directories of pods that are no longer
// desired and have no volume left, then forgets them.
func (m *Manager) finishPods(ctx context.Context) {
	m.mu.Lock()
	var done []types.UID
	now := m.clock.Now()
	for uid, a := range m.actual {
		if _, ok := m.desired[uid]; ok || len(a.volumes) > 0 || (!a.claimed && !m.released[uid]) {
			continue
		}
		if now.Before(m.podRetry[uid]) {
			continue
		}
		done = append(done, uid)
	}
	m.mu.Unlock()
	for _, uid := range done {
		err := m.removePodVolumeDirs(ctx, uid)
		m.mu.Lock()
		if err != nil {
			logger(ctx).Error(err, "Unable to remove the volume directories of a pod; will retry", "podUID", uid)
			m.podBackoff[uid] = nextBackoff(m.podBackoff[uid])
			m.podRetry[uid] = now.Add(m.podBackoff[uid])
		} else if a := m.actual[uid]; a != nil && len(a.volumes) == 0 {
			if _, ok := m.desired[uid]; !ok {
				delete(m.actual, uid)
				delete(m.released, uid)
				delete(m.podRetry, uid)
				delete(m.podBackoff, uid)
				m.notifyLocked(uid)
			}
		}
		m.mu.Unlock()
	}
}

// removePodVolumeDirs removes PODDIR/volume-subpaths, the plugin
// directories under PODDIR/volumes and PODDIR/plugins when they are empty,
// and those two directories. Directories of volumes the agent does not know
// (a plugin it lacks) are left in place.
func (m *Manager) removePodVolumeDirs(ctx context.Context, uid types.UID) error {
	podDir := m.podDir(uid)
	if err := cleanAllSubPaths(ctx, m.mounter, podDir); err != nil {
		return err
	}
	var errs []error
	for _, top := range []string{"volumes", "volumeDevices", "plugins"} {
		dir := filepath.Join(podDir, top)
		entries, err := readDirIfExists(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				errs = append(errs, removeEmpty(filepath.Join(dir, e.Name())))
			}
		}
		errs = append(errs, removeEmpty(dir))
	}
	return errors.Join(errs...)
}
