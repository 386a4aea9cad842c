package kubeclient

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Object is an object of the API a Client reads and writes.
type Object interface {
	runtime.Object
	GetName() string
}

// Client reads and writes the objects of one resource in one namespace (or
// a cluster-scoped resource): T is their Go type, L their list's. It makes
// the requests of client-go's typed clients, with their method signatures,
// for the verbs knbox uses.
type Client[T Object, L runtime.Object] struct {
	rest       rest.Interface
	resource   string
	namespaced bool
	namespace  string
	newObject  func() T
	newList    func() L
}

// newClient is the client of resource through rc, in namespace ("": all
// namespaces) when namespaced; T and L are the object and list types.
func newClient[T, L any, PT interface {
	*T
	Object
}, PL interface {
	*L
	runtime.Object
}](rc rest.Interface, resource string, namespaced bool, namespace string) *Client[PT, PL] {
	return &Client[PT, PL]{rest: rc, resource: resource, namespaced: namespaced, namespace: namespace,
		newObject: func() PT { return PT(new(T)) }, newList: func() PL { return PL(new(L)) }}
}

// on aims r at the resource, in the namespace if namespaced (as the typed
// clients do: a cluster-scoped one sets none, and a request may not set
// an empty one on creation).
func (c *Client[T, L]) on(r *rest.Request) *rest.Request {
	if c.namespaced {
		r = r.Namespace(c.namespace)
	}
	return r.Resource(c.resource)
}

// Get reads the object name.
func (c *Client[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Get()).Name(name).
		VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List lists the objects.
func (c *Client[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newList()
	err := c.on(c.rest.Get()).
		VersionedParams(&opts, scheme.ParameterCodec).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch watches the objects.
func (c *Client[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.on(c.rest.Get()).
		VersionedParams(&opts, scheme.ParameterCodec).Timeout(timeoutOf(opts)).Watch(ctx)
}

// Create creates obj.
func (c *Client[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Post()).
		VersionedParams(&opts, scheme.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj.
func (c *Client[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Put()).Name(obj.GetName()).
		VersionedParams(&opts, scheme.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object name.
func (c *Client[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.on(c.rest.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}
