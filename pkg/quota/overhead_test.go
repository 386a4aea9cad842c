package quota

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// classSource is a fakeSource that also serves RuntimeClasses.
type classSource struct {
	fakeSource
	classes map[string]*nodev1.RuntimeClass
}

func (c *classSource) RuntimeClass(_ context.Context, name string) (*nodev1.RuntimeClass, error) {
	if rc, ok := c.classes[name]; ok {
		return rc, nil
	}
	return nil, apierrors.NewNotFound(nodev1.Resource("runtimeclasses"), name)
}

// TestRuntimeClassOverhead: an instance of a RuntimeClass with
// overhead.podFixed counts the overhead besides its containers, as
// Kubernetes counts PodOverhead: in every request, in the limits that are
// set, in ResourceQuota usage and in a LimitRange's Pod limits. A class
// without overhead, a missing class or a Source without RuntimeClasses
// count none, and a pod spec's own overhead is not trusted.
func TestRuntimeClassOverhead(t *testing.T) {
	sandbox := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc",
		Overhead: &nodev1.Overhead{PodFixed: rl("cpu", "250m", "memory", "64Mi")}}
	src := &classSource{
		fakeSource: fakeSource{quotas: []corev1.ResourceQuota{quota("compute", rl("requests.cpu", "1", "limits.memory", "1Gi"))}},
		classes:    map[string]*nodev1.RuntimeClass{"gvisor": sandbox, "runc": {ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}},
	}
	l := NewLedger(src)
	ctx := context.Background()
	spec := func(class string) *corev1.PodSpec {
		s := &corev1.PodSpec{Containers: []corev1.Container{container("user-container", rl("cpu", "250m"), rl("memory", "256Mi"))}}
		if class != "" {
			s.RuntimeClassName = &class
		}
		return s
	}
	pod, err := l.EffectivePod(ctx, "team", spec("gvisor"))
	if err != nil {
		t.Fatal(err)
	}
	u := PodUsage(pod)
	for n, want := range map[corev1.ResourceName]string{"requests.cpu": "500m", "cpu": "500m", "requests.memory": "320Mi", "limits.memory": "320Mi"} {
		if q := u[n]; q.String() != want {
			t.Errorf("usage %s = %s, want %s", n, q.String(), want)
		}
	}
	if _, ok := u["limits.cpu"]; ok {
		t.Errorf("limits.cpu counted though no container sets it: %v", u)
	}
	for _, class := range []string{"runc", "missing", ""} {
		pod, err := l.EffectivePod(ctx, "team", spec(class))
		if err != nil {
			t.Fatal(err)
		}
		if q := PodUsage(pod)["requests.cpu"]; q.String() != "250m" || pod.Overhead != nil {
			t.Errorf("class %q: requests.cpu %s, overhead %v; want 250m and none", class, q.String(), pod.Overhead)
		}
	}
	forged := spec("runc")
	forged.Overhead = rl("cpu", "-10")
	if pod, _ := l.EffectivePod(ctx, "team", forged); pod.Overhead != nil {
		t.Errorf("a pod spec's own overhead is kept: %v", pod.Overhead)
	}
	if pod, _ := NewLedger(&src.fakeSource).EffectivePod(ctx, "team", spec("gvisor")); pod.Overhead != nil {
		t.Errorf("a Source without RuntimeClasses: overhead %v", pod.Overhead)
	}

	// requests.cpu 1: two sandboxed instances (500m each) fit, a third does
	// not, and the refusal counts the overhead.
	for range 2 {
		if _, _, err := l.Reserve(ctx, "team", spec("gvisor")); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = l.Reserve(ctx, "team", spec("gvisor"))
	if !errors.Is(err, ErrExceeded) {
		t.Fatalf("third sandboxed instance: %v, want exceeded", err)
	}
	if want := "exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=1, limited: requests.cpu=1"; err.Error() != want {
		t.Errorf("message %q\nwant    %q", err, want)
	}
	// Track (adopted instances) counts it too.
	l2 := NewLedger(src)
	l2.Track("team", spec("gvisor"))
	if used, err := l2.Used(ctx, &src.quotas[0]); err != nil || used.Name("requests.cpu", "").String() != "500m" {
		t.Errorf("tracked instance: used %v %v, want requests.cpu 500m", used, err)
	}

	// A LimitRange's Pod maximum counts the overhead; the Container one
	// does not.
	ranges := []corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
		{Type: corev1.LimitTypeContainer, Max: rl("memory", "300Mi")},
		{Type: corev1.LimitTypePod, Max: rl("memory", "300Mi")},
	}}}}
	pod, _ = l.EffectivePod(ctx, "team", spec("gvisor"))
	if err := CheckLimitRanges(pod, ranges); err == nil || err.Error() != "maximum memory usage per Pod is 300Mi, but limit is 320Mi" {
		t.Errorf("Pod max with the overhead: %v", err)
	}
	pod, _ = l.EffectivePod(ctx, "team", spec("runc"))
	if err := CheckLimitRanges(pod, ranges); err != nil {
		t.Errorf("without overhead: %v", err)
	}
}
