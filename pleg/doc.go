// Package pleg will own the pod lifecycle event generator: the generic relist
// PLEG that diffs what the runtime reports between relists, the evented PLEG
// fed by runtime container events, and the pod cache that workers read.
//
// It needs only two runtime calls (list pods, get a pod's status) and
// declares just those; it does not decide what to do about an event.
package pleg
