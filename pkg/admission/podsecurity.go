package admission

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psadmission "k8s.io/pod-security-admission/admission"
	psaapi "k8s.io/pod-security-admission/admission/api"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/metrics"
	"k8s.io/pod-security-admission/policy"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// Pod Security admission is Kubernetes' own (k8s.io/pod-security-admission):
// the namespace labels pod-security.kubernetes.io/enforce, warn and audit
// (with their -version labels) choose the level, the upstream checks judge
// the pod spec, and the messages are upstream's.
//
// What it judges is the pod an instance gets: the template's pod spec with
// the namespace's LimitRange defaults, the RuntimeClass it runs under, and
// the security settings knbox's runtime applies to every container whatever
// the spec says (Admitter.InstanceDefaults), so a restricted namespace
// accepts a Service that sets nothing when knbox's defaults already satisfy
// restricted.
//
// One deviation, on purpose: on a cluster, enforce refuses Pods and only
// warns about the Deployments that make them, so a Knative Service is
// accepted and its Revision fails later. knbox has no Pods to refuse at the
// API: it refuses Services, Configurations and Revisions at enforce, so
// the user reads the refusal at kubectl apply.

func (a *Admitter) podSecurity() (*psadmission.Admission, error) {
	a.psaOnce.Do(func() {
		cfg := a.PodSecurity
		if cfg == nil {
			cfg = &psaapi.PodSecurityConfiguration{Defaults: psaapi.PodSecurityDefaults{
				Enforce: string(psa.LevelPrivileged), EnforceVersion: string(psa.VersionLatest),
				Audit: string(psa.LevelPrivileged), AuditVersion: string(psa.VersionLatest),
				Warn: string(psa.LevelPrivileged), WarnVersion: string(psa.VersionLatest),
			}}
		}
		ev, err := policy.NewEvaluator(policy.DefaultChecks())
		if err != nil {
			a.psaErr = fmt.Errorf("pod security checks: %w", err)
			return
		}
		adm := &psadmission.Admission{
			Configuration:    cfg,
			Evaluator:        ev,
			Metrics:          noMetrics{},
			PodSpecExtractor: knativePods{},
			NamespaceGetter:  namespaceGetter{a},
			PodLister:        podLister{a},
		}
		if err := adm.CompleteConfiguration(); err != nil {
			a.psaErr = fmt.Errorf("pod security configuration: %w", err)
			return
		}
		if err := adm.ValidateConfiguration(); err != nil {
			a.psaErr = fmt.Errorf("pod security configuration: %w", err)
			return
		}
		a.psa = adm
	})
	return a.psa, a.psaErr
}

// admitNamespacePodSecurity refuses malformed pod-security labels (422, as
// a cluster does) and, when a namespace's enforce level is raised, warns
// about its Revisions whose instances would violate it.
func (a *Admitter) admitNamespacePodSecurity(ctx context.Context, req Request, ns *corev1.Namespace) ([]string, error) {
	adm, err := a.podSecurity()
	if err != nil {
		return nil, err
	}
	op := admissionv1.Create
	if req.Op == Update {
		op = admissionv1.Update
	}
	attrs := &psa.AttributesRecord{
		Name: ns.Name, Namespace: ns.Name, Operation: op, Object: ns, OldObject: req.Old, Username: req.User.Name,
		Kind:     corev1.SchemeGroupVersion.WithKind("Namespace"),
		Resource: corev1.SchemeGroupVersion.WithResource("namespaces"),
	}
	resp := adm.ValidateNamespace(ctx, attrs)
	if !resp.Allowed {
		return nil, responseError(resp)
	}
	return resp.Warnings, nil
}

// checkPodSecurity judges the instance pod of a Service, Configuration or
// Revision against its namespace's levels: a refusal is 403 Forbidden with
// upstream's "violates PodSecurity" message; warnings ("would violate
// PodSecurity") go back to the client; audit violations are logged.
func (a *Admitter) checkPodSecurity(ctx context.Context, req Request, w *workload, ns *corev1.Namespace, obj metav1.Object, pod *corev1.PodSpec) ([]string, error) {
	adm, err := a.podSecurity()
	if err != nil {
		return nil, err
	}
	cfg := adm.Configuration
	if slices.Contains(cfg.Exemptions.Namespaces, ns.Name) || (req.User.Name != "" && slices.Contains(cfg.Exemptions.Usernames, req.User.Name)) {
		return nil, nil
	}
	policy, perrs := adm.PolicyToEvaluate(ns.Labels)
	if len(perrs) == 0 && policy.FullyPrivileged() {
		return nil, nil
	}
	op := admissionv1.Create
	if req.Op == Update {
		op = admissionv1.Update
	}
	version := servingv1.SchemeGroupVersion.Version
	if w.kind == "Build" {
		version = buildv1alpha1.SchemeGroupVersion.Version
	}
	attrs := &psa.AttributesRecord{
		Name: obj.GetName(), Namespace: ns.Name, Operation: op, Object: req.Object, OldObject: req.Old, Username: req.User.Name,
		Kind:     schema.GroupVersionKind{Group: w.gr.Group, Version: version, Kind: w.kind},
		Resource: schema.GroupVersionResource{Group: w.gr.Group, Version: version, Resource: w.gr.Resource},
	}
	resp := adm.EvaluatePod(ctx, policy, perrs.ToAggregate(), w.podMeta, pod, attrs, true)
	if v := resp.AuditAnnotations[psa.AuditViolationsAnnotationKey]; v != "" && a.Logger != nil {
		a.Logger.InfoContext(ctx, "pod security audit", "namespace", ns.Name, "resource", w.gr.String(), "name", obj.GetName(),
			"user", req.User.Name, psa.AuditViolationsAnnotationKey, v)
	}
	if !resp.Allowed {
		return nil, responseError(resp)
	}
	return resp.Warnings, nil
}

// responseError turns a refusing admission response into the API error it
// carries.
func responseError(resp *admissionv1.AdmissionResponse) error {
	if resp.Result != nil {
		st := *resp.Result
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		if st.Status == "" {
			st.Status = metav1.StatusFailure
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("refused by pod security admission"))
}

// namespaceGetter and podLister give upstream's admission what it reads.
type namespaceGetter struct{ a *Admitter }

func (g namespaceGetter) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return g.a.Objects.Namespace(ctx, name)
}

// podLister lists the instance pods of a namespace's Revisions, one per
// Revision, owned by its Configuration (so upstream's warning reads
// "hello-00002 (and 1 other pod): ...").
type podLister struct{ a *Admitter }

func (l podLister) ListPods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	ns, err := l.a.Objects.Namespace(ctx, namespace)
	if err != nil {
		return nil, err
	}
	revs, err := l.a.Objects.Revisions(ctx, namespace)
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(revs))
	for _, r := range revs {
		spec, err := l.a.instancePod(ctx, ns, &r.Spec.PodSpec)
		if err != nil {
			return nil, err
		}
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: r.Name, Namespace: r.Namespace, Labels: r.Labels, Annotations: r.Annotations, OwnerReferences: r.OwnerReferences,
		}, Spec: *spec})
	}
	return pods, nil
}

// knativePods extracts pod specs from Knative's kinds for upstream code
// that asks (knbox calls EvaluatePod with the instance pod itself).
type knativePods struct{}

func (knativePods) HasPodSpec(gr schema.GroupResource) bool {
	return gr.Group == servingv1.SchemeGroupVersion.Group && (gr.Resource == "services" || gr.Resource == "configurations" || gr.Resource == "revisions")
}

func (knativePods) ExtractPodSpec(obj runtime.Object) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	switch o := obj.(type) {
	case *servingv1.Service:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec.PodSpec, nil
	case *servingv1.Configuration:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec.PodSpec, nil
	case *servingv1.Revision:
		return &o.ObjectMeta, &o.Spec.PodSpec, nil
	}
	return nil, nil, fmt.Errorf("no pod spec in %T", obj)
}

// noMetrics: knbox does not export Pod Security's metrics.
type noMetrics struct{}

func (noMetrics) RecordEvaluation(metrics.Decision, psa.LevelVersion, metrics.Mode, psa.Attributes) {}
func (noMetrics) RecordExemption(psa.Attributes)                                                    {}
func (noMetrics) RecordError(bool, psa.Attributes)                                                  {}
