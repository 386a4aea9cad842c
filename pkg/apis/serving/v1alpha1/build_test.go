package v1alpha1

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

const specOnlyBuild = `{"steps":[{"name":"a","image":"busybox","args":["echo"]}],"timeout":"1m0s"}`
const fullBuild = `{"apiVersion":"build.knative.dev/v1alpha1","kind":"Build","metadata":{"labels":{"team":"a"}},"spec":{"steps":[{"name":"a","image":"busybox","args":["echo"],"resources":{}}],"timeout":"1m0s"}}`

// TestBuildConversion: a Configuration's build is the template's
// BuildAnnotation in v1 (in one canonical form, the spec-only form
// included), and comes back as the build; buildRef and buildName are
// annotations too; a v1 Revision with an inline build shows its own Build
// as buildRef.
func TestBuildConversion(t *testing.T) {
	for _, raw := range []string{specOnlyBuild, fullBuild} {
		cfg := validConfig()
		cfg.Build = &runtime.RawExtension{Raw: []byte(raw)}
		svc := &Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: cfg}}}
		v1, err := ServiceToV1(svc, nil)
		if err != nil {
			t.Fatal(err)
		}
		ann := v1.Spec.Template.Annotations[BuildAnnotation]
		name, b, err := RevisionBuild(&metav1.ObjectMeta{Name: "s-00001", Annotations: v1.Spec.Template.Annotations})
		if err != nil || name != "s-00001" || b == nil || len(b.Spec.Steps) != 1 || b.Spec.Steps[0].Image != "busybox" {
			t.Fatalf("%s: annotation %s read as %q %+v %v", raw, ann, name, b, err)
		}
		back, err := ServiceFromV1(v1)
		if err != nil {
			t.Fatal(err)
		}
		if back.Spec.RunLatest == nil || back.Spec.RunLatest.Configuration.Build == nil || string(back.Spec.RunLatest.Configuration.Build.Raw) != ann {
			t.Fatalf("%s: back %+v", raw, back.Spec)
		}
		if _, ok := back.Spec.RunLatest.Configuration.RevisionTemplate.Annotations[BuildAnnotation]; ok {
			t.Errorf("the annotation shows in v1alpha1")
		}
		again, err := ServiceToV1(back, v1)
		if err != nil || !equality.Semantic.DeepEqual(again.Spec, v1.Spec) {
			t.Errorf("%s: round trip %v:\n%+v\n%+v", raw, err, again.Spec, v1.Spec)
		}
	}

	rev := &Revision{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: RevisionSpec{
		Container: &corev1.Container{Image: "x"}, BuildRef: &corev1.ObjectReference{Name: "b"}}}
	v1, err := RevisionToV1(rev)
	if err != nil {
		t.Fatal(err)
	}
	if name, inline, err := RevisionBuild(v1); name != "b" || inline != nil || err != nil {
		t.Errorf("buildRef read as %q %v %v (annotations %v)", name, inline, err, v1.Annotations)
	}
	back, err := RevisionFromV1(v1)
	if err != nil || back.Spec.BuildRef == nil || back.Spec.BuildRef.Name != "b" || back.Spec.BuildRef.Kind != "Build" || len(back.Annotations) != 0 {
		t.Errorf("back %+v %v", back, err)
	}
	rev.Spec.BuildRef, rev.Spec.BuildName = nil, "old"
	v1, _ = RevisionToV1(rev)
	if name, _, _ := RevisionBuild(v1); name != "old" {
		t.Errorf("buildName read as %q", name)
	}

	stamped := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "s-00001",
		Annotations: map[string]string{BuildAnnotation: fullBuild}},
		Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: "x"}}}}}
	seed, err := RevisionFromV1(stamped)
	if err != nil || seed.Spec.BuildRef == nil || seed.Spec.BuildRef.Name != "s-00001" || len(seed.Annotations) != 0 {
		t.Errorf("stamped revision %+v %v", seed, err)
	}
}

// FuzzParseBuild: any build a client sends is parsed or refused with a
// field error, never a panic, and what parses converts back to itself.
func FuzzParseBuild(f *testing.F) {
	for _, s := range []string{specOnlyBuild, fullBuild, `{}`, `[]`, `{"apiVersion":"v1","kind":"Pod"}`, `{"spec":{}} {}`,
		`{"metadata":{"name":"x"},"apiVersion":"build.knative.dev/v1alpha1","kind":"Build"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, fe := ParseBuild(raw)
		if fe != nil {
			if fe.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		c := canonicalBuild(b)
		b2, fe := ParseBuild([]byte(c))
		if fe != nil {
			t.Fatalf("canonical form %s refused: %v", c, fe)
		}
		if c2 := canonicalBuild(b2); c2 != c {
			t.Fatalf("canonical form not stable:\n%s\n%s", c, c2)
		}
		var v map[string]interface{}
		if err := json.Unmarshal([]byte(c), &v); err != nil {
			t.Fatal(err)
		}
	})
}
