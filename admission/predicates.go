package admission

import (
	"context"
	"runtime"

	v1 "k8s.io/api/core/v1"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/podutil"
)

// OS rejects a pod meant for another operating system. Two checks, in
// upstream's order:
//
//   - the pod's kubernetes.io/os *label* (metadata.labels, not
//     spec.nodeSelector: that is upstream's behaviour) names another OS:
//     PodOSSelectorNodeLabelDoesNotMatch;
//   - the pod's spec.os.name is another OS: PodOSNotSupported.
//
// The node's OS is its kubernetes.io/os label, or runtime.GOOS when the node
// has none. Upstream always uses runtime.GOOS (and expects the node status
// loop to repair a label that disagrees); nodekit trusts the label so that a
// virtual node can advertise an OS other than the agent's. On a real node the
// agent registers the label from runtime.GOOS and the two agree.
//
// There is no separate architecture check, as upstream: kubernetes.io/os and
// kubernetes.io/arch in spec.nodeSelector or required node affinity are
// matched against the node's labels by NodeAffinity, and rejected with
// reason NodeAffinity.
type OS struct {
	node NodeGetter
}

// NewOS returns the OS admitter for the node node returns.
func NewOS(node NodeGetter) *OS { return &OS{node: node} }

// Admit implements nodekit.Admitter.
func (a *OS) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	nodeOS := node.Labels[v1.LabelOSStable]
	if nodeOS == "" {
		nodeOS = runtime.GOOS
	}
	pod := req.Pod
	if want, ok := pod.Labels[v1.LabelOSStable]; ok && want != nodeOS {
		return nodekit.Decision{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch, Message: messageOSSelector}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != nodeOS {
		return nodekit.Decision{Reason: ReasonPodOSNotSupported, Message: messageOSField}
	}
	return nodekit.Admitted
}

// SupplementalGroupsPolicy rejects a pod whose securityContext asks for
// supplementalGroupsPolicy Strict on a node whose status.features does not
// declare supplementalGroupsPolicy: true (the runtime cannot honour it).
// Reason SupplementalGroupsPolicyNotSupported. The feature is GA in v1.37,
// so the check is unconditional. The node's features come from the
// runtime, as upstream: criruntime.Runtime.SetNodeStatus publishes the CRI
// runtime's supplemental_groups_policy feature (containerd 2 reports it;
// containerd 1.6 reports no features, so Strict is refused there).
type SupplementalGroupsPolicy struct {
	node NodeGetter
}

// NewSupplementalGroupsPolicy returns the admitter for the node node returns.
func NewSupplementalGroupsPolicy(node NodeGetter) *SupplementalGroupsPolicy {
	return &SupplementalGroupsPolicy{node: node}
}

// Admit implements nodekit.Admitter.
func (a *SupplementalGroupsPolicy) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	sc := req.Pod.Spec.SecurityContext
	if sc == nil || sc.SupplementalGroupsPolicy == nil || *sc.SupplementalGroupsPolicy != v1.SupplementalGroupsPolicyStrict {
		return nodekit.Admitted
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	f := node.Status.Features
	if f != nil && f.SupplementalGroupsPolicy != nil && *f.SupplementalGroupsPolicy {
		return nodekit.Admitted
	}
	return nodekit.Decision{Reason: ReasonSupplementalGroupsPolicyNotSupported, Message: messageSupplementalGroups}
}

// NodeAffinity rejects a pod whose spec.nodeSelector or required node
// affinity (requiredDuringSchedulingIgnoredDuringExecution, label and field
// selectors) does not match the node. Reason NodeAffinity, message
// "Predicate NodeAffinity failed: node(s) didn't match Pod's node
// affinity/selector". Preferred terms are ignored.
//
// If the node getter is also a FreshNodeGetter, a mismatch is checked once
// more against a fresh node before rejecting, as upstream does.
type NodeAffinity struct {
	node NodeGetter
}

// NewNodeAffinity returns the node affinity admitter.
func NewNodeAffinity(node NodeGetter) *NodeAffinity { return &NodeAffinity{node: node} }

// Admit implements nodekit.Admitter.
func (a *NodeAffinity) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	pod := req.Pod
	if len(pod.Spec.NodeSelector) == 0 && (pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil) {
		return nodekit.Admitted
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	// As upstream, a selector that fails to parse simply does not match.
	if match, _ := required.Match(node); match {
		return nodekit.Admitted
	}
	if fresh, ok := a.node.(FreshNodeGetter); ok {
		if n, err := fresh.FreshNode(ctx); err == nil && n != nil {
			if match, _ := required.Match(n); match {
				return nodekit.Admitted
			}
		} else if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot fetch a fresh node to recheck node affinity", "pod", klog.KObj(pod), "err", err)
		}
	}
	return predicateFailure(ReasonNodeAffinity, descNodeAffinity)
}

// NodeName rejects a pod bound to another node: spec.nodeName is set and is
// not the node's name. Reason NodeName, message "Predicate NodeName failed:
// node(s) didn't match the requested node name".
type NodeName struct {
	node NodeGetter
}

// NewNodeName returns the node name admitter.
func NewNodeName(node NodeGetter) *NodeName { return &NodeName{node: node} }

// Admit implements nodekit.Admitter.
func (a *NodeName) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	if req.Pod.Spec.NodeName == "" {
		return nodekit.Admitted
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	if req.Pod.Spec.NodeName != node.Name {
		return predicateFailure(ReasonNodeName, descNodeName)
	}
	return nodekit.Admitted
}

// TaintToleration rejects a pod that does not tolerate one of the node's
// NoExecute taints. Only NoExecute is checked, exactly as upstream kubelet:
// NoSchedule and PreferNoSchedule taints are the scheduler's business and do
// not keep a pod bound to the node (or a static pod) from running. Static
// pods (kubernetes.io/config.source annotation present and not "api") are
// exempt. Reason TaintToleration, message "Predicate TaintToleration failed:
// node(s) had taints that the pod didn't tolerate".
//
// Toleration matching is upstream's (k8s.io/api Toleration.ToleratesTaint)
// with the alpha TaintTolerationComparisonOperators feature off, its v1.37
// default.
type TaintToleration struct {
	node NodeGetter
}

// NewTaintToleration returns the taint admitter.
func NewTaintToleration(node NodeGetter) *TaintToleration { return &TaintToleration{node: node} }

// Admit implements nodekit.Admitter.
func (a *TaintToleration) Admit(ctx context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	if podutil.IsStatic(req.Pod) {
		return nodekit.Admitted
	}
	node, d, ok := getNode(ctx, a.node)
	if !ok {
		return d
	}
	if len(node.Spec.Taints) == 0 {
		return nodekit.Admitted
	}
	_, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.FromContext(ctx), node.Spec.Taints, req.Pod.Spec.Tolerations,
		func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, false)
	if untolerated {
		return predicateFailure(ReasonTaintToleration, descTaintToleration)
	}
	return nodekit.Admitted
}
