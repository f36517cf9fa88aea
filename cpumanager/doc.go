// Package cpumanager will own CPU assignment: the none and static policies,
// topology-aware exclusive CPU allocation for Guaranteed pods, the shared
// pool, its checkpoint and the reconcile loop that pushes cpusets to the
// runtime.
//
// It does not discover pods; the agent tells it which containers exist.
package cpumanager
