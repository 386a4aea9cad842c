// Package kubeclient is knbox's client of the Kubernetes API groups it
// speaks as any client does: the few kinds of the core, node and RBAC
// groups it reads and writes (Clientset) and the shared informers of those
// that instances and builds read (Informers).
//
// It exists to keep client-go's generated clients out of the binary. Its
// umbrella Clientset (k8s.io/client-go/kubernetes) and informer factory
// (k8s.io/client-go/informers) reference every API group's typed client,
// informers and listers; and a group's typed client, once held in its
// interface, keeps every kind of the group with its apply configurations
// (the core group's are ~1 MB of code and tables). Every page of that is
// resident in knbox serve. This package makes the same requests as the
// typed clients, with their method signatures, through the groups' REST
// clients; it must not import client-go's umbrella Clientset or informers
// (test/deps keeps it so). A kind knbox comes to need gets a method here.
package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// Clientset is the REST clients of the core, node and RBAC groups.
type Clientset struct {
	core, node, rbac rest.Interface
}

// NewForConfig returns the Clientset of c. As client-go's Clientset, its
// groups share one HTTP client (one transport and its connections) and,
// when c sets QPS without a RateLimiter, one token bucket.
func NewForConfig(c *rest.Config) (*Clientset, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, errors.New("kubernetes client: Burst must be positive when QPS is set without a RateLimiter")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	var cs Clientset
	if cs.core, err = restClient(cfg, "/api", corev1.SchemeGroupVersion, hc); err != nil {
		return nil, err
	}
	if cs.node, err = restClient(cfg, "/apis", nodev1.SchemeGroupVersion, hc); err != nil {
		return nil, err
	}
	if cs.rbac, err = restClient(cfg, "/apis", rbacv1.SchemeGroupVersion, hc); err != nil {
		return nil, err
	}
	return &cs, nil
}

// restClient is the REST client of group version gv, configured as its
// typed client configures it.
func restClient(cfg rest.Config, apiPath string, gv schema.GroupVersion, hc *http.Client) (*rest.RESTClient, error) {
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rest.RESTClientForConfigAndClient(&cfg, hc)
}

// Pods is the client of namespace's Pods.
func (c *Clientset) Pods(namespace string) *Client[*corev1.Pod, *corev1.PodList] {
	return newClient[corev1.Pod, corev1.PodList](c.core, "pods", true, namespace)
}

// ServiceAccounts is the client of namespace's ServiceAccounts.
func (c *Clientset) ServiceAccounts(namespace string) *ServiceAccounts {
	return &ServiceAccounts{newClient[corev1.ServiceAccount, corev1.ServiceAccountList](c.core, "serviceaccounts", true, namespace)}
}

// RuntimeClasses is the client of RuntimeClasses.
func (c *Clientset) RuntimeClasses() *Client[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return newClient[nodev1.RuntimeClass, nodev1.RuntimeClassList](c.node, "runtimeclasses", false, "")
}

// RoleBindings is the client of namespace's RoleBindings.
func (c *Clientset) RoleBindings(namespace string) *Client[*rbacv1.RoleBinding, *rbacv1.RoleBindingList] {
	return newClient[rbacv1.RoleBinding, rbacv1.RoleBindingList](c.rbac, "rolebindings", true, namespace)
}

// ListerWatcher lists and watches resource in namespace ("": in all, or a
// cluster-scoped resource), for Informers; the objects are decoded into
// the Go types that the response names. The requests are the typed
// clients' (the path names no namespace for "").
func (c *Clientset) ListerWatcher(resource schema.GroupResource, namespace string) cache.ListerWatcher {
	rc := c.group(resource.Group)
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return rc.Get().NamespaceIfScoped(namespace, namespace != "").Resource(resource.Resource).VersionedParams(&o, scheme.ParameterCodec).
				Timeout(timeoutOf(o)).Do(context.TODO()).Get()
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return rc.Get().NamespaceIfScoped(namespace, namespace != "").Resource(resource.Resource).VersionedParams(&o, scheme.ParameterCodec).
				Timeout(timeoutOf(o)).Watch(context.TODO())
		},
	}
}

// group is the REST client of group; another group is a programming error.
func (c *Clientset) group(group string) rest.Interface {
	switch group {
	case corev1.GroupName:
		return c.core
	case nodev1.GroupName:
		return c.node
	case rbacv1.GroupName:
		return c.rbac
	}
	panic(fmt.Sprintf("kubeclient: no client of group %q", group))
}

// EventSink records client-go's events (record.EventSink) through the API,
// as client-go's typedcorev1.EventSinkImpl over the events of all
// namespaces does: each event in its own namespace.
func (c *Clientset) EventSink() *EventSink { return &EventSink{c.core} }

// EventSink is a Clientset's record.EventSink.
type EventSink struct{ rest rest.Interface }

// Create creates event.
func (s *EventSink) Create(event *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Post().NamespaceIfScoped(event.Namespace, event.Namespace != "").Resource("events").
		Body(event).Do(context.TODO()).Into(out)
	return out, err
}

// Update replaces event (its ResourceVersion set).
func (s *EventSink) Update(event *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Put().NamespaceIfScoped(event.Namespace, event.Namespace != "").Resource("events").Name(event.Name).
		Body(event).Do(context.TODO()).Into(out)
	return out, err
}

// Patch applies the strategic merge patch data to the event that
// incomplete names.
func (s *EventSink) Patch(incomplete *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.rest.Patch(types.StrategicMergePatchType).NamespaceIfScoped(incomplete.Namespace, incomplete.Namespace != "").
		Resource("events").Name(incomplete.Name).Body(data).Do(context.TODO()).Into(out)
	return out, err
}

// ServiceAccounts is the client of a namespace's ServiceAccounts, with
// their token subresource.
type ServiceAccounts struct {
	*Client[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

// CreateToken asks for a token of ServiceAccount name (TokenRequest).
func (s *ServiceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.on(s.rest.Post()).Name(name).SubResource("token").
		VersionedParams(&opts, scheme.ParameterCodec).Body(tr).Do(ctx).Into(out)
	return out, err
}

// timeoutOf is a list's or watch's timeout, as the typed clients read it.
func timeoutOf(o metav1.ListOptions) time.Duration {
	if o.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*o.TimeoutSeconds) * time.Second
}

var _ Interface = (*Clientset)(nil)
