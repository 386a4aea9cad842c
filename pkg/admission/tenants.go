package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/quota"
)

// Objects reads the stored objects the namespace policies need: quotas,
// limit ranges and object counts (quota.Source), Namespaces (Pod Security
// levels, RuntimeClass access) and Revisions (the pods a raised enforce
// level is checked against). The API server implements it over its store.
type Objects interface {
	quota.Source
	// Namespace returns the named Namespace (a NotFound API error when it
	// does not exist).
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
	// Revisions returns the Revisions of namespace.
	Revisions(ctx context.Context, namespace string) ([]*servingv1.Revision, error)
}

// workload is the pod template of a Service, Configuration or Revision.
type workload struct {
	gr      schema.GroupResource
	kind    string
	podMeta *metav1.ObjectMeta // the template's metadata (the Revision's own)
	spec    *corev1.PodSpec
	path    *field.Path // of spec
}

func workloadOf(obj runtime.Object) *workload {
	g := servingv1.SchemeGroupVersion.Group
	switch o := obj.(type) {
	case *servingv1.Service:
		return &workload{schema.GroupResource{Group: g, Resource: "services"}, "Service", &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec.PodSpec, field.NewPath("spec", "template", "spec")}
	case *servingv1.Configuration:
		return &workload{schema.GroupResource{Group: g, Resource: "configurations"}, "Configuration", &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec.PodSpec, field.NewPath("spec", "template", "spec")}
	case *servingv1.Revision:
		return &workload{schema.GroupResource{Group: g, Resource: "revisions"}, "Revision", &o.ObjectMeta, &o.Spec.PodSpec, field.NewPath("spec")}
	case *buildv1alpha1.Build:
		// A build's sandbox runs its steps (one at a time) with the
		// isolation of an instance: judged as a pod of those containers.
		spec := &corev1.PodSpec{Containers: o.Spec.Steps, Volumes: o.Spec.Volumes, ServiceAccountName: o.Spec.ServiceAccountName}
		if c := o.Annotations[buildv1alpha1.RuntimeClassAnnotation]; c != "" {
			spec.RuntimeClassName = &c
		}
		return &workload{buildv1alpha1.Resource("builds"), "Build", &o.ObjectMeta, spec, field.NewPath("spec")}
	}
	return nil
}

// classPath is the field that names the workload's RuntimeClass.
func (w *workload) classPath() *field.Path {
	if w.kind == "Build" {
		return field.NewPath("metadata", "annotations").Key(buildv1alpha1.RuntimeClassAnnotation)
	}
	return w.path.Child("runtimeClassName")
}

// changed reports whether an update changes what the instances run: the
// template's pod spec or its metadata (annotations matter to Pod
// Security). Other updates (labels, status, the controllers' bookkeeping)
// are not judged again, as a cluster judges a Pod once.
func (w *workload) changed(old runtime.Object) bool {
	ow := workloadOf(old)
	if ow == nil {
		return true
	}
	if w.kind == "Revision" {
		return !apiequality.Semantic.DeepEqual(w.spec, ow.spec) // its metadata is the controllers'
	}
	return !apiequality.Semantic.DeepEqual(w.spec, ow.spec) || !apiequality.Semantic.DeepEqual(w.podMeta.Annotations, ow.podMeta.Annotations)
}

// instancePod is the pod an instance of spec gets in ns: LimitRange
// defaults, the RuntimeClass it runs under, and the settings knbox's
// runtime applies whatever the spec says.
func (a *Admitter) instancePod(ctx context.Context, ns *corev1.Namespace, spec *corev1.PodSpec) (*corev1.PodSpec, error) {
	ranges, err := a.Objects.LimitRanges(ctx, ns.Name)
	if err != nil {
		return nil, fmt.Errorf("read limit ranges of namespace %s: %w", ns.Name, err)
	}
	pod := quota.EffectivePod(spec, ranges)
	if c := a.effectiveClass(pod); c != "" && (pod.RuntimeClassName == nil || *pod.RuntimeClassName == "") {
		pod.RuntimeClassName = &c
	}
	// The RuntimeClass's overhead, which LimitRange's Pod limits count.
	if err := quota.WithOverhead(ctx, a.Objects, pod); err != nil {
		return nil, err
	}
	if a.InstanceDefaults != nil {
		a.InstanceDefaults(pod)
	}
	return pod, nil
}

func (a *Admitter) ledger() *quota.Ledger {
	a.ledgerOnce.Do(func() {
		if a.Ledger == nil && a.Objects != nil {
			a.Ledger = quota.NewLedger(a.Objects)
		}
	})
	return a.Ledger
}

// Serialize is held by the API server across the admission and the write
// of a create in namespace, so that two creates cannot both take the last
// unit of an object count quota. It locks only namespaces that have a
// ResourceQuota.
func (a *Admitter) Serialize(ctx context.Context, namespace string) (unlock func()) {
	if a.Objects == nil || namespace == "" {
		return func() {}
	}
	if qs, err := a.Objects.ResourceQuotas(ctx, namespace); err != nil || len(qs) == 0 {
		return func() {} // admission reads the quotas again and reports errors
	}
	a.nsMu.Lock()
	if a.nsLocks == nil {
		a.nsLocks = map[string]*nsLock{}
	}
	l := a.nsLocks[namespace]
	if l == nil {
		l = &nsLock{}
		a.nsLocks[namespace] = l
	}
	l.refs++
	a.nsMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		a.nsMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(a.nsLocks, namespace)
		}
		a.nsMu.Unlock()
	}
}

type nsLock struct {
	mu   sync.Mutex
	refs int
}

// admitPolicies applies the namespace policies to a write that passed
// validation: object count quotas on create, and for the pod templates of
// Knative's kinds RuntimeClass access, LimitRange, Pod Security and the
// quotas on instances.
func (a *Admitter) admitPolicies(ctx context.Context, req Request, meta *metav1.ObjectMeta, rewrite func(string) string) (warns []string, errs field.ErrorList, err error) {
	if a.Objects == nil {
		return nil, nil, nil
	}
	if req.Op == Create && meta.Namespace != "" && req.Resource.Resource != "" {
		if err := a.ledger().CheckCreate(ctx, meta.Namespace, req.Resource); err != nil {
			return nil, nil, refusal(req.Resource, meta.Name, err)
		}
	}
	w := workloadOf(req.Object)
	if w == nil || (req.Op == Update && !w.changed(req.Old)) {
		return nil, nil, nil
	}
	ns, err := a.Objects.Namespace(ctx, meta.Namespace)
	if err != nil {
		return nil, nil, err
	}
	if fe := a.checkRuntimeClassAccess(ns, w.spec, w.classPath()); fe != nil {
		fe.Field = rewrite(fe.Field)
		return nil, field.ErrorList{fe}, nil
	}
	pod, err := a.instancePod(ctx, ns, w.spec)
	if err != nil {
		return nil, nil, err
	}
	ranges, err := a.Objects.LimitRanges(ctx, ns.Name)
	if err != nil {
		return nil, nil, err
	}
	if err := quota.CheckLimitRanges(pod, ranges); err != nil {
		return nil, nil, apierrors.NewForbidden(w.gr, meta.Name, err)
	}
	warns, err = a.checkPodSecurity(ctx, req, w, ns, meta, pod)
	if err != nil {
		return nil, nil, err
	}
	// Counted in the class its instances run in, with its overhead.
	spec := w.spec.DeepCopy()
	spec.RuntimeClassName = pod.RuntimeClassName
	switch w.kind {
	case "Build":
		// A build is no instance: the quotas on instances do not count it.
	case "Revision":
		err = a.ledger().Fits(ctx, ns.Name, spec)
	default:
		err = a.ledger().CanFit(ctx, ns.Name, spec)
	}
	if err != nil {
		return nil, nil, refusal(w.gr, meta.Name, err)
	}
	return warns, nil, nil
}

// refusal makes a quota refusal 403 Forbidden, as Kubernetes answers it;
// other errors pass through.
func refusal(gr schema.GroupResource, name string, err error) error {
	if errors.Is(err, quota.ErrExceeded) {
		return apierrors.NewForbidden(gr, name, err)
	}
	return err
}

// defaultRuntimeClass gives the pod template of a Service, Configuration
// or Revision its namespace's default RuntimeClass when it names none. A
// Revision's spec is immutable: it is defaulted when it is created only.
func (a *Admitter) defaultRuntimeClass(ctx context.Context, op Operation, obj runtime.Object, namespace string) error {
	w := workloadOf(obj)
	if w == nil || a.Objects == nil || namespace == "" || (w.kind == "Revision" && op != Create) {
		return nil
	}
	if w.spec.RuntimeClassName != nil && *w.spec.RuntimeClassName != "" {
		return nil
	}
	ns, err := a.Objects.Namespace(ctx, namespace)
	if apierrors.IsNotFound(err) {
		return nil // the API server refuses writes into a missing namespace
	}
	if err != nil {
		return err
	}
	a.defaultRuntimeClassFor(ns, w.spec)
	if b, ok := obj.(*buildv1alpha1.Build); ok && w.spec.RuntimeClassName != nil && *w.spec.RuntimeClassName != "" {
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		b.Annotations[buildv1alpha1.RuntimeClassAnnotation] = *w.spec.RuntimeClassName
	}
	return nil
}

// admitNamespacePolicies checks the policy labels and annotations of a
// Namespace being written: Pod Security levels (422 when malformed,
// warnings when a raised enforce level does not fit existing Revisions)
// and RuntimeClass access.
func (a *Admitter) admitNamespacePolicies(ctx context.Context, req Request, ns *corev1.Namespace) ([]string, field.ErrorList, error) {
	warns, errs, err := a.validateRuntimeClassAnnotations(ctx, ns)
	if err != nil || len(errs) > 0 {
		return nil, errs, err
	}
	w, err := a.admitNamespacePodSecurity(ctx, req, ns)
	if err != nil {
		return nil, nil, err
	}
	return append(warns, w...), nil, nil
}
