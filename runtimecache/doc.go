// Package runtimecache lets the agent's periodic readers of the runtime's
// pods share the PLEG's listing instead of each asking the runtime.
//
// The PLEG lists every sandbox and container each second. Cache keeps the
// last such listing (fed through pleg.Options.OnList) and serves
// ListPods from it while it is no older than MaxAge; an older one, or none,
// is refreshed by a listing of its own. Readers that can act on a pod list
// a moment old use it: in fullagent, housekeeping (syncloop.Config.Listing)
// and the pod cgroup clean-up. Container
// garbage collection does not: upstream's lists the runtime afresh, and
// its trace shows that listing under the pass's span (fullagent's
// TestTracing checks it). The stats provider does not either: a container
// started since the listing would lack its start time in the summary. Upstream
// kubelet keeps such a cache too (its runtime cache, refreshed when older
// than 3 s). Its housekeeping forces the cache fresh, so as not to kill,
// from a stale listing, a static pod's old instance whose UID a new
// instance reuses; nodekit's housekeeping never kills a pod a source still
// names, so a listing up to 2 s old costs at most a redundant kill of a
// pod already stopped, and spares a listing every 2 s (at 1000 pods, 81
// MB decoded per 30 s).
//
// Why: at 1000 pods every listing decodes megabytes of CRI messages, and
// the periodic loops tick together (every 10 s the relist, housekeeping
// and the cgroup clean-up; every minute garbage collection too). A heap
// profile of fullagent at 1000 fake-runtime pods found 16 MB of its 53 MB
// live heap in the decodes of five concurrent listings, which the garbage
// collector counts as live and doubles into its next heap goal.
//
// The pods served are copies down to their container slices; the
// containers themselves are shared and must not be changed.
package runtimecache
