// Package admission defaults and validates objects before they are stored,
// as a Kubernetes cluster with Knative's webhooks does: Knative's kinds go
// through Knative's own SetDefaults and Validate (knative.dev/serving), with
// a context carrying knbox's configuration and the requesting user; the core
// kinds knbox serves (Namespace, Secret, ConfigMap, RuntimeClass) get the
// checks Kubernetes applies to them.
//
// It works on storage-version objects only and must not import the API
// server, the store or any data-plane package.
package admission

import (
	"context"
	"fmt"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"knative.dev/pkg/apis"
	servingcfg "knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Operation is what the request does to the object.
type Operation string

// Operations admission distinguishes.
const (
	Create       Operation = "CREATE"
	Update       Operation = "UPDATE"
	UpdateStatus Operation = "UPDATE_STATUS"
)

// User is the authenticated requester.
type User struct {
	Name   string
	UID    string
	Groups []string
}

// Request is one write to admit.
type Request struct {
	Op     Operation
	Object runtime.Object // storage version; defaulting mutates it
	Old    runtime.Object // the stored object on update, nil on create
	User   User
	// Path rewrites a storage-version field path into the terms of the
	// version the client wrote (nil: unchanged).
	Path func(string) string
}

// Admitter holds what admission needs from the rest of knbox.
type Admitter struct {
	// Serving is Knative's configuration (config-defaults, config-features,
	// config-autoscaler) that SetDefaults and Validate read.
	Serving *servingcfg.Config
	// RuntimeClassExists reports whether a RuntimeClass exists; a revision
	// template that names a missing one is refused (the RuntimeClass KEP).
	RuntimeClassExists func(ctx context.Context, name string) (bool, error)
}

// Admit defaults (except on status updates) and validates req.Object. It
// returns warnings for the client, field errors when the object is
// invalid, and err only when admission itself failed.
func (a *Admitter) Admit(ctx context.Context, req Request) (warns []string, errs field.ErrorList, err error) {
	rewrite := req.Path
	if rewrite == nil {
		rewrite = func(s string) string { return s }
	}
	meta := req.Object.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)

	switch obj := req.Object.(type) {
	case *corev1.Namespace:
		if req.Op == Create {
			defaultNamespace(obj)
		}
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, false, apivalidation.ValidateNamespaceName, field.NewPath("metadata"))...)
		errs = append(errs, validateNamespace(obj)...)
		return nil, errs, nil
	case *corev1.Secret:
		if req.Op != UpdateStatus {
			defaultSecret(obj)
		}
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, validateSecret(obj, asSecret(req.Old))...)
		return nil, errs, nil
	case *corev1.ConfigMap:
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, validateConfigMap(obj, asConfigMap(req.Old))...)
		return nil, errs, nil
	case *nodev1.RuntimeClass:
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, validateRuntimeClass(obj, asRuntimeClass(req.Old))...)
		return nil, errs, nil
	}

	kn, ok := req.Object.(knativeObject)
	if !ok {
		return nil, nil, fmt.Errorf("admission: unsupported type %T", req.Object)
	}
	errs = append(errs, rewriteAll(apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")), rewrite)...)

	ctx = servingcfg.ToContext(ctx, a.Serving)
	ctx = apis.WithUserInfo(ctx, &authv1.UserInfo{Username: req.User.Name, UID: req.User.UID, Groups: req.User.Groups})
	switch req.Op {
	case Create:
		ctx = apis.WithinCreate(ctx)
	case Update:
		ctx = apis.WithinUpdate(ctx, req.Old)
	case UpdateStatus:
		ctx = apis.WithinSubResourceUpdate(ctx, req.Old, "status")
	}
	if req.Op != UpdateStatus {
		kn.SetDefaults(ctx)
	}
	fe := kn.Validate(ctx)
	if req.Op != UpdateStatus {
		rc, err := a.checkRuntimeClass(ctx, req.Object)
		if err != nil {
			return nil, nil, err
		}
		fe = fe.Also(rc).Also(checkProbes(req.Object))
	}
	return Warnings(fe), append(errs, FieldErrors(fe, rewrite)...), nil
}

type knativeObject interface {
	apis.Defaultable
	apis.Validatable
}

var (
	_ knativeObject = (*servingv1.Service)(nil)
	_ knativeObject = (*servingv1.Configuration)(nil)
	_ knativeObject = (*servingv1.Revision)(nil)
	_ knativeObject = (*servingv1.Route)(nil)
)

// checkRuntimeClass refuses a pod spec that names a RuntimeClass that does
// not exist, at the field path that names it.
func (a *Admitter) checkRuntimeClass(ctx context.Context, obj runtime.Object) (*apis.FieldError, error) {
	var (
		name *string
		path string
	)
	switch o := obj.(type) {
	case *servingv1.Service:
		name, path = o.Spec.Template.Spec.RuntimeClassName, "spec.template.spec.runtimeClassName"
	case *servingv1.Configuration:
		name, path = o.Spec.Template.Spec.RuntimeClassName, "spec.template.spec.runtimeClassName"
	case *servingv1.Revision:
		name, path = o.Spec.RuntimeClassName, "spec.runtimeClassName"
	}
	if name == nil || *name == "" || a.RuntimeClassExists == nil {
		return nil, nil
	}
	ok, err := a.RuntimeClassExists(ctx, *name)
	if err != nil {
		return nil, fmt.Errorf("look up runtimeclass %q: %w", *name, err)
	}
	if ok {
		return nil, nil
	}
	return apis.ErrInvalidValue(*name, path, fmt.Sprintf("RuntimeClass %q not found (kubectl get runtimeclass lists those that exist)", *name)), nil
}

// checkProbes refuses exec probes: the runtime contract says platforms
// should not run them (a probe is a request or a connection, made from
// outside the container), so knbox offers httpGet and tcpSocket only.
func checkProbes(obj runtime.Object) *apis.FieldError {
	var (
		ctrs []corev1.Container
		path string
	)
	switch o := obj.(type) {
	case *servingv1.Service:
		ctrs, path = o.Spec.Template.Spec.Containers, "spec.template.spec.containers"
	case *servingv1.Configuration:
		ctrs, path = o.Spec.Template.Spec.Containers, "spec.template.spec.containers"
	case *servingv1.Revision:
		ctrs, path = o.Spec.Containers, "spec.containers"
	}
	var fe *apis.FieldError
	for i, c := range ctrs {
		for name, p := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe, "startupProbe": c.StartupProbe} {
			if p != nil && p.Exec != nil {
				fe = fe.Also(&apis.FieldError{
					Message: "must not set the field(s)",
					Paths:   []string{fmt.Sprintf("%s[%d].%s.exec", path, i, name)},
					Details: "knbox runs httpGet and tcpSocket probes only: the runtime contract keeps commands out of probes",
				})
			}
		}
	}
	return fe
}

func rewriteAll(errs field.ErrorList, rewrite func(string) string) field.ErrorList {
	for _, e := range errs {
		e.Field = rewrite(e.Field)
	}
	return errs
}

func asSecret(o runtime.Object) *corev1.Secret {
	s, _ := o.(*corev1.Secret)
	return s
}

func asConfigMap(o runtime.Object) *corev1.ConfigMap {
	c, _ := o.(*corev1.ConfigMap)
	return c
}

func asRuntimeClass(o runtime.Object) *nodev1.RuntimeClass {
	r, _ := o.(*nodev1.RuntimeClass)
	return r
}
