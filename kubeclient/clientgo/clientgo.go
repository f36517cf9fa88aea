// Package clientgo adapts a client-go clientset (real, or
// k8s.io/client-go/kubernetes/fake's) to kubeclient.Interface.
//
// It exists for tests that build their objects and reactors with the fake
// clientset, and for code that holds a clientset while it moves to a
// kubeclient.Client. Importing it links the whole clientset, so an agent
// that wants kubeclient's smaller binary must not import it outside its
// tests. Each method hands back the clientset's own typed client: that
// the file compiles is the proof that client-go's typed clients have the
// methods and signatures kubeclient's interfaces name.
package clientgo

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/nodekit/nodekit/kubeclient"
)

// Wrap is cs as a kubeclient.Interface. Requests go through cs, so they
// share its rate limiter.
func Wrap(cs kubernetes.Interface) kubeclient.Interface { return clientset{cs} }

// clientset is every group of kubeclient.Interface at once: no two
// groups name a resource alike.
type clientset struct{ cs kubernetes.Interface }

func (c clientset) CoreV1() kubeclient.CoreV1                     { return c }
func (c clientset) CoordinationV1() kubeclient.CoordinationV1     { return c }
func (c clientset) StorageV1() kubeclient.StorageV1               { return c }
func (c clientset) ResourceV1() kubeclient.ResourceV1             { return c }
func (c clientset) NodeV1() kubeclient.NodeV1                     { return c }
func (c clientset) CertificatesV1() kubeclient.CertificatesV1     { return c }
func (c clientset) AuthenticationV1() kubeclient.AuthenticationV1 { return c }
func (c clientset) AuthorizationV1() kubeclient.AuthorizationV1   { return c }

func (c clientset) Pods(ns string) kubeclient.Pods     { return c.cs.CoreV1().Pods(ns) }
func (c clientset) Nodes() kubeclient.Nodes            { return c.cs.CoreV1().Nodes() }
func (c clientset) Events(ns string) kubeclient.Events { return c.cs.CoreV1().Events(ns) }
func (c clientset) ConfigMaps(ns string) kubeclient.ConfigMaps {
	return c.cs.CoreV1().ConfigMaps(ns)
}
func (c clientset) Secrets(ns string) kubeclient.Secrets   { return c.cs.CoreV1().Secrets(ns) }
func (c clientset) Services(ns string) kubeclient.Services { return c.cs.CoreV1().Services(ns) }
func (c clientset) ServiceAccounts(ns string) kubeclient.ServiceAccounts {
	return c.cs.CoreV1().ServiceAccounts(ns)
}
func (c clientset) PersistentVolumeClaims(ns string) kubeclient.PersistentVolumeClaims {
	return c.cs.CoreV1().PersistentVolumeClaims(ns)
}
func (c clientset) PersistentVolumes() kubeclient.PersistentVolumes {
	return c.cs.CoreV1().PersistentVolumes()
}

func (c clientset) Leases(ns string) kubeclient.Leases {
	return c.cs.CoordinationV1().Leases(ns)
}

func (c clientset) CSIDrivers() kubeclient.CSIDrivers { return c.cs.StorageV1().CSIDrivers() }
func (c clientset) CSINodes() kubeclient.CSINodes     { return c.cs.StorageV1().CSINodes() }
func (c clientset) VolumeAttachments() kubeclient.VolumeAttachments {
	return c.cs.StorageV1().VolumeAttachments()
}

func (c clientset) ResourceSlices() kubeclient.ResourceSlices {
	return c.cs.ResourceV1().ResourceSlices()
}
func (c clientset) ResourceClaims(ns string) kubeclient.ResourceClaims {
	return c.cs.ResourceV1().ResourceClaims(ns)
}

func (c clientset) RuntimeClasses() kubeclient.RuntimeClasses { return c.cs.NodeV1().RuntimeClasses() }

func (c clientset) CertificateSigningRequests() kubeclient.CertificateSigningRequests {
	return c.cs.CertificatesV1().CertificateSigningRequests()
}

func (c clientset) TokenReviews() kubeclient.TokenReviews {
	return c.cs.AuthenticationV1().TokenReviews()
}

func (c clientset) SubjectAccessReviews() kubeclient.SubjectAccessReviews {
	return c.cs.AuthorizationV1().SubjectAccessReviews()
}

// IsWatchListSemanticsUnSupported passes on what the wrapped clientset
// says of streaming lists (the fake clientset has none), so a reflector
// given the wrapper lists as it would given the clientset.
func (c clientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.cs)
}
