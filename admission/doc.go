// Package admission owns the admission chain and upstream kubelet's built-in
// predicate admitters: OS, supplementalGroupsPolicy, resource fit (cpu,
// memory, ephemeral-storage, hugepages, extended resources, pod count), node
// selector and required node affinity, node name, host ports, and NoExecute
// taints; and the sysctl allowlist (Sysctls: the kernel's safe sysctls plus
// allowedUnsafeSysctls, SysctlForbidden otherwise); AppArmor (profiles the
// host cannot enforce, reason AppArmor); and PodFeatures, which refuses pods
// needing what nodekit does not build (DRA resource claims; the
// RestartAllContainers restart action only when its gate is off) with
// PodFeatureUnsupported; and
// DeclaredFeatures, which refuses a pod needing a node feature the node does
// not declare in status.declaredFeatures (same reason; its UpdateChecker
// records upstream's FailedNodeDeclaredFeaturesCheck event for an update
// of a running pod needing one). Each
// built-in rejects with upstream v1.37's Reason and Message (OutOfcpu,
// NodeAffinity, ...), so rejected pods look the same as under kubelet.
//
// It does not decide when admission runs, fail the rejected pod or record
// events: the sync loop does, on ADD. It does not preempt pods to make room
// for a critical pod, as upstream kubelet can; a critical pod short of
// resources is rejected like any other. Eviction and the
// CPU/memory/topology/device manager admitters live in their own packages;
// DefaultChain puts them, AppArmor, node shutdown and custom policies in
// upstream's order around Builtins.
//
// The built-ins read the node through a NodeGetter, and the pods already
// admitted from nodekit.AdmitRequest.Pods (terminal pods are ignored). A
// custom policy is a one-liner with nodekit.AdmitFunc:
//
//	chain := admission.NewChain(admission.Builtins(node)...)
//	chain.Add(nodekit.AdmitFunc(func(ctx context.Context, r nodekit.AdmitRequest) nodekit.Decision {
//		if r.Pod.Labels["team"] == "" {
//			return nodekit.Decision{Reason: "NoTeam", Message: "pods on this node need a team label"}
//		}
//		return nodekit.Admitted
//	}))
//	d := chain.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: admitted})
//
// Package admissiontest describes a node in a few lines and runs a pod
// through the same chain, for table tests of custom admitters.
package admission
