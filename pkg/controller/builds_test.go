package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/apis/serving/v1alpha1"
)

var buildsGVR = buildv1alpha1.SchemeGroupVersion.WithResource("builds")

func (e *env) getBuild(ns, name string) (*buildv1alpha1.Build, error) {
	u, err := e.dyn.Resource(buildsGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	b := &buildv1alpha1.Build{}
	return b, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b)
}

// finishBuild sets a Build's Succeeded condition, as package build does.
func (e *env) finishBuild(t *testing.T, ns, name string, ok bool, message string) {
	t.Helper()
	b, err := e.getBuild(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		b.Status.MarkSucceeded()
	} else {
		b.Status.MarkFailed(buildv1alpha1.ReasonBuildFailed, message)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(buildv1alpha1.SchemeGroupVersion.String())
	u.SetKind("Build")
	if _, err := e.dyn.Resource(buildsGVR).Namespace(ns).UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) revisionCond(ns, name string, typ apis.ConditionType) (*servingv1.Revision, *apis.Condition, error) {
	rev, err := e.client.ServingV1().Revisions(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return rev, rev.Status.GetCondition(typ), nil
}

// TestRevisionWaitsForBuild: a Revision stamped from a template with a
// build gets its own Build (owned by it) and waits, BuildSucceeded and
// Ready Unknown, its image unresolved and not run; it becomes Ready once the
// Build succeeded. A Revision naming a Build (buildRef) waits for it to
// exist and fails with the Build's message.
func TestRevisionWaitsForBuild(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const inline = `{"apiVersion":"build.knative.dev/v1alpha1","kind":"Build","spec":{"steps":[{"name":"s","image":"example.com/builder"}]}}`
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "built", Namespace: "default"}}
	cfg.Spec.Template.Annotations = map[string]string{v1alpha1.BuildAnnotation: inline}
	cfg.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/built:v1"}}
	if _, err := e.client.ServingV1().Configurations("default").Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Revision's Build", func() error {
		b, err := e.getBuild("default", "built-00001")
		if err != nil {
			return err
		}
		if len(b.OwnerReferences) != 1 || b.OwnerReferences[0].Kind != "Revision" || b.OwnerReferences[0].Name != "built-00001" || len(b.Spec.Steps) != 1 {
			return fmt.Errorf("build %+v", b)
		}
		return nil
	})
	eventually(t, "the Revision waiting", func() error {
		rev, c, err := e.revisionCond("default", "built-00001", v1alpha1.RevisionConditionBuildSucceeded)
		if err != nil {
			return err
		}
		if c == nil || !c.IsUnknown() || c.Reason != "Building" {
			return fmt.Errorf("BuildSucceeded %+v", c)
		}
		if r := rev.Status.GetCondition(apis.ConditionReady); r == nil || !r.IsUnknown() {
			return fmt.Errorf("Ready %+v", r)
		}
		return nil
	})
	e.rt.mu.Lock()
	resolved, ran := e.rt.resolves["example.com/built:v1"], e.rt.ensured["default/built-00001"]
	e.rt.mu.Unlock()
	if resolved != 0 || ran != 0 {
		t.Fatalf("a Revision waiting for its build was resolved %d times and run %d times", resolved, ran)
	}
	e.finishBuild(t, "default", "built-00001", true, "")
	eventually(t, "the Revision ready", func() error {
		rev, c, err := e.revisionCond("default", "built-00001", v1alpha1.RevisionConditionBuildSucceeded)
		if err != nil {
			return err
		}
		if c == nil || !c.IsTrue() || !rev.IsReady() {
			return fmt.Errorf("BuildSucceeded %+v, ready %v", c, rev.IsReady())
		}
		return nil
	})

	// buildRef to a Build that does not exist yet, which then fails.
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "byref", Namespace: "default",
		Annotations: map[string]string{v1alpha1.BuildRefAnnotation: `{"kind":"Build","apiVersion":"build.knative.dev/v1alpha1","name":"later"}`}}}
	rev.Spec.Containers = []corev1.Container{{Image: "example.com/later:v1"}}
	if _, err := e.client.ServingV1().Revisions("default").Create(ctx, rev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "waiting for a missing Build", func() error {
		_, c, err := e.revisionCond("default", "byref", v1alpha1.RevisionConditionBuildSucceeded)
		if err != nil {
			return err
		}
		if c == nil || !c.IsUnknown() || !strings.Contains(c.Message, `"later", which does not exist`) {
			return fmt.Errorf("BuildSucceeded %+v", c)
		}
		return nil
	})
	b := &buildv1alpha1.Build{TypeMeta: metav1.TypeMeta{APIVersion: "build.knative.dev/v1alpha1", Kind: "Build"},
		ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: "default"},
		Spec:       buildv1alpha1.BuildSpec{Steps: []corev1.Container{{Name: "s", Image: "example.com/builder"}}}}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if _, err := e.dyn.Resource(buildsGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.finishBuild(t, "default", "later", false, `step "s" failed (exit code 2): tests failed`)
	eventually(t, "the Revision failed", func() error {
		_, c, err := e.revisionCond("default", "byref", apis.ConditionReady)
		if err != nil {
			return err
		}
		if c == nil || !c.IsFalse() || c.Reason != "BuildFailed" || !strings.Contains(c.Message, "tests failed") {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
}
