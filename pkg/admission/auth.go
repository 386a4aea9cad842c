package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Limits of a projected serviceAccountToken's lifetime, as Kubernetes
// validates pods (and the TokenRequest API).
const (
	minTokenExpirationSeconds = 600
	maxTokenExpirationSeconds = 1 << 32
)

// admitAuth defaults and validates the kinds of authentication and
// authorization as Kubernetes does: ServiceAccount, Role, ClusterRole,
// RoleBinding and ClusterRoleBinding. ok is false for other kinds.
func admitAuth(req Request) (errs field.ErrorList, ok bool) {
	metaPath := field.NewPath("metadata")
	rbacName := path.ValidatePathSegmentName
	switch o := req.Object.(type) {
	case *corev1.ServiceAccount:
		return apivalidation.ValidateObjectMeta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metaPath), true
	case *rbacv1.Role:
		errs = apivalidation.ValidateObjectMeta(&o.ObjectMeta, true, rbacName, metaPath)
		return append(errs, validateRules(o.Rules, true)...), true
	case *rbacv1.ClusterRole:
		errs = apivalidation.ValidateObjectMeta(&o.ObjectMeta, false, rbacName, metaPath)
		errs = append(errs, validateRules(o.Rules, false)...)
		if a := o.AggregationRule; a != nil {
			p := field.NewPath("aggregationRule", "clusterRoleSelectors")
			if len(a.ClusterRoleSelectors) == 0 {
				errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
			}
			for i := range a.ClusterRoleSelectors {
				errs = append(errs, metavalidation.ValidateLabelSelector(&a.ClusterRoleSelectors[i], metavalidation.LabelSelectorValidationOptions{}, p.Index(i))...)
			}
		}
		return errs, true
	case *rbacv1.RoleBinding:
		defaultBinding(&o.RoleRef, o.Subjects)
		errs = apivalidation.ValidateObjectMeta(&o.ObjectMeta, true, rbacName, metaPath)
		errs = append(errs, validateBinding(o.RoleRef, o.Subjects, true)...)
		if old, _ := req.Old.(*rbacv1.RoleBinding); old != nil && old.RoleRef != o.RoleRef {
			errs = append(errs, field.Invalid(field.NewPath("roleRef"), o.RoleRef, "cannot change roleRef"))
		}
		return errs, true
	case *rbacv1.ClusterRoleBinding:
		defaultBinding(&o.RoleRef, o.Subjects)
		errs = apivalidation.ValidateObjectMeta(&o.ObjectMeta, false, rbacName, metaPath)
		errs = append(errs, validateBinding(o.RoleRef, o.Subjects, false)...)
		if old, _ := req.Old.(*rbacv1.ClusterRoleBinding); old != nil && old.RoleRef != o.RoleRef {
			errs = append(errs, field.Invalid(field.NewPath("roleRef"), o.RoleRef, "cannot change roleRef"))
		}
		return errs, true
	}
	return nil, false
}

// validateRules checks rules as Kubernetes does. Verbs are not checked
// against a list: RBAC verbs are open (escalate, bind, use, ...), and a
// verb no request uses matches nothing.
func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := field.NewPath("rules").Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

// defaultBinding fills the API groups Kubernetes defaults: the roleRef's
// and those of User and Group subjects.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	rp := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(rp.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(rp.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(rp.Child("name"), ""))
	} else {
		for _, msg := range path.ValidatePathSegmentName(ref.Name, false) {
			errs = append(errs, field.Invalid(rp.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		p := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Name != "" {
				for _, msg := range apivalidation.NameIsDNSSubdomain(s.Name, false) {
					errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(p.Child("namespace"), "a ServiceAccount subject of a ClusterRoleBinding needs its namespace"))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// checkServiceAccount refuses a pod spec whose serviceAccountName names a
// ServiceAccount that does not exist in the object's namespace (on a
// cluster the Revision would fail to start its pods: knbox says so at
// once), and projected serviceAccountToken lifetimes the TokenRequest API
// would refuse.
func (a *Admitter) checkServiceAccount(ctx context.Context, obj runtime.Object) (*apis.FieldError, error) {
	var (
		spec   *servingv1.RevisionSpec
		prefix string
	)
	switch o := obj.(type) {
	case *servingv1.Service:
		spec, prefix = &o.Spec.Template.Spec, "spec.template.spec."
	case *servingv1.Configuration:
		spec, prefix = &o.Spec.Template.Spec, "spec.template.spec."
	case *servingv1.Revision:
		spec, prefix = &o.Spec, "spec."
	default:
		return nil, nil
	}
	var fe *apis.FieldError
	for i, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for j, src := range v.Projected.Sources {
			t := src.ServiceAccountToken
			if t == nil || t.ExpirationSeconds == nil {
				continue
			}
			p := fmt.Sprintf("%svolumes[%d].projected.sources[%d].serviceAccountToken.expirationSeconds", prefix, i, j)
			switch secs := *t.ExpirationSeconds; {
			case secs < minTokenExpirationSeconds:
				fe = fe.Also(apis.ErrInvalidValue(secs, p, "may not specify a duration less than 10 minutes"))
			case secs > maxTokenExpirationSeconds:
				fe = fe.Also(apis.ErrInvalidValue(secs, p, "may not specify a duration larger than 2^32 seconds"))
			}
		}
	}
	name := spec.ServiceAccountName
	ns := obj.(metav1.Object).GetNamespace()
	if name == "" || a.ServiceAccountExists == nil || len(apivalidation.NameIsDNSSubdomain(name, false)) > 0 {
		return fe, nil // Knative's validation speaks about a malformed name
	}
	ok, err := a.ServiceAccountExists(ctx, ns, name)
	if err != nil {
		return nil, fmt.Errorf("look up serviceaccount %s/%s: %w", ns, name, err)
	}
	if !ok {
		fe = fe.Also(apis.ErrInvalidValue(name, prefix+"serviceAccountName",
			fmt.Sprintf("ServiceAccount %q not found in namespace %q (kubectl create serviceaccount %s -n %s makes it)", name, ns, name, ns)))
	}
	return fe, nil
}
