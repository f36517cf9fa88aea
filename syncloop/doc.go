// Package syncloop will own the main loop of a node agent and the per-pod
// workers: it selects over pod updates, PLEG events, the sync and
// housekeeping ticks and probe results; serializes the work of each pod
// through the sync -> terminating -> terminated states; runs the admission
// chain; and decides each pod's actions (restart policy, crash-loop and
// image-pull back-off, init containers) that a nodekit.Runtime carries out.
// It builds each pod's API status from the runtime's view: container
// statuses, IPs and start time here, phase and conditions by
// internal/podstatus, the generator the status manager uses too.
// With a Resizer (package allocation), a worker syncs each pod at its
// allocated resources, applies an allocated resize to the running
// containers before starting any, and restarts the containers whose
// resizePolicy asks for it; the resize conditions and container
// resources come from the Resizer.
//
// It does not talk to a container runtime protocol or to the API server
// directly: those come in through nodekit.Runtime and nodekit.StatusSink.
package syncloop
