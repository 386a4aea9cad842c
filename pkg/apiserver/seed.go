package apiserver

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apis/serving/v1alpha1"
)

// SeedVersions returns serving.knative.dev/v1alpha1 (the seed API) as a
// served version of each Knative kind, converted to and from v1 for
// storage.
func SeedVersions() map[string]map[string]*AltVersion {
	validate := func(o runtime.Object) error {
		v, ok := o.(apis.Validatable)
		if !ok {
			return fmt.Errorf("%T cannot be validated", o)
		}
		if fe := v.Validate(context.Background()); fe != nil && fe.Filter(apis.ErrorLevel) != nil {
			return fe.Filter(apis.ErrorLevel)
		}
		return nil
	}
	alt := func(newObj, newList func() runtime.Object, to func(o, base runtime.Object) (runtime.Object, error), from func(runtime.Object) (runtime.Object, error)) map[string]*AltVersion {
		return map[string]*AltVersion{"v1alpha1": {
			New: newObj, NewList: newList, ToStorage: to, FromStorage: from,
			Validate: validate, FieldPath: v1alpha1.FieldPathFromV1,
		}}
	}
	return map[string]map[string]*AltVersion{
		"Service": alt(
			func() runtime.Object { return &v1alpha1.Service{} },
			func() runtime.Object { return &v1alpha1.ServiceList{} },
			func(o, base runtime.Object) (runtime.Object, error) {
				b, _ := base.(*servingv1.Service)
				return v1alpha1.ServiceToV1(o.(*v1alpha1.Service), b)
			},
			func(o runtime.Object) (runtime.Object, error) { return v1alpha1.ServiceFromV1(o.(*servingv1.Service)) },
		),
		"Configuration": alt(
			func() runtime.Object { return &v1alpha1.Configuration{} },
			func() runtime.Object { return &v1alpha1.ConfigurationList{} },
			func(o, _ runtime.Object) (runtime.Object, error) {
				return v1alpha1.ConfigurationToV1(o.(*v1alpha1.Configuration))
			},
			func(o runtime.Object) (runtime.Object, error) {
				return v1alpha1.ConfigurationFromV1(o.(*servingv1.Configuration))
			},
		),
		"Revision": alt(
			func() runtime.Object { return &v1alpha1.Revision{} },
			func() runtime.Object { return &v1alpha1.RevisionList{} },
			func(o, _ runtime.Object) (runtime.Object, error) {
				return v1alpha1.RevisionToV1(o.(*v1alpha1.Revision))
			},
			func(o runtime.Object) (runtime.Object, error) {
				return v1alpha1.RevisionFromV1(o.(*servingv1.Revision))
			},
		),
		"Route": alt(
			func() runtime.Object { return &v1alpha1.Route{} },
			func() runtime.Object { return &v1alpha1.RouteList{} },
			func(o, _ runtime.Object) (runtime.Object, error) { return v1alpha1.RouteToV1(o.(*v1alpha1.Route)) },
			func(o runtime.Object) (runtime.Object, error) { return v1alpha1.RouteFromV1(o.(*servingv1.Route)) },
		),
	}
}
