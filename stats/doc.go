// Package stats will own node, pod and container statistics (machine and
// cgroup readings, CRI stats, ephemeral-storage use) assembled into the
// upstream Summary API types, for /stats/summary and for eviction.
//
// It does not act on the numbers.
package stats
