package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
)

// TrimForCache is the informers' transform (cache.TransformFunc): it drops
// what no controller reads from an object before the informer caches it,
// so that each cached object costs what its spec, status, labels and
// annotations do. Today that is managedFields, which server-side apply and
// every update grow and which is often the largest part of a small
// object's metadata.
//
// Dropping it changes no write: an update whose object has no
// managedFields keeps the stored ones (kube-apiserver's rule, which the
// API server follows), and status updates take the status only.
// Annotations stay, last-applied-configuration included: the Service
// controller copies a Service's annotations to its Configuration and
// Route, as Knative does.
//
// client-go v0.29 also passes the objects already cached to the transform
// on every resync, while the controllers read them: an object without
// managedFields is left untouched, so that this is no write.
func TrimForCache(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil { // not a cache.DeletedFinalStateUnknown, not trimmed
		m.SetManagedFields(nil)
	}
	return obj, nil
}
