// Package statusmgr will own pod status — the versioned cache the workers
// write and the loop that publishes changes to a nodekit.StatusSink — plus
// node registration, node status and the Lease heartbeat.
//
// It does not compute a pod's status from the runtime; workers do that and
// hand the result in.
package statusmgr
