package kubeclient

import (
	"fmt"

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
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Scheme is the types a Client encodes and decodes: the eight groups of
// Interface and meta/v1's options and Status. It is immutable once built;
// share one between the Clients of an agent.
type Scheme struct {
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	params runtime.ParameterCodec
}

// NewScheme registers the groups of Interface.
func NewScheme() (*Scheme, error) {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		coordinationv1.AddToScheme,
		storagev1.AddToScheme,
		resourcev1.AddToScheme,
		nodev1.AddToScheme,
		certificatesv1.AddToScheme,
		authenticationv1.AddToScheme,
		authorizationv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kubeclient: registering the API types: %w", err)
		}
	}
	return &Scheme{scheme: s, codecs: serializer.NewCodecFactory(s), params: runtime.NewParameterCodec(s)}, nil
}

// Runtime is the runtime.Scheme itself, for what needs one beside the
// client (an event recorder resolving an object's kind, a decoder of
// pod manifests).
func (s *Scheme) Runtime() *runtime.Scheme { return s.scheme }

// Codecs is the scheme's codec factory.
func (s *Scheme) Codecs() serializer.CodecFactory { return s.codecs }
