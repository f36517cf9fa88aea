// Package eviction will own node-pressure eviction: signals and thresholds,
// ranking of pods per signal, pressure conditions, and an Admitter that
// rejects pods the node cannot take under pressure. Decisions are pure
// functions of (stats, pods).
//
// It does not collect stats (package stats does) or kill pods itself.
package eviction
