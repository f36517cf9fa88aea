package main

import (
	"fmt"

	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// notImplementedFeatures are the node-declared features kubelet v1.37.2
// declares when their gates are on but that fullagent does not act on, so
// it does not declare them: the scheduler then keeps pods needing them off
// this node, and the API server refuses resizes needing them, instead of
// the node accepting what it would refuse or ignore.
//   - InPlacePodVerticalScalingMemoryBackedVolumes: a memory emptyDir's
//     size is not changed on resize.
//   - DRANodeAllocatableResources, DRAOptionalNodeOperations: no DRA.
//
// The two that need a runtime feature (UserNamespacesHostNetworkSupport,
// VolumeBindMountOptions) are never declared: fullagent passes no runtime
// features.
func notImplementedFeatures() []string {
	return []string{
		"InPlacePodVerticalScalingMemoryBackedVolumes",
		"DRANodeAllocatableResources",
		"DRAOptionalNodeOperations",
	}
}

// declaredFeatures computes the node's status.declaredFeatures from the
// gates (statusmgr.DeclaredFeatures) and the admitter that refuses pods
// needing a feature not in it; both nil with the NodeDeclaredFeatures gate
// off.
func (a *agent) declaredFeatures() ([]string, *admission.DeclaredFeatures, error) {
	list, err := statusmgr.DeclaredFeatures(statusmgr.DeclaredFeaturesConfig{
		Gates: a.gates, KubeletVersion: statusmgr.DefaultKubeletVersion, NotImplemented: notImplementedFeatures()})
	if err != nil {
		return nil, nil, fmt.Errorf("featureGates: %w", err)
	}
	if list == nil {
		return nil, nil, nil
	}
	ad, err := admission.NewDeclaredFeatures(list, statusmgr.DefaultKubeletVersion)
	if err != nil {
		return nil, nil, fmt.Errorf("featureGates: %w", err)
	}
	return list, ad, nil
}

// updateObservers are the loop's pod-update hooks, as upstream's: the
// resizes an update asks for counted (kubelet_container_requested_resizes_total)
// and, with the NodeDeclaredFeatures gate on, the update checked against
// the declared features (a FailedNodeDeclaredFeaturesCheck event when it
// needs one the node lacks).
func (a *agent) updateObservers(recorder admission.EventRecorder) []syncloop.UpdateObserver {
	var out []syncloop.UpdateObserver
	if a.resizeMetrics != nil {
		out = append(out, a.resizeMetrics)
	}
	if a.declaredFeat != nil {
		out = append(out, &admission.UpdateChecker{Features: a.declaredFeat, Recorder: recorder})
	}
	return out
}
