// Package podconfig will own the pod sources — the API server (pods bound to
// this node, via a field-selected watch), a static-manifest directory and an
// HTTP URL — and the merger that turns their snapshots and increments into
// one ordered stream of nodekit.PodUpdate with upstream kubelet semantics
// (ADD, UPDATE, DELETE, REMOVE, RECONCILE), reporting when every source has
// been seen once.
//
// It does not run pods, decide admission or publish status.
package podconfig
