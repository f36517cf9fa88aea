package volumemgr

import "fmt"

// ProcessError is a SetUp error that upstream's kubelet meets while it
// processes a pod's volumes into its desired state, before any set-up
// (its desired-state populator): a claim not found, not bound or being
// deleted, a PV that cannot be read, a generic ephemeral claim the pod
// does not own, a volume mode that does not match the container's use.
// The reconciler records no FailedMount event for it and retries within
// two seconds, as upstream's populator retries on each of its loops;
// WaitForAttachAndMount fails at once with it, naming the volume among its
// "failed to process volumes", as upstream's does, for the caller (the
// pod worker) to report as a FailedMount event and retry.
type ProcessError struct{ Err error }

func (e *ProcessError) Error() string { return e.Err.Error() }
func (e *ProcessError) Unwrap() error { return e.Err }

// failUnprocessedLocked records a ProcessError: a retry soon, no event.
func (m *Manager) failUnprocessedLocked(v *volumeState, err error) {
	v.err, v.unprocessed, v.unattached = err, true, false
	v.backoff = min(nextBackoff(v.backoff), maxPendingRetry)
	v.retryAt = m.clock.Now().Add(v.backoff)
}

// unprocessedLocked fails with upstream's error when some of the pending
// volumes of pod uid could not be processed (their last set-up failed
// with a ProcessError): every volume not mounted, those waiting on their
// attachment, then those not processed and why. It waits (returns nil)
// while another pending volume has not had its first set-up yet, so the
// error lists the volumes that are not mounted, not those whose set-up
// is under way, as upstream's, which its desired state reports only once
// its populator went through every volume of the pod.
func (m *Manager) unprocessedLocked(a *actualPod, pending []string) error {
	if a == nil {
		return nil
	}
	var failed []string
	var errs []error
	for _, n := range pending {
		v := a.volumes[n]
		switch {
		case v == nil || v.err == nil:
			return nil // not tried yet, or under way
		case v.unprocessed:
			failed = append(failed, n)
			errs = append(errs, v.err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("unmounted volumes=%v, unattached volumes=%v, failed to process volumes=%v: %w",
		pending, m.unattachedLocked(a, pending), failed, joinErrors(errs))
}
