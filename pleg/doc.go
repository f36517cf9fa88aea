// Package pleg owns the pod lifecycle event generator and the pod cache.
//
// Generic is the relist PLEG: every second it lists the runtime's pods,
// compares each container and sandbox with the previous listing, refreshes
// the Cache for pods that changed, and emits typed Events (ContainerStarted,
// ContainerDied, ContainerRemoved, ...) on a receive-only channel. Pods whose
// status could not be read are inspected again on the next relist. Relist is
// the synchronous step; Run calls it on a ticker.
//
// The Cache holds the newest runtime status of each pod with the time it was
// read, so a pod worker can wait (GetNewerThan) for a status newer than its
// last action instead of acting on a stale one.
//
// pleg needs only two runtime calls, ListPods and GetPodStatus, and declares
// just those (Runtime). It does not decide what to do about an event; the
// sync loop does.
//
// New picks the PLEG for a runtime: the evented one when the runtime
// streams container events (ContainerEventer) and Options.RelistOnly is
// not set, else the relist one, as Virtual Kubelet wraps a provider
// without notifications in a poller. Both are a PLEG (Relist, Run,
// Events, Healthy).
//
//	cache := pleg.NewCache()
//	p := pleg.New(rt, cache, pleg.Options{Clock: clk})
//	go p.Run(ctx)
//	for ev := range p.Events() { ... }
package pleg
