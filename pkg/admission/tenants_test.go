package admission

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/quota"
)

// fakeObjects is an in-memory Objects.
type fakeObjects struct {
	mu     sync.Mutex
	ns     map[string]*corev1.Namespace
	quotas []corev1.ResourceQuota
	ranges []corev1.LimitRange
	revs   []*servingv1.Revision
	counts map[schema.GroupResource]int64
}

func (f *fakeObjects) ResourceQuotas(_ context.Context, ns string) ([]corev1.ResourceQuota, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []corev1.ResourceQuota
	for _, q := range f.quotas {
		if q.Namespace == ns {
			out = append(out, q)
		}
	}
	return out, nil
}

func (f *fakeObjects) LimitRanges(_ context.Context, ns string) ([]corev1.LimitRange, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []corev1.LimitRange
	for _, r := range f.ranges {
		if r.Namespace == ns {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeObjects) Count(_ context.Context, gr schema.GroupResource, _ string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[gr], nil
}

func (f *fakeObjects) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.ns[name]; ok {
		return n.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

func (f *fakeObjects) Revisions(_ context.Context, ns string) ([]*servingv1.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*servingv1.Revision
	for _, r := range f.revs {
		if r.Namespace == ns {
			out = append(out, r.DeepCopy())
		}
	}
	return out, nil
}

func newNamespace(name string, labels, annotations map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
}

type tenantEnv struct {
	a    *Admitter
	objs *fakeObjects
	log  *bytes.Buffer
}

func newTenantEnv(t *testing.T, namespaces ...*corev1.Namespace) *tenantEnv {
	t.Helper()
	serving, err := config.Default().Serving()
	if err != nil {
		t.Fatal(err)
	}
	objs := &fakeObjects{ns: map[string]*corev1.Namespace{}, counts: map[schema.GroupResource]int64{}}
	for _, n := range namespaces {
		objs.ns[n.Name] = n
	}
	var log bytes.Buffer
	a := &Admitter{
		Serving: serving, Objects: objs,
		RuntimeClasses:     RuntimeClassPolicy{Default: "runc"},
		InstanceDefaults:   func(p *corev1.PodSpec) { oci.Declare(p, oci.Policy{}) },
		Logger:             slog.New(slog.NewTextHandler(&log, nil)),
		RuntimeClassExists: func(_ context.Context, name string) (bool, error) { return name == "runc" || name == "runsc", nil },
	}
	return &tenantEnv{a: a, objs: objs, log: &log}
}

func service(ns, name string, mutate func(*corev1.PodSpec)) *servingv1.Service {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/hello@sha256:" + strings.Repeat("0", 64)}}
	if mutate != nil {
		mutate(&s.Spec.Template.Spec.PodSpec)
	}
	return s
}

func hardened(p *corev1.PodSpec) {
	t := true
	p.Containers[0].SecurityContext = &corev1.SecurityContext{
		RunAsNonRoot: &t, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func (e *tenantEnv) admit(t *testing.T, op Operation, obj, old runtime.Object, gr schema.GroupResource) ([]string, field.ErrorList, error) {
	t.Helper()
	return e.a.Admit(context.Background(), Request{Op: op, Object: obj, Old: old, User: User{Name: "alice"}, Resource: gr})
}

var ksvcGR = schema.GroupResource{Group: "serving.knative.dev", Resource: "services"}

// wantForbidden checks that err is a 403 whose message contains each of want.
func wantForbidden(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want 403 Forbidden", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
}

func TestRuntimeClassAccess(t *testing.T) {
	e := newTenantEnv(t,
		newNamespace("sandboxed", nil, map[string]string{AllowedRuntimeClassesAnnotation: "runsc", DefaultRuntimeClassAnnotation: "runsc"}),
		newNamespace("open", nil, nil))

	s := service("sandboxed", "a", nil)
	if _, errs, err := e.admit(t, Create, s, nil, ksvcGR); err != nil || len(errs) > 0 {
		t.Fatalf("a Service naming no RuntimeClass: %v %v", errs, err)
	}
	if rc := s.Spec.Template.Spec.RuntimeClassName; rc == nil || *rc != "runsc" {
		t.Fatalf("runtimeClassName = %v, want the namespace default runsc", rc)
	}
	runc := "runc"
	s = service("sandboxed", "b", func(p *corev1.PodSpec) { p.RuntimeClassName = &runc })
	_, errs, err := e.admit(t, Create, s, nil, ksvcGR)
	if err != nil || len(errs) != 1 || errs[0].Field != "spec.template.spec.runtimeClassName" || errs[0].Type != field.ErrorTypeForbidden ||
		!strings.Contains(errs[0].Detail, `RuntimeClass "runc" is not allowed in namespace "sandboxed" (allowed: runsc`) {
		t.Fatalf("runc in a runsc namespace: %v %v", errs, err)
	}
	// A Revision is checked too (a Configuration's, or one written directly).
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "sandboxed"}}
	rev.Spec.PodSpec = *service("", "", func(p *corev1.PodSpec) { p.RuntimeClassName = &runc }).Spec.Template.Spec.PodSpec.DeepCopy()
	if _, errs, _ := e.admit(t, Create, rev, nil, servingv1.Resource("revisions")); len(errs) != 1 || errs[0].Field != "spec.runtimeClassName" {
		t.Fatalf("a Revision with runc: %v", errs)
	}

	// A Revision made before the namespace had a default keeps its spec
	// (immutable) through the controllers' updates.
	made := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "made", Namespace: "open"}}
	made.Spec.PodSpec = service("", "", nil).Spec.Template.Spec.PodSpec
	if _, errs, err := e.admit(t, Create, made, nil, servingv1.Resource("revisions")); err != nil || len(errs) > 0 {
		t.Fatalf("revision: %v %v", errs, err)
	}
	e.objs.ns["open"].Annotations = map[string]string{DefaultRuntimeClassAnnotation: "runc"}
	relabelled := made.DeepCopy()
	relabelled.Labels = map[string]string{"serving.knative.dev/routingState": "active"}
	if _, errs, err := e.admit(t, Update, relabelled, made, servingv1.Resource("revisions")); err != nil || len(errs) > 0 || relabelled.Spec.RuntimeClassName != nil {
		t.Fatalf("relabelling an older revision: %v %v, runtimeClassName %v", errs, err, relabelled.Spec.RuntimeClassName)
	}
	e.objs.ns["open"].Annotations = nil

	// Namespaces without the annotation follow the server's policy.
	e.a.RuntimeClasses.DefaultAllowed = []string{"runc"}
	runsc := "runsc"
	s = service("open", "c", func(p *corev1.PodSpec) { p.RuntimeClassName = &runsc })
	if _, errs, _ := e.admit(t, Create, s, nil, ksvcGR); len(errs) != 1 || !strings.Contains(errs[0].Detail, "runtimeClasses.defaultAllowed") {
		t.Fatalf("runsc where the server allows runc only: %v", errs)
	}
	if _, errs, err := e.admit(t, Create, service("open", "d", nil), nil, ksvcGR); err != nil || len(errs) > 0 {
		t.Fatalf("the server default in an open namespace: %v %v", errs, err)
	}
	e.a.RuntimeClasses.DefaultAllowed = []string{"runsc"}
	if _, errs, _ := e.admit(t, Create, service("open", "e", nil), nil, ksvcGR); len(errs) != 1 || !strings.Contains(errs[0].Detail, `the server's default "runc" is not allowed`) {
		t.Fatalf("naming none where the default is not allowed: %v", errs)
	}
}

func TestNamespaceRuntimeClassAnnotations(t *testing.T) {
	e := newTenantEnv(t)
	for _, tt := range []struct {
		ann     map[string]string
		field   string
		warning string
	}{
		{map[string]string{AllowedRuntimeClassesAnnotation: "runsc, runc"}, "", ""},
		{map[string]string{AllowedRuntimeClassesAnnotation: "*", DefaultRuntimeClassAnnotation: "runsc"}, "", ""},
		{map[string]string{AllowedRuntimeClassesAnnotation: "runsc,,runc"}, "metadata.annotations[runtime.knbox.dev/allowed]", ""},
		{map[string]string{AllowedRuntimeClassesAnnotation: "Not_A_Name"}, "metadata.annotations[runtime.knbox.dev/allowed]", ""},
		{map[string]string{AllowedRuntimeClassesAnnotation: "runsc", DefaultRuntimeClassAnnotation: "runc"}, "metadata.annotations[runtime.knbox.dev/default]", ""},
		{map[string]string{AllowedRuntimeClassesAnnotation: "kata"}, "", `RuntimeClass "kata" does not exist`},
	} {
		warns, errs, err := e.admit(t, Create, newNamespace("n", nil, tt.ann), nil, corev1.Resource("namespaces"))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tt.field != "" && (len(errs) != 1 || errs[0].Field != tt.field):
			t.Errorf("%v: errors %v, want one on %s", tt.ann, errs, tt.field)
		case tt.field == "" && len(errs) > 0:
			t.Errorf("%v: unexpected errors %v", tt.ann, errs)
		case tt.warning != "" && (len(warns) != 1 || !strings.Contains(warns[0], tt.warning)):
			t.Errorf("%v: warnings %v, want %q", tt.ann, warns, tt.warning)
		}
	}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestLimitRangeAdmission(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team", nil, nil))
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "team"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Max: rl("cpu", "1"), Default: rl("memory", "128Mi"),
	}}}}
	if _, errs, err := e.admit(t, Create, lr, nil, corev1.Resource("limitranges")); err != nil || len(errs) > 0 {
		t.Fatalf("LimitRange: %v %v", errs, err)
	}
	if q := lr.Spec.Limits[0].Default[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("the LimitRange was not defaulted as Kubernetes does: default cpu %s, want the max", q.String())
	}
	e.objs.ranges = append(e.objs.ranges, *lr)

	big := service("team", "big", func(p *corev1.PodSpec) { p.Containers[0].Resources.Limits = rl("cpu", "2") })
	_, _, err := e.admit(t, Create, big, nil, ksvcGR)
	wantForbidden(t, err, `services.serving.knative.dev "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2`)

	plain := service("team", "plain", nil)
	if _, errs, err := e.admit(t, Create, plain, nil, ksvcGR); err != nil || len(errs) > 0 {
		t.Fatalf("a Service within the defaults: %v %v", errs, err)
	}
	if len(plain.Spec.Template.Spec.Containers[0].Resources.Limits) > 0 {
		t.Error("LimitRange defaults were written into the Service: they belong on the instance")
	}

	bad := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "team"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Min: rl("cpu", "2"), Max: rl("cpu", "1"),
	}}}}
	if _, errs, _ := e.admit(t, Create, bad, nil, corev1.Resource("limitranges")); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "min value 2 is greater than max value 1") {
		t.Errorf("min above max: %v", errs)
	}
}

func TestPodSecurityAdmission(t *testing.T) {
	e := newTenantEnv(t,
		newNamespace("enforced", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}, nil),
		newNamespace("warned", map[string]string{"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/audit": "baseline"}, nil))

	_, _, err := e.admit(t, Create, service("enforced", "plain", nil), nil, ksvcGR)
	wantForbidden(t, err, `services.serving.knative.dev "plain" is forbidden: violates PodSecurity "restricted:latest":`, "runAsNonRoot != true")
	// knbox's runtime gives every container allowPrivilegeEscalation
	// false, RuntimeDefault seccomp and NET_BIND_SERVICE alone (oci.Declare).
	for _, declared := range []string{"allowPrivilegeEscalation", "seccompProfile", "capabilities"} {
		if strings.Contains(err.Error(), declared) {
			t.Errorf("refusal names %s, which knbox's runtime sets for every container: %v", declared, err)
		}
	}
	s := service("enforced", "hardened", hardened)
	warns, errs, err := e.admit(t, Create, s, nil, ksvcGR)
	if err != nil || len(errs) > 0 {
		t.Fatalf("a hardened Service: %v %v", errs, err)
	}
	if len(s.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add) > 0 || s.Spec.Template.Spec.Containers[0].SecurityContext.SeccompProfile != nil {
		t.Error("admission wrote knbox's runtime defaults into the Service")
	}
	_ = warns

	// An update that does not change the template is not judged again.
	old := service("enforced", "legacy", nil)
	e.objs.ns["enforced"].Labels = nil
	if _, _, err := e.admit(t, Create, old, nil, ksvcGR); err != nil {
		t.Fatal(err)
	}
	e.objs.ns["enforced"].Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	upd := old.DeepCopy()
	upd.Labels = map[string]string{"tier": "web"}
	if _, _, err := e.admit(t, Update, upd, old, ksvcGR); err != nil {
		t.Errorf("a label update of a Service admitted before the namespace was restricted: %v", err)
	}
	changed := upd.DeepCopy()
	changed.Spec.Template.Spec.Containers[0].Image = "example.com/other@sha256:" + strings.Repeat("1", 64)
	if _, _, err := e.admit(t, Update, changed, old, ksvcGR); !apierrors.IsForbidden(err) {
		t.Errorf("a template update in a restricted namespace: %v, want 403", err)
	}

	warns, errs, err = e.admit(t, Create, service("warned", "plain", nil), nil, ksvcGR)
	if err != nil || len(errs) > 0 {
		t.Fatalf("warn only: %v %v", errs, err)
	}
	if !containsPrefix(warns, `would violate PodSecurity "restricted:latest": `) {
		t.Errorf("warnings %q lack upstream's would-violate warning", warns)
	}
	// Baseline allows what knbox makes by default: nothing to audit.
	if strings.Contains(e.log.String(), "pod security audit") {
		t.Errorf("audit logged for a baseline-compliant pod: %s", e.log)
	}
	unconfined := service("warned", "unconfined", nil)
	unconfined.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
	if _, errs, err := e.admit(t, Create, unconfined, nil, ksvcGR); err != nil || len(errs) > 0 {
		t.Fatalf("audit only: %v %v", errs, err)
	}
	if !strings.Contains(e.log.String(), `would violate PodSecurity \"baseline:latest\": seccompProfile`) {
		t.Errorf("audit violation not logged: %s", e.log)
	}

	// Runtime classes the operator exempts are not judged.
	runsc := "runsc"
	sandboxed := func(p *corev1.PodSpec) { p.RuntimeClassName = &runsc }
	if _, _, err := e.admit(t, Create, service("enforced", "sandboxed", sandboxed), nil, ksvcGR); !apierrors.IsForbidden(err) {
		t.Fatalf("without an exemption: %v", err)
	}
	c := config.Default()
	c.PodSecurity.Exemptions.RuntimeClasses = []string{"runsc"}
	psaCfg, err := c.PodSecurityConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	e.a.PodSecurity, e.a.psaOnce, e.a.psa = psaCfg, sync.Once{}, nil
	if _, _, err := e.admit(t, Create, service("enforced", "sandboxed", sandboxed), nil, ksvcGR); err != nil {
		t.Fatalf("runsc exempt: %v", err)
	}
}

func containsPrefix(ss []string, p string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func TestNamespacePodSecurityLabels(t *testing.T) {
	e := newTenantEnv(t)
	_, _, err := e.admit(t, Create, newNamespace("bad", map[string]string{"pod-security.kubernetes.io/enforce": "strict"}, nil), nil, corev1.Resource("namespaces"))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict"`) {
		t.Fatalf("unknown level: %v, want 422 naming the label", err)
	}
	_, _, err = e.admit(t, Create, newNamespace("bad", map[string]string{"pod-security.kubernetes.io/warn-version": "v1.x"}, nil), nil, corev1.Resource("namespaces"))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("unknown version: %v, want 422", err)
	}

	// Raising enforce warns about existing Revisions, as kube does for pods.
	team := newNamespace("team", nil, nil)
	e.objs.ns["team"] = team
	ctrl := true
	for _, name := range []string{"hello-00001", "hello-00002"} {
		r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team",
			OwnerReferences: []metav1.OwnerReference{{Kind: "Configuration", Name: "hello", UID: "cfg-uid", Controller: &ctrl}}}}
		r.Spec.PodSpec = service("", "", nil).Spec.Template.Spec.PodSpec
		e.objs.revs = append(e.objs.revs, r)
	}
	raised := team.DeepCopy()
	raised.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	warns, errs, err := e.admit(t, Update, raised, team, corev1.Resource("namespaces"))
	if err != nil || len(errs) > 0 {
		t.Fatalf("raising enforce: %v %v", errs, err)
	}
	joined := strings.Join(warns, "\n")
	for _, w := range []string{`existing pods in namespace "team" violate the new PodSecurity enforce level "restricted:latest"`, "hello-00001 (and 1 other pod): "} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings %q lack %q", joined, w)
		}
	}
}

func TestQuotaAdmission(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team", nil, nil))
	ctx := context.Background()

	bad := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "team"}, Spec: corev1.ResourceQuotaSpec{Hard: rl("cpus", "1", "memory", "-1")}}
	_, errs, _ := e.admit(t, Create, bad, nil, corev1.Resource("resourcequotas"))
	if msg := errs.ToAggregate(); msg == nil || !strings.Contains(msg.Error(), "spec.hard[cpus]") || !strings.Contains(msg.Error(), "spec.hard[memory]") {
		t.Fatalf("unknown resource and negative value: %v", msg)
	}

	e.objs.quotas = []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"}, Spec: corev1.ResourceQuotaSpec{
		Hard: rl("configmaps", "1", "limits.cpu", "2", "count/services.serving.knative.dev", "5"),
	}}}
	e.objs.counts[corev1.Resource("configmaps")] = 1
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team"}}
	_, _, err := e.admit(t, Create, cm, nil, corev1.Resource("configmaps"))
	wantForbidden(t, err, `configmaps "c" is forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1`)

	_, _, err = e.admit(t, Create, service("team", "unsized", nil), nil, ksvcGR)
	wantForbidden(t, err, "failed quota: q: must specify limits.cpu for: user-container")
	_, _, err = e.admit(t, Create, service("team", "huge", func(p *corev1.PodSpec) { p.Containers[0].Resources.Limits = rl("cpu", "3") }), nil, ksvcGR)
	wantForbidden(t, err, "exceeded quota: q, requested: limits.cpu=3, used: limits.cpu=0, limited: limits.cpu=2")

	// A Service whose one instance fits is accepted even while instances
	// hold the quota; its Revision's first instance must fit now.
	sized := func(p *corev1.PodSpec) { p.Containers[0].Resources.Limits = rl("cpu", "1500m") }
	if _, _, err := e.a.Ledger.Reserve(ctx, "team", &service("", "", sized).Spec.Template.Spec.PodSpec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.admit(t, Create, service("team", "fits-alone", sized), nil, ksvcGR); err != nil {
		t.Fatalf("a Service that fits alone: %v", err)
	}
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "fits-alone-00001", Namespace: "team"}}
	rev.Spec.PodSpec = service("", "", sized).Spec.Template.Spec.PodSpec
	_, _, err = e.admit(t, Create, rev, nil, servingv1.Resource("revisions"))
	wantForbidden(t, err, `revisions.serving.knative.dev "fits-alone-00001" is forbidden: exceeded quota: q, requested: limits.cpu=1500m, used: limits.cpu=1500m, limited: limits.cpu=2`)
}

func TestSerializeLocksOnlyNamespacesWithQuotas(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team", nil, nil))
	ctx := context.Background()
	unlock := e.a.Serialize(ctx, "team")
	unlock2 := e.a.Serialize(ctx, "team") // no quota: no lock
	unlock2()
	unlock()
	e.objs.quotas = []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"}}}
	unlock = e.a.Serialize(ctx, "team")
	got := make(chan struct{})
	go func() {
		defer close(got)
		e.a.Serialize(ctx, "team")()
	}()
	select {
	case <-got:
		t.Fatal("a second create in a namespace with a quota did not wait for the first")
	default:
	}
	unlock()
	<-got
	if len(e.a.nsLocks) != 0 {
		t.Errorf("locks left behind: %v", e.a.nsLocks)
	}
}

var _ quota.Source = (*fakeObjects)(nil)
