// Package admission defaults and validates objects before they are stored,
// as a Kubernetes cluster with Knative's webhooks does: Knative's kinds go
// through Knative's own SetDefaults and Validate (knative.dev/serving), with
// a context carrying knbox's configuration and the requesting user; the core
// kinds knbox serves (Namespace, Secret, ConfigMap, RuntimeClass,
// ResourceQuota, LimitRange, ServiceAccount) and the RBAC kinds get the
// checks Kubernetes applies to them.
//
// Then the namespace policies an operator sets, as a cluster's admission
// plugins apply them: ResourceQuota (object counts; instances' resources
// through package quota's Ledger), LimitRange, Pod Security admission
// (k8s.io/pod-security-admission) and RuntimeClass access. They refuse with
// Kubernetes' status codes and messages (403 Forbidden for policy, 422 for
// a field).
//
// It works on storage-version objects only and must not import the API
// server, the store or any data-plane package.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	psadmission "k8s.io/pod-security-admission/admission"
	psaapi "k8s.io/pod-security-admission/admission/api"
	networking "knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/network"
	servingcfg "knative.dev/serving/pkg/apis/config"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/quota"
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
	// Resource names the object's resource ("services.serving.knative.dev"),
	// for object count quotas; empty: not counted.
	Resource schema.GroupResource
	// Path rewrites a storage-version field path into the terms of the
	// version the client wrote (nil: unchanged).
	Path func(string) string
}

// Admitter holds what admission needs from the rest of knbox.
type Admitter struct {
	// AllowExecProbes lets exec probes through (the operator's switch,
	// config policy.allowExecProbes); by default they are refused, as the
	// runtime contract says platforms should.
	AllowExecProbes bool
	// Serving is Knative's configuration (config-defaults, config-features,
	// config-autoscaler) that SetDefaults and Validate read.
	Serving *servingcfg.Config
	// RuntimeClassExists reports whether a RuntimeClass exists; a revision
	// template that names a missing one is refused (the RuntimeClass KEP).
	RuntimeClassExists func(ctx context.Context, name string) (bool, error)
	// ServiceAccountExists reports whether a ServiceAccount exists; a
	// revision template whose serviceAccountName names a missing one is
	// refused.
	ServiceAccountExists func(ctx context.Context, namespace, name string) (bool, error)
	// ClusterDomain is the configured cluster domain: a DomainMapping
	// under it is refused, as Knative refuses one under its own (which
	// Knative's validation reads from CLUSTER_DOMAIN, not from here).
	ClusterDomain string

	// Objects reads what the namespace policies need; nil turns them off
	// (tests of Knative's admission alone).
	Objects Objects
	// Ledger checks instances against quotas; nil: a Ledger over Objects.
	// The runtime reserves through the same Ledger.
	Ledger *quota.Ledger
	// PodSecurity is Pod Security admission's server-wide configuration:
	// the levels of namespaces without pod-security.kubernetes.io labels
	// and the exemptions; nil: Kubernetes' defaults (privileged).
	PodSecurity *psaapi.PodSecurityConfiguration
	// RuntimeClasses is the server-wide RuntimeClass access policy.
	RuntimeClasses RuntimeClassPolicy
	// InstanceDefaults fills, in pod spec terms, what knbox's runtime
	// applies to every container whatever the spec says (e.g.
	// allowPrivilegeEscalation false), so Pod Security judges what runs;
	// nil: nothing.
	InstanceDefaults func(*corev1.PodSpec)
	// RegistryImage, if not nil, decides whether user may name image in a
	// revision template of namespace: "" allows, else the reason it may
	// not. knbox refuses images of its embedded registry from another
	// namespace unless the user may pull them there (pkg/daemon).
	RegistryImage func(ctx context.Context, user User, namespace, image string) (reason string, err error)
	// Logger receives Pod Security audit violations; nil: not logged.
	Logger *slog.Logger
	// Builds are the operator's bounds of Builds (timeout default and
	// maximum); zero values: the package's defaults.
	Builds buildv1alpha1.Limits

	ledgerOnce sync.Once
	psaOnce    sync.Once
	psa        *psadmission.Admission
	psaErr     error
	nsMu       sync.Mutex
	nsLocks    map[string]*nsLock
}

// Admit defaults (except on status updates) and validates req.Object, then
// applies the namespace policies. It returns warnings for the client, field
// errors when the object is invalid, and err when a policy refuses the
// write (an API status error, 403 Forbidden), admission itself failed, or,
// for Knative's kinds, the refusal itself: a 422 status carrying the field
// errors and Knative's own message.
func (a *Admitter) Admit(ctx context.Context, req Request) (warns []string, errs field.ErrorList, err error) {
	warns, errs, err = a.admit(ctx, req)
	if err != nil || len(errs) > 0 || req.Op == UpdateStatus {
		return warns, errs, err
	}
	rewrite := req.Path
	if rewrite == nil {
		rewrite = func(s string) string { return s }
	}
	meta := req.Object.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)
	w, errs, err := a.admitPolicies(ctx, req, meta, rewrite)
	return append(warns, w...), errs, err
}

func (a *Admitter) admit(ctx context.Context, req Request) (warns []string, errs field.ErrorList, err error) {
	rewrite := req.Path
	if rewrite == nil {
		rewrite = func(s string) string { return s }
	}
	meta := req.Object.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)

	if errs, ok := admitAuth(req); ok {
		return nil, errs, nil
	}
	switch obj := req.Object.(type) {
	case *corev1.Namespace:
		if req.Op == Create {
			defaultNamespace(obj)
		}
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, false, apivalidation.ValidateNamespaceName, field.NewPath("metadata"))...)
		errs = append(errs, validateNamespace(obj)...)
		if len(errs) > 0 || req.Op == UpdateStatus || a.Objects == nil {
			return nil, errs, nil
		}
		return a.admitNamespacePolicies(ctx, req, obj)
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
	case *corev1.ResourceQuota:
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, quota.ValidateResourceQuota(obj)...)
		return nil, errs, nil
	case *corev1.LimitRange:
		if req.Op != UpdateStatus {
			quota.DefaultLimitRange(obj)
		}
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, quota.ValidateLimitRange(obj)...)
		return nil, errs, nil
	case *corev1.Service:
		// Only the server writes Services (the one describing its
		// ingress): their metadata is checked, their spec is its own.
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNS1035Label, field.NewPath("metadata"))...)
		return nil, errs, nil
	case *corev1.Event:
		return nil, validateCoreEvent(obj), nil
	case *eventsv1.Event:
		return nil, validateEventsEvent(obj), nil
	case *netv1alpha1.ClusterDomainClaim:
		errs = append(errs, apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
		errs = append(errs, validateDomainClaim(obj)...)
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
	ctx = buildv1alpha1.WithLimits(ctx, a.Builds)
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
		if err := a.defaultRuntimeClass(ctx, req.Op, req.Object, meta.Namespace); err != nil {
			return nil, nil, err
		}
	}
	fe := kn.Validate(ctx)
	if req.Op != UpdateStatus {
		rc, err := a.checkRuntimeClass(ctx, req.Object)
		if err != nil {
			return nil, nil, err
		}
		sa, err := a.checkServiceAccount(ctx, req.Object)
		if err != nil {
			return nil, nil, err
		}
		ri, err := a.checkRegistryImages(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		fe = fe.Also(rc).Also(sa).Also(ri).Also(checkVisibility(req.Object, meta, req.Old)).Also(a.checkMappingDomain(req.Object))
		if !a.AllowExecProbes {
			fe = fe.Also(checkProbes(req.Object))
		}
	}
	fe = a.dropUntrueWarnings(req.Object, fe)
	knErrs := FieldErrors(fe, rewrite)
	return Warnings(fe), append(errs, knErrs...), knativeInvalid(req.Object, errs, knErrs, fe, rewrite)
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
	_ knativeObject = (*servingv1beta1.DomainMapping)(nil)
	_ knativeObject = (*buildv1alpha1.Build)(nil)
)

// checkMappingDomain refuses a DomainMapping of a name under the
// configured cluster domain: those names are the platform's.
func (a *Admitter) checkMappingDomain(obj runtime.Object) *apis.FieldError {
	dm, ok := obj.(*servingv1beta1.DomainMapping)
	d := strings.ToLower(strings.TrimSuffix(a.ClusterDomain, "."))
	if !ok || d == "" {
		return nil
	}
	n := strings.ToLower(dm.Name)
	if kd := network.GetClusterDomainName(); strings.HasSuffix(n, "."+kd) {
		return nil // Knative's validation says so already
	}
	if n == d || strings.HasSuffix(n, "."+d) {
		return apis.ErrGeneric(fmt.Sprintf("invalid name %q: must not be a subdomain of cluster local domain %q", dm.Name, d), "metadata.name")
	}
	return nil
}

// validateDomainClaim checks a ClusterDomainClaim: its name is a domain
// name and spec.namespace the namespace that may map it.
func validateDomainClaim(c *netv1alpha1.ClusterDomainClaim) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validation.IsFullyQualifiedDomainName(field.NewPath("metadata", "name"), c.Name)...)
	p := field.NewPath("spec", "namespace")
	if c.Spec.Namespace == "" {
		errs = append(errs, field.Required(p, "the namespace whose DomainMappings may use this domain"))
	} else {
		for _, msg := range apivalidation.ValidateNamespaceName(c.Spec.Namespace, false) {
			errs = append(errs, field.Invalid(p, c.Spec.Namespace, msg))
		}
	}
	return errs
}

// checkVisibility refuses a Service's or Route's visibility label with a
// value other than cluster-local (its only value; without it a Route is
// public), as Knative's ValidateClusterVisibilityLabel did before it let
// any value mean public: a typo would otherwise publish a Service meant to
// be private. An unchanged value of an object stored earlier passes.
func checkVisibility(obj runtime.Object, meta *metav1.ObjectMeta, old runtime.Object) *apis.FieldError {
	switch obj.(type) {
	case *servingv1.Service, *servingv1.Route:
	default:
		return nil
	}
	v, ok := meta.Labels[networking.VisibilityLabelKey]
	if !ok || v == serving.VisibilityClusterLocal {
		return nil
	}
	if old != nil {
		if om, isMeta := old.(metav1.ObjectMetaAccessor); isMeta {
			if ov, had := om.GetObjectMeta().GetLabels()[networking.VisibilityLabelKey]; had && ov == v {
				return nil
			}
		}
	}
	return &apis.FieldError{
		Message: fmt.Sprintf("invalid value %q: the only value is %q (omit the label for a public Route)", v, serving.VisibilityClusterLocal),
		Paths:   []string{"metadata.labels[" + networking.VisibilityLabelKey + "]"},
	}
}

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
