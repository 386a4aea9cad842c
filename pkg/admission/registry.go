package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// checkRegistryImages asks RegistryImage about each container image of a
// revision template whose image changed (a new object, or a new image on
// update): an image of knbox's embedded registry from another namespace
// may be named only by a user who may pull it.
func (a *Admitter) checkRegistryImages(ctx context.Context, req Request) (*apis.FieldError, error) {
	if a.RegistryImage == nil {
		return nil, nil
	}
	spec, prefix := revisionSpec(req.Object)
	if spec == nil {
		return nil, nil
	}
	var old []corev1.Container
	if req.Old != nil {
		if o, _ := revisionSpec(req.Old); o != nil {
			old = append(old, o.Containers...)
		}
	}
	ns := req.Object.(interface{ GetNamespace() string }).GetNamespace()
	var fe *apis.FieldError
	for i, c := range append(append([]corev1.Container(nil), spec.Containers...), spec.InitContainers...) {
		unchanged := false
		for _, oc := range old {
			if oc.Image == c.Image {
				unchanged = true
			}
		}
		if unchanged || c.Image == "" {
			continue
		}
		reason, err := a.RegistryImage(ctx, req.User, ns, c.Image)
		if err != nil {
			return nil, fmt.Errorf("check image %s: %w", c.Image, err)
		}
		if reason != "" {
			path := fmt.Sprintf("%scontainers[%d].image", prefix, i)
			if i >= len(spec.Containers) {
				path = fmt.Sprintf("%sinitContainers[%d].image", prefix, i-len(spec.Containers))
			}
			fe = fe.Also(apis.ErrInvalidValue(c.Image, path, reason))
		}
	}
	return fe, nil
}

// revisionSpec returns the revision template of a Service, Configuration
// or Revision, and the path prefix of its fields.
func revisionSpec(obj runtime.Object) (*servingv1.RevisionSpec, string) {
	switch o := obj.(type) {
	case *servingv1.Service:
		return &o.Spec.Template.Spec, "spec.template.spec."
	case *servingv1.Configuration:
		return &o.Spec.Template.Spec, "spec.template.spec."
	case *servingv1.Revision:
		return &o.Spec, "spec."
	}
	return nil, ""
}
