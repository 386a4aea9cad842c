package admission

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"knative.dev/pkg/apis"
)

// knativeInvalid is the refusal of an object that Knative's validation
// rejects: a 422 whose causes name each field (metaErrs, then knErrs made of
// fe: as for every kind, and what kubectl and knbox's CLI print), and whose
// message carries Knative's
// own text, as its webhook words it on a cluster ("validation failed:
// invalid value: foo@bar: spec.template.spec.serviceAccountName\n..."), which
// clients and Knative's conformance tests read. nil when fe holds no error.
func knativeInvalid(obj runtime.Object, metaErrs, knErrs field.ErrorList, fe *apis.FieldError, rewrite func(string) string) error {
	var text *apis.FieldError
	for _, e := range fe.Filter(apis.ErrorLevel).WrappedErrors() {
		paths := make([]string, len(e.Paths))
		for i, p := range e.Paths {
			paths[i] = rewrite(p)
		}
		text = text.Also(&apis.FieldError{Message: e.Message, Paths: paths, Details: e.Details, Level: e.Level})
	}
	if text == nil {
		return nil
	}
	var gk schema.GroupKind
	if g, ok := obj.(interface {
		GetGroupVersionKind() schema.GroupVersionKind
	}); ok {
		gk = g.GetGroupVersionKind().GroupKind()
	}
	name := obj.(metav1.Object).GetName()
	var parts []string
	for _, e := range metaErrs {
		parts = append(parts, e.Error())
	}
	parts = append(parts, "validation failed: "+text.Error())
	se := apierrors.NewInvalid(gk, name, append(append(field.ErrorList{}, metaErrs...), knErrs...))
	se.ErrStatus.Message = fmt.Sprintf("%s %q is invalid: %s", gk.String(), name, strings.Join(parts, "; "))
	return se
}
