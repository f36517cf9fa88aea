package syncloop

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// KillPod terminates a pod the loop runs on behalf of a node-level policy
// (the eviction manager, a shutdown manager): the pod's worker moves to
// terminating at once, status edits the status recorded before the
// containers are stopped (phase Failed, reason Evicted, a DisruptionTarget
// condition...), and gracePeriodSeconds shortens — never lengthens — the
// pod's own grace period. The pod counts as evicted: once terminated, its
// containers, logs and directories may be removed although its API object
// stays (Failed), as upstream.
//
// With Config.InlineWorkers, KillPod runs the pod's worker steps itself
// before it waits. KillPod blocks until the pod has terminated, ctx is done, or one and a
// half grace periods (at least 10 s) have passed, which is an error.
func (l *Loop) KillPod(ctx context.Context, pod *v1.Pod, gracePeriodSeconds int64, status func(*v1.PodStatus)) error {
	if pod == nil {
		return fmt.Errorf("syncloop: KillPod of a nil pod")
	}
	p := pod
	if stored, ok := l.store.get(pod.UID); ok {
		p = stored // the newest spec the loop has
	}
	g := max(gracePeriodSeconds, 0)
	done := make(chan struct{})
	l.workers.Update(ctx, podUpdate{Type: UpdateKill, Pod: p, GracePeriod: &g, Status: status, Evict: true, Done: done})
	if l.workers.inline {
		// Inline workers run on the caller: step the pod's worker here
		// until it has terminated or has to wait for a newer status.
		for !isClosed(done) && l.workers.runOne(ctx, p.UID) {
		}
	}
	wait := max(time.Duration(g+g/2)*time.Second, 10*time.Second)
	timer := l.clock.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C():
		return fmt.Errorf("syncloop: pod %s/%s did not terminate within %s", pod.Namespace, pod.Name, wait)
	}
}

// PodCleanedUp reports whether a pod's worker has finished with it: its
// containers are stopped, its volumes unmounted and its status final. A
// pod the loop does not know is cleaned up.
func (l *Loop) PodCleanedUp(_ context.Context, pod *v1.Pod) bool {
	phase, known := l.workers.Phase(pod.UID)
	return !known || phase == phaseFinished
}

// ShouldPodContentBeRemoved reports whether everything of the pod on the
// node (containers, sandboxes, logs) may be deleted: it was evicted, or
// deleted and terminated, or the loop does not know it once every source
// has been seen. Garbage collection asks (package gc).
func (l *Loop) ShouldPodContentBeRemoved(uid types.UID) bool {
	terminated, evicted, known := l.workers.Terminated(uid)
	if !known {
		return l.unknownGone(uid)
	}
	if evicted {
		return true
	}
	p, ok := l.store.get(uid)
	deleted := !ok || p.DeletionTimestamp != nil
	return deleted && terminated
}

// ShouldPodRuntimeBeRemoved reports whether the pod's containers and
// sandboxes may be deleted even though its API object stays: it has
// terminated, or it is unknown once every source has been seen.
func (l *Loop) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	terminated, _, known := l.workers.Terminated(uid)
	if !known {
		return l.unknownGone(uid)
	}
	return terminated
}

// unknownGone: a pod without a worker has nothing on the node worth
// keeping once every source has been seen, unless it is still desired.
func (l *Loop) unknownGone(uid types.UID) bool {
	if !l.SourcesReady() {
		return false
	}
	_, desired := l.store.get(uid)
	return !desired
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
