// Package userns allocates the host ID ranges that pods with
// spec.hostUsers: false are mapped onto, as upstream kubelet's user
// namespace manager does: one range of IDsPerPod IDs (65536 by default) per
// pod, taken from the node's range (by default every ID from IDsPerPod up to
// 2^32-1, so host IDs below IDsPerPod, root included, are never handed
// out), with container ID 0 mapped to the range's first host ID for both
// UIDs and GIDs. NodeRange finds the node's range as upstream does: the
// subordinate IDs `getsubids kubelet` and `getsubids -g kubelet` report when
// a kubelet user exists (through a Host, so tests fake the machine), the
// default otherwise; Config.Validate checks it with upstream's rules and
// words.
//
// Each allocation is checkpointed in the pod's directory (PODS-DIR/UID/userns,
// the same JSON upstream writes), so an agent that restarts finds every
// running pod's range again and never gives it to another pod. An
// allocation whose pod directory has gone is taken back when the allocator
// next needs room; Release and Cleanup free ranges at once.
//
// It owns the IDs only: whether the runtime supports user namespaces, and
// the CRI request that uses the mapping, are criruntime's business.
//
//	first, length, err := userns.NodeRange(ctx, userns.OSHost{}, 0)
//	a, err := userns.New(userns.Config{PodsDir: "/var/lib/kubelet/pods", FirstID: first, Length: length, MaxPods: 110})
//	m, err := a.Get(pod.UID) // the same range on every call, and after a restart
package userns
