package admission

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/klog/v2"

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

// EventFailedNodeDeclaredFeaturesCheck is the reason of the warning event
// recorded on a running pod whose update needs a feature the node does not
// declare, as upstream's.
const EventFailedNodeDeclaredFeaturesCheck = "FailedNodeDeclaredFeaturesCheck"

// EventRecorder records an event on an object; client-go's
// record.EventRecorder satisfies it.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// MissingForUpdate returns the features the change from old to updated
// needs and the node does not declare (empty when none), as upstream's
// framework infers them for a pod update (say, a resize of pod-level
// resources).
func (d *DeclaredFeatures) MissingForUpdate(old, updated *v1.Pod) ([]string, error) {
	oldInfo := &ndf.PodInfo{Spec: &old.Spec, Status: &old.Status}
	newInfo := &ndf.PodInfo{Spec: &updated.Spec, Status: &updated.Status}
	needs, err := d.framework.InferForPodUpdate(oldInfo, newInfo, d.version)
	if err != nil {
		return nil, fmt.Errorf("infer the features of the update of pod %s/%s: %w", updated.Namespace, updated.Name, err)
	}
	if needs.IsEmpty() {
		return nil, nil
	}
	match, err := d.framework.MatchNodeFeatureSet(needs, d.declared)
	if err != nil {
		return nil, fmt.Errorf("match the features of the update of pod %s/%s: %w", updated.Namespace, updated.Name, err)
	}
	if match.IsMatch {
		return nil, nil
	}
	return match.UnsatisfiedRequirements, nil
}

// UpdateChecker checks each update of a running pod against the node's
// declared features, as upstream kubelet does when it hands a pod update to
// the pod's worker: an update needing a feature the node does not declare
// is logged and gets a Warning event FailedNodeDeclaredFeaturesCheck ("Pod
// requires node features that are not available: ..."). The update still
// reaches the worker, as upstream's (the API server's own check refuses
// such updates first). It is a syncloop.UpdateObserver.
type UpdateChecker struct {
	Features *DeclaredFeatures
	// Recorder receives the events; nil only logs.
	Recorder EventRecorder
}

// ObservePodUpdate implements syncloop.UpdateObserver.
func (c *UpdateChecker) ObservePodUpdate(ctx context.Context, old, updated *v1.Pod) {
	logger := klog.FromContext(ctx)
	missing, err := c.Features.MissingForUpdate(old, updated)
	if err != nil {
		logger.Error(err, "Failed to check the pod update against the node's declared features", "pod", klog.KObj(updated))
		return
	}
	if len(missing) == 0 {
		return
	}
	list := strings.Join(missing, ", ")
	logger.Error(nil, "Pod requires node features that are not available", "pod", klog.KObj(updated), "missingFeatures", list)
	if c.Recorder != nil {
		c.Recorder.Eventf(updated, v1.EventTypeWarning, EventFailedNodeDeclaredFeaturesCheck, "%s%s", messagePodFeatureUnsupported, list)
	}
}
