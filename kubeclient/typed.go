package kubeclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is what a typed client needs of an object type: something the
// scheme decodes into, with a name.
type object interface {
	runtime.Object
	GetName() string
}

// typed is one resource's client over its group's RESTClient: each
// method is one request, made as client-go's generated clients make it
// (protobuf preferred, the namespace only for a namespaced client, the
// options as query parameters), so a Client's requests are the
// clientset's. T is the object's pointer type, L its list's (the zero
// func for a resource that is only created).
type typed[T object, L runtime.Object] struct {
	rc       *rest.RESTClient
	params   runtime.ParameterCodec
	resource string
	ns       string
	newT     func() T
	newL     func() L
}

// req starts a request of verb on the resource: its content type,
// namespace and resource name set.
func (c *typed[T, L]) req(verb func() *rest.Request) *rest.Request {
	return verb().UseProtobufAsDefault().NamespaceIfScoped(c.ns, c.ns != "").Resource(c.resource)
}

// timeoutOf is a list or watch's server-side timeout as the request's
// own, as the generated clients set it.
func timeoutOf(opts *metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// into runs r and decodes its answer into a new T.
func (c *typed[T, L]) into(ctx context.Context, r *rest.Request) (T, error) {
	out := c.newT()
	err := r.Do(ctx).Into(out)
	return out, err
}

// Get reads one object.
func (c *typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	return c.into(ctx, c.req(c.rc.Get).Name(name).VersionedParams(&opts, c.params))
}

// List reads the objects the options select.
func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newL()
	err := c.req(c.rc.Get).VersionedParams(&opts, c.params).Timeout(timeoutOf(&opts)).Do(ctx).Into(out)
	return out, err
}

// Watch streams the changes of the objects the options select.
func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.req(c.rc.Get).VersionedParams(&opts, c.params).Timeout(timeoutOf(&opts)).Watch(ctx)
}

// Create writes a new object.
func (c *typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	return c.into(ctx, c.req(c.rc.Post).VersionedParams(&opts, c.params).Body(obj))
}

// Update replaces an object.
func (c *typed[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.into(ctx, c.req(c.rc.Put).Name(obj.GetName()).VersionedParams(&opts, c.params).Body(obj))
}

// UpdateStatus replaces an object's status subresource.
func (c *typed[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.into(ctx, c.req(c.rc.Put).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, c.params).Body(obj))
}

// Delete removes one object.
func (c *typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.req(c.rc.Delete).Name(name).Body(&opts).Do(ctx).Error()
}

// DeleteCollection removes the objects listOpts selects.
func (c *typed[T, L]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	return c.req(c.rc.Delete).VersionedParams(&listOpts, c.params).Timeout(timeoutOf(&listOpts)).Body(&opts).Do(ctx).Error()
}

// Patch changes an object, or one of its subresources, by a patch of
// type pt.
func (c *typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	return c.into(ctx, c.rc.Patch(pt).UseProtobufAsDefault().NamespaceIfScoped(c.ns, c.ns != "").Resource(c.resource).
		Name(name).SubResource(subresources...).VersionedParams(&opts, c.params).Body(data))
}
