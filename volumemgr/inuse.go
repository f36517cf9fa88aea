package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// maxPendingRetry caps the back-off of a set-up that waits on a
// precondition (PendingError) or could not be processed (ProcessError):
// the wait ends outside the node, and the next attempt should follow soon
// after.
const maxPendingRetry = 2 * time.Second

// AttachablePlugin is a Plugin some of whose volumes a controller attaches
// to the node (upstream's attachable plugins, with the attach/detach
// controller doing the attaching: CSI drivers whose CSIDriver says
// attachRequired). The Manager reports such volumes in VolumesInUse from
// the moment it decides to set them up until they are torn down, and calls
// SetUp for one only after MarkVolumesAsReportedInUse said that the node's
// status lists it, as upstream's ReportedInUse gate: the controller must
// not detach a volume the node is about to mount or still has mounted.
type AttachablePlugin interface {
	Plugin
	// AttachableName returns the volume's unique name (for CSI
	// "kubernetes.io/csi/DRIVER^HANDLE", as upstream) when a controller
	// attaches it, "" when nothing attaches it. req.Pod and req.Volume are
	// nil for a volume found on disk at start-up; the plugin then reads
	// what it left in req.Dir. It blocks on the API server; an error is
	// a failed set-up, retried.
	AttachableName(ctx context.Context, req *AttachableRequest) (v1.UniqueVolumeName, error)
}

// AttachableRequest is the input of AttachablePlugin.AttachableName.
// Fields may be added.
type AttachableRequest struct {
	// Pod and Volume are nil for a volume found on disk.
	Pod    *v1.Pod
	Volume *v1.Volume
	// Dir is the volume's directory, as in SetUpRequest.
	Dir string
}

// PendingError is a SetUp error that means the volume waits on something
// outside the node: its attachment by the controller (upstream's
// VerifyControllerAttachedVolume). The set-up is retried, with a back-off
// capped at two seconds, no FailedMount event is recorded (upstream
// records none either), and WaitForAttachAndMount lists the volume among
// its "unattached volumes".
type PendingError struct{ Err error }

func (e *PendingError) Error() string { return e.Err.Error() }
func (e *PendingError) Unwrap() error { return e.Err }

// StepError is a SetUp error of a named upstream step: the FailedMount
// event reads `STEP failed for volume "VOLUME" : ERR` (e.g.
// MountVolume.WaitForAttach, and the PV's name for a claim's volume)
// instead of `MountVolume.SetUp failed for volume "POD-VOLUME" : ERR`.
type StepError struct {
	// Step is the upstream operation, e.g. "MountVolume.WaitForAttach".
	Step string
	// Volume is the volume's name in the message; "" means the pod
	// volume's name.
	Volume string
	Err    error
}

func (e *StepError) Error() string { return e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// failedMountMessage is the FailedMount event text of a set-up error.
func failedMountMessage(volume string, err error) string {
	step, name := "MountVolume.SetUp", volume
	var se *StepError
	if errors.As(err, &se) {
		step = se.Step
		if se.Volume != "" {
			name = se.Volume
		}
	}
	return fmt.Sprintf("%s failed for volume %q : %v", step, name, err)
}

// VolumesInUse returns the unique names of the attachable volumes (see
// AttachablePlugin) the Manager has set up, is setting up or has yet to
// tear down, sorted: node.status.volumesInUse, as upstream's
// GetVolumesInUse. Report it only once StatesSynced is true.
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[v1.UniqueVolumeName]bool{}
	out := []v1.UniqueVolumeName{}
	for _, a := range m.actual {
		for _, v := range a.volumes {
			if v.unique != "" && !seen[v.unique] {
				seen[v.unique] = true
				out = append(out, v.unique)
			}
		}
	}
	slices.Sort(out)
	return out
}

// StatesSynced reports whether the volumes left by an earlier run have
// been found (the first Reconcile scanned the disk), as upstream's
// ReconcilerStatesHasBeenSynced: before that VolumesInUse would leave out
// volumes still mounted, and the node's status should keep what it has.
func (m *Manager) StatesSynced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scanned
}

// MarkVolumesAsReportedInUse records the volumes the node's status lists in
// volumesInUse, as the API server has it after a status update (or the
// Node read when nothing changed); the attachable volumes among them may
// now be set up. Names no longer listed lose the mark.
func (m *Manager) MarkVolumesAsReportedInUse(names []v1.UniqueVolumeName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := make(map[v1.UniqueVolumeName]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	wake := false
	for _, a := range m.actual {
		for _, v := range a.volumes {
			if v.unique != "" && set[v.unique] && !m.reportedInUse[v.unique] && !v.setUp {
				v.retryAt, wake = time.Time{}, true
			}
		}
	}
	m.reportedInUse = set
	if wake {
		m.kick()
	}
}

// attachGate learns whether the volume of a set-up is attachable and, if
// it is, fails the set-up with a PendingError until the node's status
// lists it in volumesInUse.
func (m *Manager) attachGate(ctx context.Context, o op) error {
	ap, ok := o.vol.plugin.(AttachablePlugin)
	if !ok {
		return nil
	}
	m.mu.Lock()
	known, name := o.vol.uniqueKnown, o.vol.unique
	m.mu.Unlock()
	if !known {
		n, err := ap.AttachableName(ctx, &AttachableRequest{Pod: o.pod, Volume: o.vol.spec, Dir: o.vol.dir})
		if err != nil {
			return err
		}
		m.mu.Lock()
		o.vol.unique, o.vol.uniqueKnown, name = n, true, n
		m.mu.Unlock()
	}
	if name == "" {
		return nil
	}
	m.mu.Lock()
	reported := m.reportedInUse[name]
	m.mu.Unlock()
	if !reported {
		return &PendingError{Err: fmt.Errorf("Volume has not been added to the list of VolumesInUse in the node's volume status for volume %q", name)} //nolint:staticcheck // upstream's wording
	}
	return nil
}

// nameFound learns the unique names of attachable volumes found on disk,
// so that they stay in VolumesInUse until torn down; a volume whose name
// cannot be read is left unnamed.
func (m *Manager) nameFound(ctx context.Context, vols []*volumeState) {
	for _, v := range vols {
		ap, ok := v.plugin.(AttachablePlugin)
		if !ok {
			continue
		}
		n, err := ap.AttachableName(ctx, &AttachableRequest{Dir: v.dir})
		if err != nil {
			logger(ctx).V(2).Info("Unable to name a volume found on disk", "dir", v.dir, "err", err)
			continue
		}
		v.unique = n
	}
}

// failPendingLocked records a PendingError: a retry soon, no event.
func (m *Manager) failPendingLocked(v *volumeState, err error) {
	v.err, v.unattached, v.unprocessed = err, true, false
	v.backoff = min(nextBackoff(v.backoff), maxPendingRetry)
	v.retryAt = m.clock.Now().Add(v.backoff)
}

// unattachedLocked returns the named volumes that wait on their
// attachment.
func (m *Manager) unattachedLocked(a *actualPod, names []string) []string {
	var out []string
	if a == nil {
		return out
	}
	for _, n := range names {
		if v := a.volumes[n]; v != nil && !v.setUp && v.unattached {
			out = append(out, n)
		}
	}
	return out
}
