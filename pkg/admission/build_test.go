package admission

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

func build(ns, name string, annotations map[string]string) *buildv1alpha1.Build {
	return &buildv1alpha1.Build{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec:       buildv1alpha1.BuildSpec{Steps: []corev1.Container{{Name: "s", Image: "example.com/b@sha256:" + strings.Repeat("0", 64)}}},
	}
}

// TestBuildAdmission: a Build's sandbox is judged as an instance's pod:
// the namespace's default RuntimeClass is written into its annotation, a
// class the namespace may not use is refused at that annotation, Pod
// Security applies to its steps; the operator's timeout bounds apply.
func TestBuildAdmission(t *testing.T) {
	e := newTenantEnv(t,
		newNamespace("sandboxed", nil, map[string]string{AllowedRuntimeClassesAnnotation: "runsc", DefaultRuntimeClassAnnotation: "runsc"}),
		newNamespace("enforced", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}, nil))
	gr := buildv1alpha1.Resource("builds")

	b := build("sandboxed", "a", nil)
	if _, errs, err := e.admit(t, Create, b, nil, gr); err != nil || len(errs) > 0 {
		t.Fatalf("a Build naming no RuntimeClass: %v %v", errs, err)
	}
	if c := b.Annotations[buildv1alpha1.RuntimeClassAnnotation]; c != "runsc" {
		t.Errorf("runtime class annotation %q, want the namespace default runsc", c)
	}
	if b.Spec.Timeout == nil || b.Spec.Timeout.Duration != buildv1alpha1.DefaultTimeout {
		t.Errorf("timeout %v, want the default", b.Spec.Timeout)
	}
	b = build("sandboxed", "b", map[string]string{buildv1alpha1.RuntimeClassAnnotation: "runc"})
	_, errs, err := e.admit(t, Create, b, nil, gr)
	if err != nil || len(errs) != 1 || errs[0].Field != "metadata.annotations[build.knbox.dev/runtime-class-name]" ||
		!strings.Contains(errs[0].Detail, `RuntimeClass "runc" is not allowed in namespace "sandboxed"`) {
		t.Fatalf("runc in a runsc namespace: %v %v", errs, err)
	}

	_, _, err = e.admit(t, Create, build("enforced", "root", nil), nil, gr)
	wantForbidden(t, err, `builds.build.knative.dev "root" is forbidden: violates PodSecurity "restricted:latest":`, "runAsNonRoot != true")

	e.a.Builds = buildv1alpha1.Limits{DefaultTimeout: time.Minute, MaxTimeout: time.Hour}
	b = build("sandboxed", "long", nil)
	b.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Hour}
	if _, errs, err := e.admit(t, Create, b, nil, gr); err == nil && len(errs) == 0 {
		t.Fatal("a timeout over builds.maxTimeout accepted")
	} else if !strings.Contains(err.Error()+errs.ToAggregate().Error(), "spec.timeout") {
		t.Errorf("refusal does not name spec.timeout: %v %v", errs, err)
	}
}
