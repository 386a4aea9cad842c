package kubeclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// NewDynamicInformer returns an informer of the objects of gvr in every
// namespace, as unstructured.Unstructured, the one informer that
// client-go's dynamic informer factory would make; the factory itself
// (k8s.io/client-go/dynamic/dynamicinformer) imports client-go's informer
// factory. Its user runs it.
func NewDynamicInformer(client dynamic.Interface, gvr schema.GroupVersionResource, resync time.Duration) cache.SharedIndexInformer {
	r := client.Resource(gvr)
	return cache.NewSharedIndexInformerWithOptions(
		&cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				return r.List(context.TODO(), o)
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				return r.Watch(context.TODO(), o)
			},
		},
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{
			ResyncPeriod:      resync,
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: gvr.String(),
		},
	)
}
