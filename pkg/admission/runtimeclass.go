package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	servingcfg "knative.dev/serving/pkg/apis/config"
)

// RuntimeClass access is the operator's decision, made per namespace with
// annotations on the Namespace, as Kubernetes' PodNodeSelector admission
// plugin reads its namespace annotation: namespaces are cluster-scoped, so
// only who may update Namespaces (cluster admins, not a namespace's admin)
// can change them. Annotations, not labels: a label value cannot hold a
// list.
const (
	// AllowedRuntimeClassesAnnotation lists the RuntimeClasses the
	// namespace's Revisions may name, comma-separated ("runsc" or
	// "runsc,runc"; "*": all). Without it, RuntimeClassPolicy.DefaultAllowed
	// applies.
	AllowedRuntimeClassesAnnotation = "runtime.knbox.dev/allowed"
	// DefaultRuntimeClassAnnotation names the RuntimeClass that Services,
	// Configurations and Revisions of the namespace get when their template
	// names none (written into the spec, so it shows there).
	DefaultRuntimeClassAnnotation = "runtime.knbox.dev/default"
)

// RuntimeClassPolicy is the server-wide part of RuntimeClass access.
type RuntimeClassPolicy struct {
	// Default is the RuntimeClass a Revision that names none runs under in
	// a namespace without a default of its own (knbox's
	// defaultRuntimeClass; as a node's default runtime on a cluster, it is
	// not written into the spec). "": none.
	Default string
	// DefaultAllowed lists the RuntimeClasses namespaces without the
	// runtime.knbox.dev/allowed annotation may use; empty: all.
	DefaultAllowed []string
}

// parseAllowed reads an allow list: comma-separated names, "*" for all.
func parseAllowed(v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, fmt.Errorf("empty RuntimeClass name in %q: list names separated by commas, or *", v)
		}
		if s != "*" {
			if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
				return nil, fmt.Errorf("%q is not a RuntimeClass name: %s", s, errs[0])
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// allowedClasses returns the RuntimeClasses ns may use and where that list
// comes from; nil means every one.
func (a *Admitter) allowedClasses(ns *corev1.Namespace) ([]string, string) {
	if v, ok := ns.Annotations[AllowedRuntimeClassesAnnotation]; ok {
		l, err := parseAllowed(v)
		if err != nil {
			// Refused when written; an unreadable list allows nothing.
			return []string{}, fmt.Sprintf("the namespace's %s annotation", AllowedRuntimeClassesAnnotation)
		}
		if slices.Contains(l, "*") {
			return nil, ""
		}
		return l, fmt.Sprintf("the namespace's %s annotation", AllowedRuntimeClassesAnnotation)
	}
	if l := a.RuntimeClasses.DefaultAllowed; len(l) > 0 && !slices.Contains(l, "*") {
		return l, "the server's runtimeClasses.defaultAllowed"
	}
	return nil, ""
}

// validateRuntimeClassAnnotations checks the access annotations of a
// Namespace as it is written, and warns about classes that do not exist.
func (a *Admitter) validateRuntimeClassAnnotations(ctx context.Context, ns *corev1.Namespace) (warns []string, errs field.ErrorList, err error) {
	ann := field.NewPath("metadata", "annotations")
	var allowed []string
	if v, ok := ns.Annotations[AllowedRuntimeClassesAnnotation]; ok {
		l, perr := parseAllowed(v)
		if perr != nil {
			errs = append(errs, field.Invalid(ann.Key(AllowedRuntimeClassesAnnotation), v, perr.Error()))
		}
		allowed = l
	}
	names := slices.Clone(allowed)
	if v, ok := ns.Annotations[DefaultRuntimeClassAnnotation]; ok {
		p := ann.Key(DefaultRuntimeClassAnnotation)
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, v, msgs[0]))
		} else if l, src := a.allowedClasses(ns); l != nil && len(errs) == 0 && !slices.Contains(l, v) {
			errs = append(errs, field.Invalid(p, v, fmt.Sprintf("must be one of the RuntimeClasses the namespace may use (%s, from %s)", strings.Join(l, ", "), src)))
		} else {
			names = append(names, v)
		}
	}
	if len(errs) > 0 || a.RuntimeClassExists == nil {
		return nil, errs, nil
	}
	for _, n := range names {
		if n == "*" {
			continue
		}
		ok, err := a.RuntimeClassExists(ctx, n)
		if err != nil {
			return nil, nil, fmt.Errorf("look up runtimeclass %q: %w", n, err)
		}
		if !ok {
			warns = append(warns, fmt.Sprintf("RuntimeClass %q does not exist (yet): Revisions naming it are refused until it does", n))
		}
	}
	return warns, nil, nil
}

// defaultRuntimeClassFor fills runtimeClassName with the namespace's
// default when the pod spec names none (defaulting: it shows in the
// spec). It does nothing while Knative's runtimeClassName feature is off,
// which would refuse the field.
func (a *Admitter) defaultRuntimeClassFor(ns *corev1.Namespace, spec *corev1.PodSpec) {
	if spec == nil || (spec.RuntimeClassName != nil && *spec.RuntimeClassName != "") {
		return
	}
	if a.Serving != nil && a.Serving.Features != nil && a.Serving.Features.PodSpecRuntimeClassName == servingcfg.Disabled {
		return
	}
	if v := ns.Annotations[DefaultRuntimeClassAnnotation]; v != "" && len(validation.IsDNS1123Subdomain(v)) == 0 {
		spec.RuntimeClassName = &v
	}
}

// effectiveClass is the RuntimeClass an instance of spec runs under: the
// one it names, else the server's default.
func (a *Admitter) effectiveClass(spec *corev1.PodSpec) string {
	if spec.RuntimeClassName != nil && *spec.RuntimeClassName != "" {
		return *spec.RuntimeClassName
	}
	return a.RuntimeClasses.Default
}

// checkRuntimeClassAccess refuses a pod spec whose RuntimeClass the
// namespace may not use, at path (the runtimeClassName field).
func (a *Admitter) checkRuntimeClassAccess(ns *corev1.Namespace, spec *corev1.PodSpec, path *field.Path) *field.Error {
	allowed, src := a.allowedClasses(ns)
	if allowed == nil {
		return nil
	}
	class := a.effectiveClass(spec)
	if slices.Contains(allowed, class) {
		return nil
	}
	list := strings.Join(allowed, ", ")
	if list == "" {
		list = "none"
	}
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName == "" {
		return field.Forbidden(path, fmt.Sprintf("no RuntimeClass is named and the server's default %q is not allowed in namespace %q (allowed: %s, from %s): name one of them", class, ns.Name, list, src))
	}
	return field.Forbidden(path, fmt.Sprintf("RuntimeClass %q is not allowed in namespace %q (allowed: %s, from %s)", class, ns.Name, list, src))
}
