package kubeclient

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Interface is the API groups a node agent talks to. Client implements
// it; clientgo.Wrap adapts a client-go clientset to it.
type Interface interface {
	CoreV1() CoreV1
	CoordinationV1() CoordinationV1
	StorageV1() StorageV1
	ResourceV1() ResourceV1
	NodeV1() NodeV1
	CertificatesV1() CertificatesV1
	AuthenticationV1() AuthenticationV1
	AuthorizationV1() AuthorizationV1
}

// Resource is one kind of object: read, watched, written and deleted
// with client-go's typed-client signatures. T is the object's pointer
// type, L its list's.
type Resource[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusResource is a Resource with a status subresource.
type StatusResource[T, L any] interface {
	Resource[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Creator is a kind of object that is only ever created: a review the
// API server answers in the response.
type Creator[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// The resources of core/v1 a node agent uses.
type (
	Pods                   = StatusResource[*corev1.Pod, *corev1.PodList]
	Nodes                  = StatusResource[*corev1.Node, *corev1.NodeList]
	Events                 = Resource[*corev1.Event, *corev1.EventList]
	ConfigMaps             = Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	Secrets                = Resource[*corev1.Secret, *corev1.SecretList]
	Services               = StatusResource[*corev1.Service, *corev1.ServiceList]
	PersistentVolumeClaims = StatusResource[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]
	PersistentVolumes      = StatusResource[*corev1.PersistentVolume, *corev1.PersistentVolumeList]
)

// ServiceAccounts are read and asked for tokens (the TokenRequest
// subresource, what projected service account tokens are made of).
type ServiceAccounts interface {
	Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	CreateToken(ctx context.Context, serviceAccountName string, tokenRequest *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// CoreV1 is the core group.
type CoreV1 interface {
	Pods(namespace string) Pods
	Nodes() Nodes
	Events(namespace string) Events
	ConfigMaps(namespace string) ConfigMaps
	Secrets(namespace string) Secrets
	Services(namespace string) Services
	ServiceAccounts(namespace string) ServiceAccounts
	PersistentVolumeClaims(namespace string) PersistentVolumeClaims
	PersistentVolumes() PersistentVolumes
}

// Leases is coordination/v1's Lease, the node's heartbeat.
type Leases = Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]

// CoordinationV1 is the coordination.k8s.io group.
type CoordinationV1 interface {
	Leases(namespace string) Leases
}

// The resources of storage/v1 a node agent uses.
type (
	CSIDrivers        = Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList]
	CSINodes          = Resource[*storagev1.CSINode, *storagev1.CSINodeList]
	VolumeAttachments = StatusResource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList]
)

// StorageV1 is the storage.k8s.io group.
type StorageV1 interface {
	CSIDrivers() CSIDrivers
	CSINodes() CSINodes
	VolumeAttachments() VolumeAttachments
}

// The resources of resource/v1 (dynamic resource allocation) a node agent
// uses.
type (
	ResourceClaims = StatusResource[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList]
)

// ResourceSlices are the devices a node's DRA drivers publish; the agent
// deletes a gone driver's slices as one collection.
type ResourceSlices interface {
	Resource[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList]
	DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error
}

// ResourceV1 is the resource.k8s.io group.
type ResourceV1 interface {
	ResourceSlices() ResourceSlices
	ResourceClaims(namespace string) ResourceClaims
}

// RuntimeClasses is node/v1's RuntimeClass.
type RuntimeClasses = Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList]

// NodeV1 is the node.k8s.io group.
type NodeV1 interface {
	RuntimeClasses() RuntimeClasses
}

// CertificateSigningRequests is certificates/v1's CSR, how a node asks
// for its client and serving certificates.
type CertificateSigningRequests = StatusResource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList]

// CertificatesV1 is the certificates.k8s.io group.
type CertificatesV1 interface {
	CertificateSigningRequests() CertificateSigningRequests
}

// TokenReviews authenticates bearer tokens for the agent's own server.
type TokenReviews = Creator[*authenticationv1.TokenReview]

// AuthenticationV1 is the authentication.k8s.io group.
type AuthenticationV1 interface {
	TokenReviews() TokenReviews
}

// SubjectAccessReviews authorizes requests to the agent's own server.
type SubjectAccessReviews = Creator[*authorizationv1.SubjectAccessReview]

// AuthorizationV1 is the authorization.k8s.io group.
type AuthorizationV1 interface {
	SubjectAccessReviews() SubjectAccessReviews
}
