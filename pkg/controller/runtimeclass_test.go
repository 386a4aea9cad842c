package controller

import (
	"context"
	"slices"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRuntimeClassesOfUnisolatedHandlers: the RuntimeClass of a handler
// that does not isolate (process) says so, also when an older knbox
// registered it unmarked; RemoveRuntimeClasses deletes the ones knbox
// registered for runtimes not enabled, and never one the operator made.
func TestRuntimeClassesOfUnisolatedHandlers(t *testing.T) {
	ctx := context.Background()
	old := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "process", Labels: map[string]string{BuiltinLabel: "true"}}, Handler: "process"}
	mine := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "trusted"}, Handler: "process"}
	alias := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc-alias", Labels: map[string]string{BuiltinLabel: "true"}}, Handler: "runc"}
	kube := fake.NewSimpleClientset(old, mine, alias)
	const desc = "process does not isolate"
	if err := RegisterRuntimeClasses(ctx, kube.NodeV1().RuntimeClasses(), []RuntimeHandler{{Name: "process", Unisolated: desc}, {Name: "runc"}}); err != nil {
		t.Fatal(err)
	}
	get := func(name string) *nodev1.RuntimeClass {
		rc, err := kube.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	if rc := get("process"); rc.Labels[IsolationLabel] != "none" || rc.Annotations[DescriptionAnnotation] != desc {
		t.Errorf("process: labels %v, annotations %v; want isolation none and the description", rc.Labels, rc.Annotations)
	}
	if rc := get("runc"); rc.Labels[BuiltinLabel] != "true" || rc.Labels[IsolationLabel] != "" || len(rc.Annotations) != 0 {
		t.Errorf("runc: labels %v, annotations %v", rc.Labels, rc.Annotations)
	}
	if rc := get("trusted"); len(rc.Labels) != 0 {
		t.Errorf("the operator's RuntimeClass was changed: %v", rc.Labels)
	}

	if err := RemoveRuntimeClasses(ctx, kube.NodeV1().RuntimeClasses(), []string{"process", "runc-nope"}); err != nil {
		t.Fatal(err)
	}
	l, err := kube.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rc := range l.Items {
		names = append(names, rc.Name)
	}
	slices.Sort(names)
	if want := []string{"runc", "runc-alias", "trusted"}; !slices.Equal(names, want) {
		t.Errorf("after removing process: %v, want %v", names, want)
	}
	if err := RemoveRuntimeClasses(ctx, kube.NodeV1().RuntimeClasses(), nil); err != nil {
		t.Error(err)
	}
}
