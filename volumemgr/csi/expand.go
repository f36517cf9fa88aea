package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/internal/smpatch"
)

// Event reasons of online expansion, as upstream's.
const (
	reasonResizeSuccess = "FileSystemResizeSuccessful"
	reasonResizeFailed  = "FileSystemResizeFailed"
)

// resizeConditions are the claim conditions of a resize, dropped when the
// node's part is done (upstream's knownResizeConditions).
var resizeConditions = map[v1.PersistentVolumeClaimConditionType]bool{
	v1.PersistentVolumeClaimFileSystemResizePending: true,
	v1.PersistentVolumeClaimResizing:                true,
	v1.PersistentVolumeClaimControllerResizeError:   true,
	v1.PersistentVolumeClaimNodeResizeError:         true,
}

// expand is the node side of volume expansion for a published PVC volume,
// as upstream's (GenerateExpandInUseVolumeFunc, NodeExpander): when the
// PV's capacity is above the claim's status.capacity (the resizer expanded
// the volume) it calls NodeExpandVolume on volumePath (the published
// target, or the block device file) and then patches the claim's status:
// the new capacity, no resize conditions, no allocatedResourceStatuses
// entry for storage. With allocatedResources set (the resizer that records
// expansion recovery), the new size is allocatedResources.storage and only
// a claim marked NodeResizePending or NodeResizeInProgress is expanded,
// marked NodeResizeInProgress first; a failure leaves a NodeResizeError
// condition (and NodeResizeInfeasible for InvalidArgument, OutOfRange and
// NotFound). It reports whether the driver has EXPAND_VOLUME, so that the
// caller looks again later.
func (p *Plugin) expand(ctx context.Context, c *nodeClient, pod *v1.Pod, src *source, volumePath, staging string) (bool, error) {
	if src.pv == nil || src.pvc == nil {
		return false, nil
	}
	ok, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	if err != nil || !ok {
		return false, err // no EXPAND_VOLUME: nothing for the node to do
	}
	pvc, pv := src.pvc, src.pv
	statusCap, pvCap := pvc.Status.Capacity[v1.ResourceStorage], pv.Spec.Capacity[v1.ResourceStorage]
	if statusCap.Cmp(pvCap) >= 0 {
		return true, nil
	}
	if src.readOnly {
		msg := fmt.Sprintf("MountVolume.NodeExpandVolume failed for volume %q requested read-only file system", pv.Name)
		p.cfg.Events.Eventf(pod, v1.EventTypeWarning, reasonResizeFailed, "%s", msg)
		p.cfg.Events.Eventf(pvc, v1.EventTypeWarning, reasonResizeFailed, "%s", msg)
		return true, nil
	}
	resizeStatus := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	recovery := resizeStatus != "" || pvc.Status.AllocatedResources != nil
	newSize := pvCap
	if recovery {
		newSize = pvc.Status.AllocatedResources[v1.ResourceStorage]
		if resizeStatus != v1.PersistentVolumeClaimNodeResizePending && resizeStatus != v1.PersistentVolumeClaimNodeResizeInProgress {
			return true, nil // the resizer has not asked the node (yet)
		}
		marked := pvc.DeepCopy()
		setResizeStatus(marked, v1.PersistentVolumeClaimNodeResizeInProgress)
		if pvc, err = p.patchClaimStatus(ctx, pvc, marked, true); err != nil {
			return true, fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)
		}
	}
	if err := p.nodeExpand(ctx, c, src, volumePath, staging, newSize); err != nil {
		if recovery {
			p.markExpansionFailed(ctx, pvc, err)
		}
		return true, fmt.Errorf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %w", pv.Name, err)
	}
	msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv.Name, pod.Spec.NodeName)
	p.cfg.Events.Eventf(pod, v1.EventTypeNormal, reasonResizeSuccess, "%s", msg)
	p.cfg.Events.Eventf(pvc, v1.EventTypeNormal, reasonResizeSuccess, "%s", msg)
	done := pvc.DeepCopy()
	done.Status.Capacity = maps.Clone(done.Status.Capacity)
	if done.Status.Capacity == nil {
		done.Status.Capacity = v1.ResourceList{}
	}
	done.Status.Capacity[v1.ResourceStorage] = newSize
	statuses := maps.Clone(done.Status.AllocatedResourceStatuses)
	delete(statuses, v1.ResourceStorage)
	if len(statuses) == 0 {
		statuses = nil
	}
	done.Status.AllocatedResourceStatuses = statuses
	var kept []v1.PersistentVolumeClaimCondition
	for _, cond := range done.Status.Conditions {
		if !resizeConditions[cond.Type] {
			kept = append(kept, cond)
		}
	}
	done.Status.Conditions = kept
	if _, err := p.patchClaimStatus(ctx, pvc, done, true); err != nil {
		return true, fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)
	}
	return true, nil
}

// nodeExpand calls NodeExpandVolume, as upstream's nodeExpandWithClient.
func (p *Plugin) nodeExpand(ctx context.Context, c *nodeClient, src *source, volumePath, staging string, size resource.Quantity) error {
	secrets, err := p.secrets(ctx, "NodeExpand", src.pv.Spec.CSI.NodeExpandSecretRef)
	if err != nil {
		return err
	}
	capability := volumeCapability(src.mode, src.fsType, src.mountOptions, "")
	if src.block {
		capability = blockCapability(src.mode)
	}
	_, err = c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: src.handle, VolumePath: volumePath, StagingTargetPath: staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size.Value()}, VolumeCapability: capability, Secrets: secrets,
	})
	if err != nil {
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	return nil
}

// markExpansionFailed leaves the NodeResizeError condition on the claim,
// and NodeResizeInfeasible for an error the driver says cannot succeed; a
// FailedPrecondition (the volume is in use) is retried without either.
func (p *Plugin) markExpansionFailed(ctx context.Context, pvc *v1.PersistentVolumeClaim, cause error) {
	st, _ := status.FromError(errors.Unwrap(cause))
	if st.Code() == codes.FailedPrecondition {
		return
	}
	failed := pvc.DeepCopy()
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		setResizeStatus(failed, v1.PersistentVolumeClaimNodeResizeInfeasible)
	}
	cond := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		Message: fmt.Sprintf("failed to expand pvc with %v", cause)}
	cond.LastTransitionTime.Time = p.cfg.Clock.Now()
	var conds []v1.PersistentVolumeClaimCondition
	for _, c := range failed.Status.Conditions {
		if c.Type != cond.Type {
			conds = append(conds, c)
		}
	}
	failed.Status.Conditions = append(conds, cond)
	_, _ = p.patchClaimStatus(ctx, pvc, failed, false)
}

func setResizeStatus(pvc *v1.PersistentVolumeClaim, s v1.ClaimResourceStatus) {
	statuses := maps.Clone(pvc.Status.AllocatedResourceStatuses)
	if statuses == nil {
		statuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	statuses[v1.ResourceStorage] = s
	pvc.Status.AllocatedResourceStatuses = statuses
}

// patchClaimStatus patches the claim's status from old to updated with a
// two-way strategic merge patch, checked against old's resourceVersion
// when checkVersion, as upstream's PatchPVCStatus.
func (p *Plugin) patchClaimStatus(ctx context.Context, old, updated *v1.PersistentVolumeClaim, checkVersion bool) (*v1.PersistentVolumeClaim, error) {
	oldData, err := json.Marshal(old)
	if err != nil {
		return old, err
	}
	newData, err := json.Marshal(updated)
	if err != nil {
		return old, err
	}
	patch, err := smpatch.TwoWay(oldData, newData, old)
	if err != nil {
		return old, fmt.Errorf("failed to create 2 way merge patch: %w", err)
	}
	if checkVersion {
		var m map[string]any
		if err := json.Unmarshal(patch, &m); err != nil {
			return old, err
		}
		meta, _ := m["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["resourceVersion"] = old.ResourceVersion
		m["metadata"] = meta
		if patch, err = json.Marshal(m); err != nil {
			return old, err
		}
	}
	pvc, err := p.cfg.API.PatchPersistentVolumeClaimStatus(ctx, old.Namespace, old.Name, patch)
	if err != nil {
		return old, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", old.Name, err)
	}
	return pvc, nil
}
