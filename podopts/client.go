package podopts

import (
	"context"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/kubeclient"
)

// Client serves ConfigMaps, Secrets and Services straight from the API
// server, one request per call, without caching. It suits small clusters and
// tests; a large node should put an informer-backed getter in front.
type Client struct {
	cs kubeclient.Interface
}

var (
	_ ConfigMapGetter = (*Client)(nil)
	_ SecretGetter    = (*Client)(nil)
	_ ServiceLister   = (*Client)(nil)
)

// FromClient returns a Client over cs, for Config.ConfigMaps, Config.Secrets
// and Config.Services.
func FromClient(cs kubeclient.Interface) *Client {
	return &Client{cs: cs}
}

// GetConfigMap GETs the ConfigMap. Not-found errors are rewritten to the
// kubelet's wording, `configmap "NAME" not found`.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	cm, err := c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
	}
	return cm, err
}

// GetSecret GETs the Secret. Not-found errors are rewritten to the kubelet's
// wording, `secret "NAME" not found`.
func (c *Client) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := c.cs.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
	}
	return s, err
}

// ListServices LISTs the namespace's Services from the API server's cache
// (resourceVersion "0").
func (c *Client) ListServices(ctx context.Context, namespace string) ([]*v1.Service, error) {
	list, err := c.cs.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Service, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
