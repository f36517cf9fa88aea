package statusmgr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/podstatus"
	"github.com/nodekit/nodekit/internal/podutil"
)

// job is one pod's share of a sync: publish its status, delete it, or both
// (publish first).
type job struct {
	uid types.UID
	// pod is the pod as the manager knows it; target is the API object the
	// status goes to (pod itself, or a static pod's mirror pod).
	pod, target *v1.Pod
	status      v1.PodStatus
	version     uint64
	publish     bool
	remove      bool
	// visit is the index of the pod's visit (plan's visited).
	visit int
}

// SyncOnce publishes every status newer than the version the sink last
// accepted for that pod, then deletes the pods that are finished (see
// PodResourcesReclaimed). It blocks on the sink. A failed write is retried by
// the next SyncOnce or Resync; the returned error joins the failures.
func (m *Manager) SyncOnce(ctx context.Context) error { return m.sync(ctx, false) }

// Resync is SyncOnce, and also republishes statuses the sink already
// accepted: every one when Config.Pods is nil, else those that differ from
// the status of the pod Config.Pods returns (or its mirror pod's). It repairs
// statuses overwritten or lost on the other side.
func (m *Manager) Resync(ctx context.Context) error { return m.sync(ctx, true) }

// Run publishes statuses as they change and resyncs every ResyncInterval,
// until ctx is done; then it returns ctx.Err(). After a failure it tries
// again after 200ms, doubling up to 7s, until a sync succeeds. Failures are
// logged with the logger from ctx.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	resync := m.clock.NewTimer(m.resync)
	defer resync.Stop()
	retry := m.clock.NewTimer(backoffMax)
	retry.Stop()
	defer retry.Stop()
	var backoff time.Duration
	for {
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.notify:
			err = m.SyncOnce(ctx)
		case <-retry.C():
			err = m.SyncOnce(ctx)
		case <-resync.C():
			err = m.Resync(ctx)
			resync.Reset(m.resync)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		retry.Stop()
		if err == nil {
			backoff = 0
			continue
		}
		backoff = nextBackoff(backoff)
		retry.Reset(backoff)
		logger.Error(err, "Publishing pod statuses failed; will retry", "retryIn", backoff)
	}
}

func (m *Manager) sync(ctx context.Context, all bool) error {
	logger := klog.FromContext(ctx)
	m.syncMu.Lock()
	defer m.syncMu.Unlock()

	jobs, live, visited := m.plan(all)
	defer m.settle(visited)
	var errs []error
	var errMu sync.Mutex
	failed := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		errs = append(errs, err)
	}
	run := func(j *job) {
		if j.publish {
			m.refresh(j, &visited[j.visit])
			if err := m.sink.SetPodStatus(ctx, j.target, &j.status); err != nil {
				failed(fmt.Errorf("publish status of pod %s/%s (version %d): %w", j.pod.Namespace, j.pod.Name, j.version, err))
				return
			}
			m.sentMu.Lock()
			m.sent[j.target.UID] = j.version
			m.sentMu.Unlock()
			logger.V(4).Info("Published pod status", "pod", klog.KObj(j.target), "podUID", j.target.UID, "version", j.version, "phase", j.status.Phase)
		}
		if j.remove {
			if err := m.sink.DeletePod(ctx, j.pod); err != nil {
				failed(fmt.Errorf("delete pod %s/%s: %w", j.pod.Namespace, j.pod.Name, err))
				return
			}
			m.markDeleted(j.uid)
			logger.V(3).Info("Deleted finished pod", "pod", klog.KObj(j.pod), "podUID", j.pod.UID)
		}
	}
	// Up to m.parallel jobs at once, started in the plan's order.
	sem := make(chan struct{}, m.parallel)
	var wg sync.WaitGroup
	for i := range jobs {
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			wg.Wait()
			return errors.Join(append(errs, err)...)
		}
		if m.parallel == 1 {
			run(&jobs[i])
			<-sem
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			run(&jobs[i])
		})
	}
	wg.Wait()
	if all {
		for uid := range m.sent {
			if !live[uid] {
				delete(m.sent, uid)
			}
		}
	}
	return errors.Join(errs...)
}

// entrySnapshot is an entry read under the lock.
type entrySnapshot struct {
	uid       types.UID
	pod       *v1.Pod
	status    v1.PodStatus
	version   uint64
	reclaimed bool
}

// visit is a pod a sync looked at, and whether it stays dirty whatever the
// sync's outcome.
type visit struct {
	uid     types.UID
	target  types.UID // where its status goes; "" if it waits for a mirror
	version uint64
	keep    bool
}

// snapshot reads the entries a sync looks at: all of them, or the dirty
// ones.
func (m *Manager) snapshot(all bool) []entrySnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	var snap []entrySnapshot
	add := func(uid types.UID, e *podEntry) {
		if e != nil && !e.deleted {
			snap = append(snap, entrySnapshot{uid, e.pod, e.status, e.version, e.reclaimed})
		} else {
			delete(m.dirty, uid)
		}
	}
	if all {
		snap = make([]entrySnapshot, 0, len(m.entries))
		for uid, e := range m.entries {
			add(uid, e)
		}
		return snap
	}
	snap = make([]entrySnapshot, 0, len(m.dirty))
	for uid := range m.dirty {
		add(uid, m.entries[uid])
	}
	return snap
}

// settle takes out of the dirty set the pods a sync left with nothing to
// do: their version (unchanged since) accepted by the sink, not static (a
// mirror may appear or be replaced without a call to the manager), not
// reclaimed while Config.Pods may show their deletion first. Called with
// syncMu held.
func (m *Manager) settle(visited []visit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range visited {
		e := m.entries[v.uid]
		if e == nil || e.deleted {
			delete(m.dirty, v.uid)
			continue
		}
		// With Config.Pods, a reclaimed pod's deletion may show there first.
		if v.keep || v.target == "" || e.version != v.version || (e.reclaimed && m.pods != nil) {
			continue
		}
		if sent, ok := m.sent[v.target]; ok && sent >= v.version {
			delete(m.dirty, v.uid)
		}
	}
}

// plan decides what to publish and delete. The getters are called without
// the manager's lock. live holds the UIDs statuses are published under;
// visited, the pods looked at.
func (m *Manager) plan(all bool) ([]job, map[types.UID]bool, []visit) {
	snap := m.snapshot(all)
	visited := make([]visit, 0, len(snap))

	live := make(map[types.UID]bool, len(snap))
	var jobs []job
	for _, s := range snap {
		pod := s.pod
		// api is the API server's view of the object the status goes to,
		// when known, to compare on resync.
		var api *v1.Pod
		if m.pods != nil {
			if p, ok := m.pods.GetPodByUID(s.uid); ok {
				pod, api = p, p
			}
		}
		static := podutil.IsStatic(s.pod)
		visited = append(visited, visit{uid: s.uid, version: s.version, keep: static})
		target := pod
		if static && m.mirrors != nil {
			// With mirror pods (an API server), a static pod's status goes to
			// its mirror — only to a mirror of this very version: a stale
			// one belongs to the previous manifest. Without mirrors the
			// static pod itself is published, so a vendor's sink sees it.
			mp, ok := m.mirrors.GetMirrorPod(podutil.FullName(s.pod))
			if !ok || mp.Annotations[v1.MirrorPodAnnotationKey] != s.pod.Annotations[annotationConfigHash] {
				continue
			}
			target, api = mp, mp
		}
		if cu, ok := m.sink.(catchUp); ok && api != nil {
			cu.CaughtUp(api)
		}
		visited[len(visited)-1].target = target.UID
		live[target.UID] = true
		sent, ok := m.sent[target.UID]
		publish := !ok || sent < s.version
		if !publish && all {
			publish = api == nil || !matchesAPI(s.pod, &api.Status, &s.status)
		}
		remove := s.reclaimed && !static && !podutil.IsMirror(pod) && pod.DeletionTimestamp != nil && podstatus.IsTerminal(s.status.Phase)
		if publish || remove {
			jobs = append(jobs, job{uid: s.uid, pod: pod, target: target, status: s.status, version: s.version,
				publish: publish, remove: remove, visit: len(visited) - 1})
		}
	}
	slices.SortFunc(jobs, func(a, b job) int {
		return cmp.Or(cmp.Compare(a.pod.Namespace, b.pod.Namespace), cmp.Compare(a.pod.Name, b.pod.Name), cmp.Compare(a.uid, b.uid))
	})
	return jobs, live, visited
}

// refresh gives a job about to be published the pod's newest status, when
// it changed after the sync was planned. A sync writes one pod after
// another, each waiting its turn on the sink (the API client's rate
// limit): in a burst, a pod planned as Pending has often started by its
// turn, and the status it is in then is written, once, instead of the
// Pending one followed by the Running one in the next sync. Statuses only
// move forwards (see updateLocked), so the newer one is what a second
// write would publish; the remove decision of the plan stands (a terminal
// status stays terminal).
func (m *Manager) refresh(j *job, v *visit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[j.uid]
	if e == nil || e.deleted || e.version <= j.version {
		return
	}
	j.status, j.version = e.status, e.version
	v.version = e.version
}

// matchesAPI reports whether the API server's status agrees with ours on
// what the node agent owns.
func matchesAPI(pod *v1.Pod, api, ours *v1.PodStatus) bool {
	a := api.DeepCopy()
	normalize(pod, a)
	return sameKubeletStatus(a, ours)
}

func (m *Manager) markDeleted(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[uid]; e != nil {
		e.deleted = true
	}
}
