package syncloop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
)

// maxDrainRounds bounds Drain: a loop that still has work after this many
// rounds at one instant is rescheduling itself without time passing.
const maxDrainRounds = 1000

// errNotFresh is an inline step that did not run: the cache holds no
// status of the pod newer than its last sync.
var errNotFresh = errors.New("syncloop: no pod status newer than the last sync")

// Drain is the loop's synchronous step. It handles every pod update, PLEG
// event and probe wake already waiting on the loop's channels, wakes the
// workers whose sync is due at the clock's current time (the sync tick)
// and, with Config.InlineWorkers, runs every pending pod-worker step on the
// caller's goroutine; it repeats that until a round finds nothing to do,
// and returns. Without InlineWorkers the steps run on the workers'
// goroutines and Drain only hands them their work.
//
// Drain does not block on its inputs and never sleeps: a test advances a
// fake clock, relists the PLEG and calls Drain, and reads the result. It
// does not run Housekeeping, which a caller drives on its own. It returns
// the runtime's health error (having done nothing) while Config.Health
// reports one, ctx.Err() when ctx ends, and an error when the loop keeps
// finding work at one instant (a step rescheduling itself for now).
func (l *Loop) Drain(ctx context.Context) error {
	if err := l.checkHealth(ctx); err != nil {
		return fmt.Errorf("syncloop: not draining: %w", err)
	}
	for range maxDrainRounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		worked := l.drainInputs(ctx)
		l.SyncDue(ctx)
		if l.workers.inline && l.workers.runPending(ctx) > 0 {
			worked = true
		}
		if !worked {
			return nil
		}
	}
	return fmt.Errorf("syncloop: Drain still had work after %d rounds at %s", maxDrainRounds, l.clock.Now().Format(time.RFC3339Nano))
}

// drainInputs handles what waits on the loop's channels, without
// blocking, and reports whether it handled anything.
func (l *Loop) drainInputs(ctx context.Context) bool {
	worked := false
	for {
		select {
		case u, ok := <-l.updates():
			if !ok {
				l.updatesClosed = true
				continue
			}
			l.HandleUpdate(ctx, u)
		case ev := <-l.cfg.Events:
			if ev != nil {
				l.syncUID(ctx, ev.PodID)
			}
		case uid := <-l.cfg.ProbeUpdates:
			l.syncUID(ctx, uid)
		default:
			return worked
		}
		worked = true
	}
}

// updates is the update channel, or nil (never ready) once Drain has seen
// it closed.
func (l *Loop) updates() <-chan nodekit.PodUpdate {
	if l.updatesClosed {
		return nil
	}
	return l.cfg.Updates
}

// runPending runs one step of every inline worker with pending work that
// can run now, in UID order, and returns how many steps ran.
func (w *workers) runPending(ctx context.Context) int {
	w.mu.Lock()
	var uids []types.UID
	for uid, wk := range w.pods {
		if wk.pending != nil && !wk.busy {
			uids = append(uids, uid)
		}
	}
	w.mu.Unlock()
	slices.Sort(uids)
	ran := 0
	for _, uid := range uids {
		if w.runOne(ctx, uid) {
			ran++
		}
	}
	return ran
}

// runOne runs one pending step of an inline worker on the caller's
// goroutine and reports whether a step ran.
func (w *workers) runOne(ctx context.Context, uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk := w.pods[uid]
	if wk == nil || wk.pending == nil || wk.busy || ctx.Err() != nil {
		return false
	}
	wk.busy = true
	ran := w.stepLocked(ctx, wk, klog.FromContext(ctx).WithValues("podUID", uid))
	wk.busy = false
	return ran
}

// cachedStatus is the pod's runtime status read after since. Goroutine
// workers wait for one; inline workers ask with a context already done
// and get errNotFresh when there is none yet.
func (w *workers) cachedStatus(ctx context.Context, uid types.UID, since time.Time) (*nodekit.PodStatus, error) {
	if !w.inline {
		return w.cache.GetNewerThan(ctx, uid, since)
	}
	asked, cancel := context.WithCancel(ctx)
	cancel()
	st, err := w.cache.GetNewerThan(asked, uid, since)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return nil, errNotFresh
	}
	return st, err
}
