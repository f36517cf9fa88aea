// Package gc will own garbage collection of dead containers, sandboxes, log
// directories of gone pods, and unused images by disk-usage thresholds.
//
// It does not decide pod lifecycle; it only removes what is already dead.
package gc
