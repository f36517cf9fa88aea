package admission

// The Reason words the built-in admitters put in a Decision, spelled as
// upstream kubelet v1.37 spells them; they end up in the rejected pod's
// status.reason, where users and the e2e tests look for them.
const (
	// ReasonInvalidNodeInfo: the NodeGetter failed.
	ReasonInvalidNodeInfo = "InvalidNodeInfo"
	// ReasonPodOSSelectorNodeLabelDoesNotMatch: the pod's kubernetes.io/os
	// label names another OS than the node's.
	ReasonPodOSSelectorNodeLabelDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
	// ReasonPodOSNotSupported: the pod's spec.os.name is not the node's OS.
	ReasonPodOSNotSupported = "PodOSNotSupported"
	// ReasonSupplementalGroupsPolicyNotSupported: the pod asks for
	// supplementalGroupsPolicy Strict and the node does not declare support.
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	// ReasonAppArmor: the pod asks for an AppArmor profile the node cannot
	// enforce.
	ReasonAppArmor = "AppArmor"
	// ReasonPodFeatureUnsupported: the pod needs a node feature this node
	// does not have (PodFeatures).
	ReasonPodFeatureUnsupported = "PodFeatureUnsupported"

	// ReasonOutOfPrefix starts every insufficient-resource reason; the
	// resource name follows (OutOfnvidia.com/gpu, OutOfhugepages-2Mi).
	ReasonOutOfPrefix           = "OutOf"
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"

	// The predicate reasons are the scheduler plugin names.
	ReasonNodeAffinity    = "NodeAffinity"
	ReasonNodeName        = "NodeName"
	ReasonNodePorts       = "NodePorts"
	ReasonTaintToleration = "TaintToleration"
)

// Upstream's wording, kept verbatim.
const (
	messageInvalidNodeInfo       = "Kubelet cannot get node info."
	messageOSSelector            = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	messageOSField               = "Failed to admit pod as the OS field doesn't match node OS"
	messagePodFeatureUnsupported = "Pod requires node features that are not available: "
	messageSupplementalGroups    = "SupplementalGroupsPolicy=Strict is not supported in this node"
	descNodeAffinity             = "node(s) didn't match Pod's node affinity/selector"
	descNodeName                 = "node(s) didn't match the requested node name"
	descNodePorts                = "node(s) didn't have free ports for the requested pod ports"
	descTaintToleration          = "node(s) had taints that the pod didn't tolerate"
)
