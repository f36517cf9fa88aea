package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/volumemgr"
)

// AttachAPI reads what the attach/detach controller and the driver's
// external attacher write: the Node's status.volumesAttached and the
// VolumeAttachment objects. FromClient's API satisfies it.
type AttachAPI interface {
	GetNode(ctx context.Context, name string) (*v1.Node, error)
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
}

func (c clientAPI) GetNode(ctx context.Context, name string) (*v1.Node, error) {
	return c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (c clientAPI) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return c.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

var _ AttachAPI = clientAPI{}

var _ volumemgr.AttachablePlugin = (*Plugin)(nil)

// UniqueVolumeName is upstream's unique name of a CSI volume,
// kubernetes.io/csi/DRIVER^HANDLE, as node.status.volumesInUse and
// volumesAttached list it.
func UniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(PluginName + "/" + driver + "^" + handle)
}

// AttachableName implements volumemgr.AttachablePlugin: a persistent
// volume of a driver that requires attachment (CSIDriver attachRequired,
// or no CSIDriver object) is attached by the controller, when the plugin
// has an AttachAPI to wait for it; without one such volumes fail SetUp, and
// none is named.
func (p *Plugin) AttachableName(ctx context.Context, req *volumemgr.AttachableRequest) (v1.UniqueVolumeName, error) {
	if p.cfg.Attach == nil {
		return "", nil
	}
	if req.Volume == nil { // found on disk: vol_data.json says which
		data, err := p.foundVolData(req.Dir)
		if err != nil {
			return "", err
		}
		if data[keyLifecycle] == string(storagev1.VolumeLifecycleEphemeral) || data[keyDriver] == "" {
			return "", nil
		}
		required, err := p.attachRequired(ctx, data[keyDriver])
		if err != nil || !required {
			return "", err
		}
		return UniqueVolumeName(data[keyDriver], data[keyHandle]), nil
	}
	src, err := p.resolve(ctx, req.Pod, req.Volume)
	if err != nil {
		return "", err
	}
	pol, err := p.policy(ctx, src)
	if err != nil {
		return "", err
	}
	if !pol.attachRequired {
		return "", nil
	}
	return UniqueVolumeName(src.driver, src.handle), nil
}

// attachRequired reads the CSIDriver's attachRequired (true when there is
// no CSIDriver object, as upstream).
func (p *Plugin) attachRequired(ctx context.Context, driver string) (bool, error) {
	d, err := p.cfg.API.GetCSIDriver(ctx, driver)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting CSIDriver %s: %w", driver, err)
	}
	return d.Spec.AttachRequired == nil || *d.Spec.AttachRequired, nil
}

// waitForAttach checks, as upstream's VerifyControllerAttachedVolume, that
// the node's status.volumesAttached lists the volume (a PendingError
// until it does: no event, retried), then, as upstream's csi attacher's
// WaitForAttach, that its VolumeAttachment csi-SHA256(HANDLE DRIVER NODE)
// says attached; it returns the attachment's metadata, the publish context
// of NodeStageVolume and NodePublishVolume.
func (p *Plugin) waitForAttach(ctx context.Context, src *source) (map[string]string, error) {
	if p.cfg.Attach == nil {
		return nil, fmt.Errorf("CSI driver %s requires attachment (CSIDriver attachRequired, or no CSIDriver object), and this node agent was built without an AttachAPI to wait for it", src.driver)
	}
	specName := src.handle
	if src.pv != nil {
		specName = src.pv.Name
	}
	name := UniqueVolumeName(src.driver, src.handle)
	node, err := p.cfg.Attach.GetNode(ctx, string(p.cfg.NodeName))
	if err != nil {
		return nil, &volumemgr.PendingError{Err: fmt.Errorf("VerifyControllerAttachedVolume failed fetching node from API server for volume %q : %w", specName, err)} //nolint:staticcheck // upstream's wording
	}
	if !slices.ContainsFunc(node.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == name }) {
		return nil, &volumemgr.PendingError{Err: fmt.Errorf("Volume not attached according to node status for volume %q", specName)} //nolint:staticcheck // upstream's wording
	}
	id := attachmentName(src.handle, src.driver, string(p.cfg.NodeName))
	step := func(err error) error {
		return &volumemgr.StepError{Step: "MountVolume.WaitForAttach", Volume: specName, Err: err}
	}
	va, err := p.cfg.Attach.GetVolumeAttachment(ctx, id)
	if err != nil {
		return nil, step(fmt.Errorf("volume %v has GET error for volume attachment %v: %w", src.handle, id, err))
	}
	attached, err := attachmentStatus(va)
	if err != nil {
		return nil, step(err)
	}
	if !attached {
		return nil, step(fmt.Errorf("volume %v is not attached for volume attachment %v", src.handle, id))
	}
	return va.Status.AttachmentMetadata, nil
}

// attachmentStatus reads a VolumeAttachment as upstream's
// verifyAttachmentStatus.
func attachmentStatus(va *storagev1.VolumeAttachment) (bool, error) {
	switch {
	case va == nil:
		return false, errors.New("volume attachment has been deleted")
	case va.DeletionTimestamp != nil:
		return false, errors.New("volume attachment is being deleted")
	case va.Status.Attached:
		return true, nil
	case va.Status.AttachError != nil:
		return false, errors.New(va.Status.AttachError.Message)
	}
	return false, nil
}

// AttachFromClient returns an AttachAPI reading straight from the API
// server (the node's credentials may read its Node and the
// VolumeAttachments of its volumes under the Node authorizer).
func AttachFromClient(cs kubeclient.Interface) AttachAPI { return clientAPI{cs} }
