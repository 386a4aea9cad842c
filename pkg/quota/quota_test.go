package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func container(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func quota(name string, hard corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) corev1.ResourceQuota {
	return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"}, Spec: corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes}}
}

// fakeSource is an in-memory Source.
type fakeSource struct {
	mu     sync.Mutex
	quotas []corev1.ResourceQuota
	ranges []corev1.LimitRange
	counts map[schema.GroupResource]int64
}

func (f *fakeSource) ResourceQuotas(context.Context, string) ([]corev1.ResourceQuota, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]corev1.ResourceQuota(nil), f.quotas...), nil
}

func (f *fakeSource) LimitRanges(context.Context, string) ([]corev1.LimitRange, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]corev1.LimitRange(nil), f.ranges...), nil
}

func (f *fakeSource) Count(_ context.Context, gr schema.GroupResource, _ string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[gr], nil
}

func TestValidateResourceQuota(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.ResourceQuotaSpec
		want []string // substrings of the aggregated error; none: valid
	}{
		{"standard names", corev1.ResourceQuotaSpec{Hard: rl("cpu", "2", "limits.memory", "1Gi", "pods", "10", "configmaps", "5", "count/services.serving.knative.dev", "3", "requests.example.com/gpu", "1")}, nil},
		{"unknown name", corev1.ResourceQuotaSpec{Hard: rl("cpus", "2")}, []string{`spec.hard[cpus]: Invalid value: "cpus": must be a standard resource for quota`}},
		{"negative", corev1.ResourceQuotaSpec{Hard: rl("memory", "-1Gi")}, []string{`spec.hard[memory]: Invalid value: "-1Gi": must be greater than or equal to 0`}},
		{"fraction of a count", corev1.ResourceQuotaSpec{Hard: rl("pods", "1500m")}, []string{`must be an integer`}},
		{"fraction of count/", corev1.ResourceQuotaSpec{Hard: rl("count/secrets", "0.5")}, []string{`must be an integer`}},
		{"bad qualified name", corev1.ResourceQuotaSpec{Hard: rl("a/b/c", "1")}, []string{`spec.hard[a/b/c]`}},
		{"scope", corev1.ResourceQuotaSpec{Hard: rl("pods", "1"), Scopes: []corev1.ResourceQuotaScope{"BestEffort"}}, nil},
		{"scope for configmaps", corev1.ResourceQuotaSpec{Hard: rl("configmaps", "1"), Scopes: []corev1.ResourceQuotaScope{"BestEffort"}}, []string{"unsupported scope applied to resource"}},
		{"unknown scope", corev1.ResourceQuotaSpec{Hard: rl("pods", "1"), Scopes: []corev1.ResourceQuotaScope{"Sometimes"}}, []string{"unsupported scope"}},
		{"conflicting scopes", corev1.ResourceQuotaSpec{Hard: rl("pods", "1"), Scopes: []corev1.ResourceQuotaScope{"BestEffort", "NotBestEffort"}}, []string{"conflicting scopes"}},
		{"selector operator", corev1.ResourceQuotaSpec{Hard: rl("pods", "1"), ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: "BestEffort", Operator: "In", Values: []string{"x"}}}}}, []string{"must be 'Exist'"}},
		{"selector values", corev1.ResourceQuotaSpec{Hard: rl("pods", "1"), ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: "PriorityClass", Operator: "In"}}}}, []string{"must be at least one value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateResourceQuota(&corev1.ResourceQuota{Spec: tt.spec})
			got := errs.ToAggregate()
			if len(tt.want) == 0 {
				if got != nil {
					t.Fatalf("unexpected errors: %v", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("error %q lacks %q", got, w)
				}
			}
		})
	}
}

func TestLimitRangeDefaultsAndValidation(t *testing.T) {
	lr := &corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Max: rl("cpu", "2"), Min: rl("memory", "64Mi"),
	}}}}
	DefaultLimitRange(lr)
	it := lr.Spec.Limits[0]
	if q := it.Default[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("default cpu = %s, want the max 2", q.String())
	}
	if q := it.DefaultRequest[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("defaultRequest cpu = %s, want the default 2", q.String())
	}
	if q := it.DefaultRequest[corev1.ResourceMemory]; q.String() != "64Mi" {
		t.Errorf("defaultRequest memory = %s, want the min 64Mi", q.String())
	}
	if errs := ValidateLimitRange(lr); len(errs) > 0 {
		t.Fatalf("defaulted range invalid: %v", errs.ToAggregate())
	}

	bad := []struct {
		name string
		item corev1.LimitRangeItem
		want string
	}{
		{"min above max", corev1.LimitRangeItem{Type: "Container", Min: rl("cpu", "2"), Max: rl("cpu", "1")}, "min value 2 is greater than max value 1"},
		{"default above max", corev1.LimitRangeItem{Type: "Container", Default: rl("cpu", "2"), Max: rl("cpu", "1")}, "default value 2 is greater than max value 1"},
		{"ratio below 1", corev1.LimitRangeItem{Type: "Container", MaxLimitRequestRatio: rl("cpu", "500m")}, "ratio 500m is less than 1"},
		{"unknown type", corev1.LimitRangeItem{Type: "Node"}, "must be a standard limit type or fully qualified"},
		{"pod default", corev1.LimitRangeItem{Type: "Pod", Default: rl("cpu", "1")}, "may not be specified when `type` is 'Pod'"},
		{"not a container resource", corev1.LimitRangeItem{Type: "Container", Max: rl("pods", "1")}, "must be a standard resource for containers"},
		{"negative", corev1.LimitRangeItem{Type: "Container", Max: rl("memory", "-1")}, "must be greater than or equal to 0"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			lr := &corev1.LimitRange{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{b.item}}}
			errs := ValidateLimitRange(lr).ToAggregate()
			if errs == nil || !strings.Contains(errs.Error(), b.want) {
				t.Errorf("errors %v, want %q", errs, b.want)
			}
		})
	}
}

func TestEffectivePodAndLimitRanges(t *testing.T) {
	ranges := []corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Default: rl("cpu", "500m", "memory", "256Mi"), DefaultRequest: rl("cpu", "100m"),
		Max: rl("cpu", "1"), MaxLimitRequestRatio: rl("memory", "2"),
	}}}}}
	spec := &corev1.PodSpec{Containers: []corev1.Container{
		container("none", nil, nil),
		container("own-limit", nil, rl("memory", "128Mi")),
	}}
	eff := EffectivePod(spec, ranges)
	if spec.Containers[0].Resources.Limits != nil {
		t.Fatal("EffectivePod changed its input")
	}
	c0, c1 := eff.Containers[0].Resources, eff.Containers[1].Resources
	for _, c := range []struct {
		got  resource.Quantity
		want string
	}{
		{c0.Limits[corev1.ResourceCPU], "500m"}, {c0.Requests[corev1.ResourceCPU], "100m"},
		{c0.Limits[corev1.ResourceMemory], "256Mi"}, {c1.Limits[corev1.ResourceMemory], "128Mi"},
		// A container's own limit is its request before defaults apply.
		{c1.Requests[corev1.ResourceMemory], "128Mi"},
	} {
		if c.got.String() != c.want {
			t.Errorf("got %s, want %s (effective pod %+v)", c.got.String(), c.want, eff.Containers)
		}
	}
	// c0 has no memory request: the ratio cannot be checked, as on a cluster.
	err := CheckLimitRanges(eff, ranges)
	if err == nil || !strings.Contains(err.Error(), "memory max limit to request ratio per Container is 2, but no request is specified or request is 0") {
		t.Errorf("ratio: %v", err)
	}

	big := EffectivePod(&corev1.PodSpec{Containers: []corev1.Container{container("big", nil, rl("cpu", "2"))}}, ranges[:1])
	ranges[0].Spec.Limits[0].MaxLimitRequestRatio = nil
	err = CheckLimitRanges(big, ranges)
	if err == nil || err.Error() != "maximum cpu usage per Container is 1, but limit is 2" {
		t.Errorf("max: %v", err)
	}
	// A request above the default limit cannot run.
	over := EffectivePod(&corev1.PodSpec{Containers: []corev1.Container{container("c", rl("cpu", "800m"), nil)}}, ranges)
	if err := CheckLimitRanges(over, ranges); err == nil || !strings.Contains(err.Error(), `container "c": cpu request 800m must be less than or equal to cpu limit of 500m`) {
		t.Errorf("request above default limit: %v", err)
	}
}

func TestPodUsage(t *testing.T) {
	pod := &corev1.PodSpec{
		InitContainers: []corev1.Container{container("init", rl("cpu", "3"), nil)},
		Containers: []corev1.Container{
			container("a", rl("cpu", "1", "memory", "1Gi", "example.com/gpu", "1"), rl("cpu", "2", "memory", "1Gi")),
			container("b", rl("cpu", "500m", "memory", "512Mi"), rl("memory", "512Mi")),
		},
	}
	u := PodUsage(pod)
	want := map[corev1.ResourceName]string{
		"pods": "1", "count/pods": "1", "cpu": "3", "requests.cpu": "3", "limits.cpu": "2",
		"memory": "1536Mi", "requests.memory": "1536Mi", "limits.memory": "1536Mi", "requests.example.com/gpu": "1",
	}
	for n, w := range want {
		if q, ok := u[n]; !ok || q.Cmp(resource.MustParse(w)) != 0 {
			t.Errorf("%s = %v, want %s", n, u[n], w)
		}
	}
	if len(u) != len(want) {
		t.Errorf("usage %v has names beyond %v", u, want)
	}
}

func TestLedgerReserve(t *testing.T) {
	src := &fakeSource{quotas: []corev1.ResourceQuota{quota("compute", rl("limits.cpu", "2", "pods", "3"))}}
	l := NewLedger(src)
	var notified []string
	l.OnChange(func(ns string) { notified = append(notified, ns) })
	ctx := context.Background()
	spec := &corev1.PodSpec{Containers: []corev1.Container{container("user-container", nil, rl("cpu", "1"))}}

	_, r1, err := l.Reserve(ctx, "team", spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Reserve(ctx, "team", spec); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.Reserve(ctx, "team", spec)
	var ex *ExceededError
	if !errors.As(err, &ex) || !errors.Is(err, ErrExceeded) {
		t.Fatalf("third reservation: %v, want an ExceededError", err)
	}
	if want := "exceeded quota: compute, requested: limits.cpu=1, used: limits.cpu=2, limited: limits.cpu=2"; err.Error() != want {
		t.Errorf("message %q\nwant    %q", err, want)
	}
	if err := l.Fits(ctx, "team", spec); err == nil {
		t.Error("Fits with the quota full: no error")
	}
	if err := l.CanFit(ctx, "team", spec); err != nil {
		t.Errorf("CanFit: one instance alone fits: %v", err)
	}
	used, err := l.Used(ctx, &src.quotas[0])
	if err != nil {
		t.Fatal(err)
	}
	if q := used["limits.cpu"]; q.String() != "2" {
		t.Errorf("used limits.cpu %s, want 2", q.String())
	}
	if q := used["pods"]; q.String() != "2" {
		t.Errorf("used pods %s, want 2", q.String())
	}
	r1()
	r1() // a second release gives nothing back twice
	if _, _, err := l.Reserve(ctx, "team", spec); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if _, _, err := l.Reserve(ctx, "other", spec); err != nil {
		t.Errorf("another namespace's reservations are its own: %v", err)
	}
	if len(notified) != 5 {
		t.Errorf("OnChange calls %v, want one per reservation and release", notified)
	}
	huge := &corev1.PodSpec{Containers: []corev1.Container{container("user-container", nil, rl("cpu", "3"))}}
	if err := l.CanFit(ctx, "team", huge); err == nil || !strings.Contains(err.Error(), "requested: limits.cpu=3") {
		t.Errorf("CanFit of an instance above hard: %v", err)
	}
}

func TestLedgerRequiresStatedResources(t *testing.T) {
	src := &fakeSource{quotas: []corev1.ResourceQuota{quota("compute", rl("limits.cpu", "2", "requests.memory", "1Gi"))}}
	l := NewLedger(src)
	spec := &corev1.PodSpec{Containers: []corev1.Container{container("user-container", nil, nil), container("sidecar", nil, rl("cpu", "1"))}}
	err := l.CanFit(context.Background(), "team", spec)
	want := "failed quota: compute: must specify limits.cpu for: user-container; requests.memory for: sidecar,user-container"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// A LimitRange default states them.
	src.ranges = []corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Default: rl("cpu", "500m", "memory", "128Mi"),
	}}}}}
	DefaultLimitRange(&src.ranges[0])
	if err := l.CanFit(context.Background(), "team", spec); err != nil {
		t.Fatalf("with LimitRange defaults: %v", err)
	}
}

func TestLedgerScopes(t *testing.T) {
	src := &fakeSource{quotas: []corev1.ResourceQuota{
		quota("best-effort", rl("pods", "1"), corev1.ResourceQuotaScopeBestEffort),
		quota("terminating", rl("pods", "0"), corev1.ResourceQuotaScopeTerminating),
	}}
	l := NewLedger(src)
	ctx := context.Background()
	be := &corev1.PodSpec{Containers: []corev1.Container{container("c", nil, nil)}}
	sized := &corev1.PodSpec{Containers: []corev1.Container{container("c", rl("cpu", "1"), nil)}}
	if _, _, err := l.Reserve(ctx, "team", be); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Reserve(ctx, "team", be); err == nil || !strings.Contains(err.Error(), "best-effort") {
		t.Fatalf("second best-effort instance: %v", err)
	}
	if _, _, err := l.Reserve(ctx, "team", sized); err != nil {
		t.Fatalf("an instance with requests is not BestEffort: %v", err)
	}
}

func TestLedgerCheckCreateAndUsed(t *testing.T) {
	ksvc := schema.GroupResource{Group: "serving.knative.dev", Resource: "services"}
	cm := schema.GroupResource{Resource: "configmaps"}
	src := &fakeSource{
		quotas: []corev1.ResourceQuota{quota("objects", rl("count/services.serving.knative.dev", "1", "configmaps", "2", "count/configmaps", "5", "requests.storage", "1Gi"))},
		counts: map[schema.GroupResource]int64{ksvc: 1, cm: 1},
	}
	l := NewLedger(src)
	ctx := context.Background()
	err := l.CheckCreate(ctx, "team", ksvc)
	want := "exceeded quota: objects, requested: count/services.serving.knative.dev=1, used: count/services.serving.knative.dev=1, limited: count/services.serving.knative.dev=1"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if err := l.CheckCreate(ctx, "team", cm); err != nil {
		t.Fatalf("second configmap: %v", err)
	}
	src.counts[cm] = 2
	if err := l.CheckCreate(ctx, "team", cm); err == nil || !strings.Contains(err.Error(), "configmaps=2") {
		t.Fatalf("third configmap: %v", err)
	}
	if err := l.CheckCreate(ctx, "team", schema.GroupResource{Resource: "secrets"}); err != nil {
		t.Fatalf("secrets are not limited: %v", err)
	}
	used, err := l.Used(ctx, &src.quotas[0])
	if err != nil {
		t.Fatal(err)
	}
	for n, w := range map[corev1.ResourceName]string{"count/services.serving.knative.dev": "1", "configmaps": "2", "count/configmaps": "2", "requests.storage": "0"} {
		if q := used[n]; q.String() != w {
			t.Errorf("used %s = %s, want %s", n, q.String(), w)
		}
	}
}

func TestLedgerConcurrentReserve(t *testing.T) {
	src := &fakeSource{quotas: []corev1.ResourceQuota{quota("pods", rl("pods", "5"))}}
	l := NewLedger(src)
	spec := &corev1.PodSpec{Containers: []corev1.Container{container("c", nil, nil)}}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := l.Reserve(context.Background(), "team", spec); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 5 {
		t.Errorf("%d of 20 concurrent reservations succeeded, want exactly 5", ok)
	}
}

// TestValidationStaysLinear: many scopes on many resources give one error
// per scope, each naming that scope, not one per pair with the whole list.
func TestValidationStaysLinear(t *testing.T) {
	const n = 5000
	spec := corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}, ScopeSelector: &corev1.ScopeSelector{}}
	for i := 0; i < n; i++ {
		spec.Hard[corev1.ResourceName(fmt.Sprintf("hugepages-%dKi", i+1))] = resource.MustParse("1Mi")
		spec.Scopes = append(spec.Scopes, corev1.ResourceQuotaScopeBestEffort)
		spec.ScopeSelector.MatchExpressions = append(spec.ScopeSelector.MatchExpressions,
			corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeBestEffort, Operator: corev1.ScopeSelectorOpExists})
	}
	errs := ValidateResourceQuota(&corev1.ResourceQuota{Spec: spec})
	if len(errs) != 2*n {
		t.Fatalf("%d errors, want one per scope and expression (%d)", len(errs), 2*n)
	}
	size := 0
	for _, e := range errs {
		size += len(e.Error())
	}
	if size > 2*n*200 {
		t.Errorf("the errors' text is %d bytes for %d scopes: not linear", size, 2*n)
	}
}
