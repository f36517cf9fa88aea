package csi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/nodekit/nodekit/volumemgr"
)

// pvcProtectionFinalizer keeps a PVC in use from going away; a PVC being
// deleted without it must not be mounted (upstream's rule).
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// source is a pod volume resolved to what the driver is called with.
type source struct {
	driver       string
	handle       string
	attributes   map[string]string
	fsType       string
	mountOptions []string
	readOnly     bool
	// accessMode is the PV's first access mode (ReadWriteOnce when it
	// has none, and for an inline volume), as upstream gives the driver;
	// mode is the CSI one SetUp maps it to for the driver (accessmode.go).
	accessMode v1.PersistentVolumeAccessMode
	mode       csipb.VolumeCapability_AccessMode_Mode
	lifecycle  storagev1.VolumeLifecycleMode
	// stageSecret and publishSecret name the secrets the driver gets in
	// NodeStageVolume and NodePublishVolume (nil: none).
	stageSecret, publishSecret *v1.SecretReference
	// pv is the bound PV and pvc its claim, nil for inline volumes.
	pv  *v1.PersistentVolume
	pvc *v1.PersistentVolumeClaim
	// block: the PV has volumeMode Block, a raw block volume (block.go).
	block bool
}

// resolve turns a persistentVolumeClaim, ephemeral or csi pod volume into
// a source, with upstream's errors for unbound or foreign claims; they are
// volumemgr.ProcessErrors, as upstream meets them in its desired-state
// populator, before any set-up.
func (p *Plugin) resolve(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (*source, error) {
	src, err := p.resolveSource(ctx, pod, vol)
	if err != nil {
		return nil, &volumemgr.ProcessError{Err: err}
	}
	return src, nil
}

func (p *Plugin) resolveSource(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (*source, error) {
	if vol.CSI != nil {
		if err := volumeModeMismatch(pod, vol.Name, false); err != nil {
			return nil, err
		}
		return inlineSource(pod, vol), nil
	}
	var claim string
	readOnly := false
	switch {
	case vol.PersistentVolumeClaim != nil:
		claim, readOnly = vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly
	case vol.Ephemeral != nil:
		claim = ephemeral.VolumeClaimName(pod, vol)
	default:
		return nil, fmt.Errorf("volume %q is not a CSI volume", vol.Name)
	}
	pvc, err := p.boundClaim(ctx, pod.Namespace, claim)
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, claim, err)
	}
	if vol.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, err
		}
	}
	pv, err := p.boundVolume(ctx, pvc)
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, claim, err)
	}
	if pv.Spec.CSI == nil {
		return nil, fmt.Errorf("failed to get Plugin from volumeSpec for volume %q err=%w: PersistentVolume %s is not a CSI volume; only CSI persistent volumes are supported by this node agent",
			vol.Name, volumemgr.ErrNoPluginMatched, pv.Name)
	}
	block := pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock
	if err := volumeModeMismatch(pod, vol.Name, block); err != nil {
		return nil, err
	}
	c := pv.Spec.CSI
	return &source{block: block, pvc: pvc,
		driver: c.Driver, handle: c.VolumeHandle, attributes: c.VolumeAttributes, fsType: c.FSType,
		mountOptions: pv.Spec.MountOptions, readOnly: readOnly || c.ReadOnly,
		accessMode: firstAccessMode(pv.Spec.AccessModes), lifecycle: storagev1.VolumeLifecyclePersistent,
		stageSecret: c.NodeStageSecretRef, publishSecret: c.NodePublishSecretRef, pv: pv,
	}, nil
}

func inlineSource(pod *v1.Pod, vol *v1.Volume) *source {
	c := vol.CSI
	s := &source{
		driver: c.Driver, handle: inlineHandle(string(pod.UID), vol.Name), attributes: c.VolumeAttributes,
		accessMode: v1.ReadWriteOnce, lifecycle: storagev1.VolumeLifecycleEphemeral,
	}
	if c.FSType != nil {
		s.fsType = *c.FSType
	}
	if c.ReadOnly != nil {
		s.readOnly = *c.ReadOnly
	}
	if c.NodePublishSecretRef != nil { // in the pod's namespace
		s.publishSecret = &v1.SecretReference{Name: c.NodePublishSecretRef.Name, Namespace: pod.Namespace}
	}
	return s
}

// secrets reads the secret ref names into what the driver is sent, as
// upstream: every data key, its value as a string. kind ("NodeStage",
// "NodePublish") names the ref in the error.
func (p *Plugin) secrets(ctx context.Context, kind string, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	sec, err := p.cfg.API.GetSecret(ctx, ref.Namespace, ref.Name)
	if err == nil && sec == nil {
		err = errors.New("no such secret")
	}
	if err != nil {
		return nil, fmt.Errorf("fetching %sSecretRef %s/%s failed: %s", kind, ref.Namespace, ref.Name,
			logf("failed to find the secret %s in the namespace %s with error: %v", ref.Name, ref.Namespace, err))
	}
	out := make(map[string]string, len(sec.Data))
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out, nil
}

// inlineHandle names an inline volume for the driver: csi-SHA256(UID+NAME),
// as upstream.
func inlineHandle(podUID, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volName)))
}

func (p *Plugin) boundClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	pvc, err := p.cfg.API.GetPersistentVolumeClaim(ctx, namespace, name)
	if err != nil || pvc == nil {
		return nil, fmt.Errorf("failed to fetch PVC from API server: %w", err)
	}
	if pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer) {
		return nil, errors.New("PVC is being deleted")
	}
	if pvc.Status.Phase != v1.ClaimBound {
		return nil, errors.New("PVC is not bound")
	}
	if pvc.Spec.VolumeName == "" {
		return nil, errors.New("PVC has empty pvc.Spec.VolumeName")
	}
	return pvc, nil
}

func (p *Plugin) boundVolume(ctx context.Context, pvc *v1.PersistentVolumeClaim) (*v1.PersistentVolume, error) {
	name := pvc.Spec.VolumeName
	pv, err := p.cfg.API.GetPersistentVolume(ctx, name)
	if err != nil || pv == nil {
		return nil, fmt.Errorf("failed to fetch PV %s from API server: %w", name, err)
	}
	if pv.Spec.ClaimRef == nil {
		return nil, fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", name)
	}
	if pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", name, pv.Spec.ClaimRef.UID, pvc.UID)
	}
	return pv, nil
}

// driverPolicy is what the CSIDriver object says, with upstream's defaults
// when there is none.
type driverPolicy struct {
	attachRequired bool
	podInfo        bool
	fsGroup        storagev1.FSGroupPolicy
	// tokenRequests are the service-account tokens the driver is given
	// at publish, in the secrets when tokensInSecrets, else in the
	// volume context; republish asks for NodePublishVolume again every
	// refresh period (requiresRepublish).
	tokenRequests   []storagev1.TokenRequest
	tokensInSecrets bool
	republish       bool
	// seLinuxMount: the driver mounts with -o context (spec.seLinuxMount).
	seLinuxMount bool
}

func (p *Plugin) policy(ctx context.Context, s *source) (*driverPolicy, error) {
	d, err := p.cfg.API.GetCSIDriver(ctx, s.driver)
	if apierrors.IsNotFound(err) {
		if s.lifecycle == storagev1.VolumeLifecycleEphemeral {
			return nil, fmt.Errorf("volume mode %q not supported by driver %s (no CSIDriver object)", s.lifecycle, s.driver)
		}
		return &driverPolicy{attachRequired: true, fsGroup: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting CSIDriver %s: %w", s.driver, err)
	}
	modes := d.Spec.VolumeLifecycleModes
	if len(modes) == 0 {
		modes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if !slices.Contains(modes, s.lifecycle) {
		return nil, fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", s.lifecycle, s.driver, modes)
	}
	if len(d.Spec.TokenRequests) > 0 && p.cfg.Tokens == nil {
		return nil, fmt.Errorf("CSIDriver %s: spec.tokenRequests needs service-account tokens, and this node agent has no token requester", s.driver)
	}
	pol := &driverPolicy{attachRequired: d.Spec.AttachRequired == nil || *d.Spec.AttachRequired,
		podInfo: d.Spec.PodInfoOnMount != nil && *d.Spec.PodInfoOnMount, fsGroup: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy,
		tokenRequests:   d.Spec.TokenRequests,
		tokensInSecrets: d.Spec.ServiceAccountTokenInSecrets != nil && *d.Spec.ServiceAccountTokenInSecrets,
		republish:       d.Spec.RequiresRepublish != nil && *d.Spec.RequiresRepublish,
		seLinuxMount:    d.Spec.SELinuxMount != nil && *d.Spec.SELinuxMount}
	if d.Spec.FSGroupPolicy != nil {
		pol.fsGroup = *d.Spec.FSGroupPolicy
	}
	if s.lifecycle == storagev1.VolumeLifecycleEphemeral {
		pol.attachRequired = false // inline volumes are never attached
	}
	return pol, nil
}

// appliesFSGroup reports whether the node changes the volume's ownership,
// as upstream's supportsFSGroup: never with the policy None or for a
// read-only volume, always with File, and with ReadWriteOnceWithFSType
// for a volume with an fsType that is inline or whose PV lists
// ReadWriteOnce or ReadWriteOncePod.
func (s *source) appliesFSGroup(pod *v1.Pod, pol storagev1.FSGroupPolicy) bool {
	if pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.FSGroup == nil || pol == storagev1.NoneFSGroupPolicy || s.readOnly {
		return false
	}
	if pol == storagev1.FileFSGroupPolicy {
		return true
	}
	if s.fsType == "" {
		return false
	}
	if s.pv == nil {
		return true
	}
	return slices.Contains(s.pv.Spec.AccessModes, v1.ReadWriteOnce) || slices.Contains(s.pv.Spec.AccessModes, v1.ReadWriteOncePod)
}
