package apiserver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/quota"
)

// storeObjects is admission.Objects (and quota.Source) over the server's
// store: local reads, never a request to the server itself.
type storeObjects struct{ s *Server }

var _ admission.Objects = storeObjects{}

func (o storeObjects) list(gr schema.GroupResource, namespace string, each func(any)) error {
	k := o.s.kinds.Lookup(gr.Group, gr.Resource)
	if k == nil {
		return nil
	}
	entries, _, err := o.s.store.List(k.storeResource(), namespace)
	if err != nil {
		return err
	}
	for _, e := range entries {
		obj, err := decodeStored(k, e.Value)
		if err != nil {
			return err
		}
		each(obj)
	}
	return nil
}

func (o storeObjects) ResourceQuotas(_ context.Context, namespace string) ([]corev1.ResourceQuota, error) {
	var out []corev1.ResourceQuota
	err := o.list(corev1.Resource("resourcequotas"), namespace, func(v any) { out = append(out, *v.(*corev1.ResourceQuota)) })
	return out, err
}

func (o storeObjects) LimitRanges(_ context.Context, namespace string) ([]corev1.LimitRange, error) {
	var out []corev1.LimitRange
	err := o.list(corev1.Resource("limitranges"), namespace, func(v any) { out = append(out, *v.(*corev1.LimitRange)) })
	return out, err
}

func (o storeObjects) Revisions(_ context.Context, namespace string) ([]*servingv1.Revision, error) {
	var out []*servingv1.Revision
	err := o.list(servingv1.Resource("revisions"), namespace, func(v any) { out = append(out, v.(*servingv1.Revision)) })
	return out, err
}

func (o storeObjects) Count(_ context.Context, gr schema.GroupResource, namespace string) (int64, error) {
	k := o.s.kinds.Lookup(gr.Group, gr.Resource)
	if k == nil || !k.Namespaced {
		return 0, nil
	}
	entries, _, err := o.s.store.List(k.storeResource(), namespace)
	return int64(len(entries)), err
}

func (o storeObjects) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	k := o.s.kinds.Lookup("", "namespaces")
	obj, _, err := o.s.getStored(k, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

// RuntimeClass implements quota.RuntimeClasses: the ledger counts each
// instance's RuntimeClass overhead.
func (o storeObjects) RuntimeClass(_ context.Context, name string) (*nodev1.RuntimeClass, error) {
	k := o.s.kinds.Lookup(nodev1.GroupName, "runtimeclasses")
	if k == nil {
		return nil, apierrors.NewNotFound(nodev1.Resource("runtimeclasses"), name)
	}
	obj, _, err := o.s.getStored(k, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*nodev1.RuntimeClass), nil
}

var _ quota.RuntimeClasses = storeObjects{}

// wireTenants gives admission its store-backed reads and makes the quota
// Ledger that admission and the runtime share.
func (s *Server) wireTenants() {
	a := s.opts.Admitter
	if a.Objects == nil {
		a.Objects = storeObjects{s}
	}
	if a.Ledger == nil {
		a.Ledger = quota.NewLedger(a.Objects)
	}
}

// Ledger is the quota ledger of this server: the runtime reserves each
// instance's resources through it before starting the instance.
func (s *Server) Ledger() *quota.Ledger { return s.opts.Admitter.Ledger }
