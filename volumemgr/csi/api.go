package csi

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/kubeclient"
)

// API reads the objects the plugin resolves a volume with. Not-found errors
// must satisfy apierrors.IsNotFound (a missing CSIDriver object means the
// upstream defaults). FromClient adapts a clientset.
type API interface {
	GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
	GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	// GetSecret reads a secret a volume names for the driver
	// (nodeStageSecretRef, nodePublishSecretRef).
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// PatchPersistentVolumeClaimStatus applies a strategic-merge patch to
	// a claim's status (online expansion's capacity and conditions).
	PatchPersistentVolumeClaimStatus(ctx context.Context, namespace, name string, patch []byte) (*v1.PersistentVolumeClaim, error)
}

// FromClient returns an API reading straight from the API server.
func FromClient(cs kubeclient.Interface) API { return clientAPI{cs} }

type clientAPI struct{ cs kubeclient.Interface }

func (c clientAPI) GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return c.cs.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c clientAPI) GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	return c.cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

func (c clientAPI) GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	return c.cs.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
}

func (c clientAPI) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return c.cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c clientAPI) PatchPersistentVolumeClaimStatus(ctx context.Context, namespace, name string, patch []byte) (*v1.PersistentVolumeClaim, error) {
	return c.cs.CoreV1().PersistentVolumeClaims(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}
