// Package runtimecache lets the agent's periodic readers of the runtime's
// pods share the PLEG's listing instead of each asking the runtime.
//
// The PLEG lists every sandbox and container each second. Cache keeps the
// last such listing (fed through pleg.Options.OnList) and serves
// ListPods from it while it is no older than MaxAge; an older one, or none,
// is refreshed by a listing of its own. Readers that can act on a pod list
// a moment old use it: in fullagent, the pod cgroup clean-up. Container
// garbage collection does not: upstream's lists the runtime afresh, and
// its trace shows that listing under the pass's span (fullagent's
// TestTracing checks it). The stats provider does not either: a container
// started since the listing would lack its start time in the summary. Upstream
// kubelet keeps such a cache too (its runtime cache, refreshed when older
// than 3 s); its housekeeping forces a fresh listing, and nodekit's keeps
// asking the runtime directly.
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
