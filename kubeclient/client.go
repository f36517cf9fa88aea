package kubeclient

import (
	"context"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is Interface over HTTP: one rest.RESTClient per group version,
// one transport and one rate limiter for all of them.
type Client struct {
	scheme *Scheme
	core, coordination, storage, resource, node, certificates,
	authentication, authorization *rest.RESTClient
}

var _ Interface = (*Client)(nil)

// New builds a Client from cfg as client-go's clientset does: one HTTP
// client (one connection pool) for every group, and, unless cfg carries
// a RateLimiter, one token bucket of cfg.QPS and cfg.Burst that every
// request of every group waits on. scheme may be nil for a new one.
func New(cfg *rest.Config, scheme *Scheme) (*Client, error) {
	if scheme == nil {
		var err error
		if scheme, err = NewScheme(); err != nil {
			return nil, err
		}
	}
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubeclient: burst %d: it must be above 0 when QPS (%g) is", c.Burst, c.QPS)
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	cl := &Client{scheme: scheme}
	for _, g := range []struct {
		into *(*rest.RESTClient)
		gv   schema.GroupVersion
	}{
		{&cl.core, corev1.SchemeGroupVersion},
		{&cl.coordination, coordinationv1.SchemeGroupVersion},
		{&cl.storage, storagev1.SchemeGroupVersion},
		{&cl.resource, resourcev1.SchemeGroupVersion},
		{&cl.node, nodev1.SchemeGroupVersion},
		{&cl.certificates, certificatesv1.SchemeGroupVersion},
		{&cl.authentication, authenticationv1.SchemeGroupVersion},
		{&cl.authorization, authorizationv1.SchemeGroupVersion},
	} {
		if *g.into, err = restClientFor(c, httpClient, g.gv, scheme); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// restClientFor is one group version's client, configured as a generated
// typed client configures its own.
func restClientFor(c rest.Config, h *http.Client, gv schema.GroupVersion, s *Scheme) (*rest.RESTClient, error) {
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(s.scheme, s.codecs).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&c, h)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: the %s client: %w", gv, err)
	}
	return rc, nil
}

// Scheme is the types the client knows.
func (c *Client) Scheme() *Scheme { return c.scheme }

// resource is a typed client of one resource in namespace ns ("" for a
// cluster-scoped resource or all namespaces).
func resource[T object, L runtime.Object](rc *rest.RESTClient, s *Scheme, name, ns string, newT func() T, newL func() L) *typed[T, L] {
	return &typed[T, L]{rc: rc, params: s.params, resource: name, ns: ns, newT: newT, newL: newL}
}

// CoreV1 is the core group.
func (c *Client) CoreV1() CoreV1 { return coreV1{c} }

type coreV1 struct{ c *Client }

func (g coreV1) Pods(ns string) Pods {
	return resource(g.c.core, g.c.scheme, "pods", ns, func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

func (g coreV1) Nodes() Nodes {
	return resource(g.c.core, g.c.scheme, "nodes", "", func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

func (g coreV1) Events(ns string) Events {
	return resource(g.c.core, g.c.scheme, "events", ns, func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

func (g coreV1) ConfigMaps(ns string) ConfigMaps {
	return resource(g.c.core, g.c.scheme, "configmaps", ns, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

func (g coreV1) Secrets(ns string) Secrets {
	return resource(g.c.core, g.c.scheme, "secrets", ns, func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}

func (g coreV1) Services(ns string) Services {
	return resource(g.c.core, g.c.scheme, "services", ns, func() *corev1.Service { return &corev1.Service{} }, func() *corev1.ServiceList { return &corev1.ServiceList{} })
}

func (g coreV1) ServiceAccounts(ns string) ServiceAccounts {
	return serviceAccounts{resource(g.c.core, g.c.scheme, "serviceaccounts", ns, func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} }, func() *corev1.ServiceAccountList { return &corev1.ServiceAccountList{} })}
}

func (g coreV1) PersistentVolumeClaims(ns string) PersistentVolumeClaims {
	return resource(g.c.core, g.c.scheme, "persistentvolumeclaims", ns, func() *corev1.PersistentVolumeClaim { return &corev1.PersistentVolumeClaim{} }, func() *corev1.PersistentVolumeClaimList { return &corev1.PersistentVolumeClaimList{} })
}

func (g coreV1) PersistentVolumes() PersistentVolumes {
	return resource(g.c.core, g.c.scheme, "persistentvolumes", "", func() *corev1.PersistentVolume { return &corev1.PersistentVolume{} }, func() *corev1.PersistentVolumeList { return &corev1.PersistentVolumeList{} })
}

// serviceAccounts adds the token subresource to the typed client.
type serviceAccounts struct {
	*typed[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

// CreateToken asks for a token of the service account (POST
// serviceaccounts/NAME/token).
func (s serviceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.req(s.rc.Post).Name(name).SubResource("token").VersionedParams(&opts, s.params).Body(tr).Do(ctx).Into(out)
	return out, err
}

// CoordinationV1 is the coordination.k8s.io group.
func (c *Client) CoordinationV1() CoordinationV1 { return coordinationV1{c} }

type coordinationV1 struct{ c *Client }

func (g coordinationV1) Leases(ns string) Leases {
	return resource(g.c.coordination, g.c.scheme, "leases", ns, func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

// StorageV1 is the storage.k8s.io group.
func (c *Client) StorageV1() StorageV1 { return storageV1{c} }

type storageV1 struct{ c *Client }

func (g storageV1) CSIDrivers() CSIDrivers {
	return resource(g.c.storage, g.c.scheme, "csidrivers", "", func() *storagev1.CSIDriver { return &storagev1.CSIDriver{} }, func() *storagev1.CSIDriverList { return &storagev1.CSIDriverList{} })
}

func (g storageV1) CSINodes() CSINodes {
	return resource(g.c.storage, g.c.scheme, "csinodes", "", func() *storagev1.CSINode { return &storagev1.CSINode{} }, func() *storagev1.CSINodeList { return &storagev1.CSINodeList{} })
}

func (g storageV1) VolumeAttachments() VolumeAttachments {
	return resource(g.c.storage, g.c.scheme, "volumeattachments", "", func() *storagev1.VolumeAttachment { return &storagev1.VolumeAttachment{} }, func() *storagev1.VolumeAttachmentList { return &storagev1.VolumeAttachmentList{} })
}

// ResourceV1 is the resource.k8s.io group.
func (c *Client) ResourceV1() ResourceV1 { return resourceV1{c} }

type resourceV1 struct{ c *Client }

func (g resourceV1) ResourceSlices() ResourceSlices {
	return resource(g.c.resource, g.c.scheme, "resourceslices", "", func() *resourcev1.ResourceSlice { return &resourcev1.ResourceSlice{} }, func() *resourcev1.ResourceSliceList { return &resourcev1.ResourceSliceList{} })
}

func (g resourceV1) ResourceClaims(ns string) ResourceClaims {
	return resource(g.c.resource, g.c.scheme, "resourceclaims", ns, func() *resourcev1.ResourceClaim { return &resourcev1.ResourceClaim{} }, func() *resourcev1.ResourceClaimList { return &resourcev1.ResourceClaimList{} })
}

// NodeV1 is the node.k8s.io group.
func (c *Client) NodeV1() NodeV1 { return nodeV1{c} }

type nodeV1 struct{ c *Client }

func (g nodeV1) RuntimeClasses() RuntimeClasses {
	return resource(g.c.node, g.c.scheme, "runtimeclasses", "", func() *nodev1.RuntimeClass { return &nodev1.RuntimeClass{} }, func() *nodev1.RuntimeClassList { return &nodev1.RuntimeClassList{} })
}

// CertificatesV1 is the certificates.k8s.io group.
func (c *Client) CertificatesV1() CertificatesV1 { return certificatesV1{c} }

type certificatesV1 struct{ c *Client }

func (g certificatesV1) CertificateSigningRequests() CertificateSigningRequests {
	return resource(g.c.certificates, g.c.scheme, "certificatesigningrequests", "", func() *certificatesv1.CertificateSigningRequest { return &certificatesv1.CertificateSigningRequest{} }, func() *certificatesv1.CertificateSigningRequestList {
		return &certificatesv1.CertificateSigningRequestList{}
	})
}

// AuthenticationV1 is the authentication.k8s.io group.
func (c *Client) AuthenticationV1() AuthenticationV1 { return authenticationV1{c} }

type authenticationV1 struct{ c *Client }

func (g authenticationV1) TokenReviews() TokenReviews {
	return resource[*authenticationv1.TokenReview, runtime.Object](g.c.authentication, g.c.scheme, "tokenreviews", "", func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} }, nil)
}

// AuthorizationV1 is the authorization.k8s.io group.
func (c *Client) AuthorizationV1() AuthorizationV1 { return authorizationV1{c} }

type authorizationV1 struct{ c *Client }

func (g authorizationV1) SubjectAccessReviews() SubjectAccessReviews {
	return resource[*authorizationv1.SubjectAccessReview, runtime.Object](g.c.authorization, g.c.scheme, "subjectaccessreviews", "", func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} }, nil)
}
