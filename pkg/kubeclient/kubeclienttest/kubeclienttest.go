// Package kubeclienttest lets tests give kubeclient's Informers one of
// client-go's clientsets, usually its fake; knbox itself lists and watches
// through a kubeclient.Clientset.
package kubeclienttest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/knbox/knbox/pkg/kubeclient"
)

// Typed lists and watches through kube's typed clients.
func Typed(kube kubernetes.Interface) kubeclient.Interface { return typed{kube} }

type typed struct{ kube kubernetes.Interface }

type listWatch interface {
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

func (t typed) ListerWatcher(resource schema.GroupResource, namespace string) cache.ListerWatcher {
	var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
	var w listWatch
	switch resource {
	case corev1.Resource("secrets"):
		c := t.kube.CoreV1().Secrets(namespace)
		list, w = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c
	case corev1.Resource("configmaps"):
		c := t.kube.CoreV1().ConfigMaps(namespace)
		list, w = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c
	case corev1.Resource("serviceaccounts"):
		c := t.kube.CoreV1().ServiceAccounts(namespace)
		list, w = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c
	case corev1.Resource("resourcequotas"):
		c := t.kube.CoreV1().ResourceQuotas(namespace)
		list, w = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c
	case nodev1.Resource("runtimeclasses"):
		c := t.kube.NodeV1().RuntimeClasses()
		list, w = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c
	default:
		panic(fmt.Sprintf("kubeclienttest: no typed client of %s", resource))
	}
	return &cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return list(context.TODO(), o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return w.Watch(context.TODO(), o) },
	}
}
