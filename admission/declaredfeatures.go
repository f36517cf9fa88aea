package admission

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"

	"github.com/nodekit/nodekit"
)

// DeclaredFeatures refuses a pod that needs a node feature the node does
// not declare in status.declaredFeatures, as upstream kubelet's
// declared-features admit handler (on with the NodeDeclaredFeatures gate,
// GA in v1.37): what a pod needs is inferred by upstream's framework
// (k8s.io/component-helpers/nodedeclaredfeatures) from its spec, say a
// restartPolicyRules action RestartAllContainers, a hostNetwork pod in a
// user namespace or a volume mount's bindMountOptions. The reason is
// PodFeatureUnsupported and the message "Pod requires node features that
// are not available: " followed by the missing features, comma-separated.
// It is stateless after construction; the node's list is fixed at start-up,
// as upstream's.
type DeclaredFeatures struct {
	framework *ndf.Framework
	declared  ndf.FeatureSet
	version   *version.Version
}

var _ nodekit.Admitter = (*DeclaredFeatures)(nil)

// NewDeclaredFeatures returns the admitter for a node declaring declared
// (the list the node publishes, sorted, as statusmgr.DeclaredFeatures
// returns it) at kubeletVersion ("" means v1.37.2). A name upstream's
// framework does not know, or an unsorted list, is an error.
func NewDeclaredFeatures(declared []string, kubeletVersion string) (*DeclaredFeatures, error) {
	if kubeletVersion == "" {
		kubeletVersion = "v1.37.2"
	}
	v, err := version.Parse(kubeletVersion)
	if err != nil {
		return nil, fmt.Errorf("declared features: kubelet version %q: %w", kubeletVersion, err)
	}
	fw := ndf.DefaultFramework
	set, err := fw.MapSorted(declared)
	if err != nil {
		return nil, fmt.Errorf("declared features %v: %w", declared, err)
	}
	return &DeclaredFeatures{framework: fw, declared: set, version: v}, nil
}

// Admit implements nodekit.Admitter.
func (d *DeclaredFeatures) Admit(_ context.Context, req nodekit.AdmitRequest) nodekit.Decision {
	if req.Pod == nil {
		return noPod()
	}
	info := &ndf.PodInfo{Spec: &req.Pod.Spec, Status: &req.Pod.Status}
	needs, err := d.framework.InferForPodScheduling(info, d.version)
	if err != nil {
		return nodekit.Decision{Reason: ReasonPodFeatureUnsupported,
			Message: fmt.Sprintf("Failed to infer pod's feature requirements: %v", err)}
	}
	if needs.IsEmpty() {
		return nodekit.Admitted
	}
	match, err := d.framework.MatchNodeFeatureSet(needs, d.declared)
	if err != nil {
		return nodekit.Decision{Reason: ReasonPodFeatureUnsupported,
			Message: fmt.Sprintf("Failed to match pod's feature requirements against the node: %v", err)}
	}
	if match.IsMatch {
		return nodekit.Admitted
	}
	return nodekit.Decision{Reason: ReasonPodFeatureUnsupported,
		Message: messagePodFeatureUnsupported + strings.Join(match.UnsatisfiedRequirements, ", ")}
}
