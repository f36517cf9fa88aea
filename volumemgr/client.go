package volumemgr

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/kubeclient"
)

// Client serves ConfigMaps, Secrets and service-account tokens straight
// from the API server, one request per call, without caching: the
// Config.Objects and Config.Tokens of an agent with an API client.
type Client struct {
	cs kubeclient.Interface
}

var (
	_ ObjectGetter   = (*Client)(nil)
	_ TokenRequester = (*Client)(nil)
)

// FromClient returns a Client over cs.
func FromClient(cs kubeclient.Interface) *Client { return &Client{cs: cs} }

// GetConfigMap GETs the ConfigMap; not found reads `configmap "NAME" not
// found`, as the kubelet words it.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	cm, err := c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
	}
	return cm, err
}

// GetSecret GETs the Secret; not found reads `secret "NAME" not found`.
func (c *Client) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := c.cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
	}
	return s, err
}

// CreateToken POSTs a TokenRequest for the service account.
func (c *Client) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return c.cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
}
