package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

var servicesGVR = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}

func applyConfig(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

const applySvc = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: ssa
  labels: {team: a}
spec:
  template:
    spec:
      containers:
      - image: IMAGE
`

func managers(m metav1.Object) map[string]metav1.ManagedFieldsOperationType {
	out := map[string]metav1.ManagedFieldsOperationType{}
	for _, f := range m.GetManagedFields() {
		out[f.Manager] = f.Operation
	}
	return out
}

// nextSecond waits until the clock is past the second of obj's newest
// managedFields time, so that a repeated write would carry a new time.
func nextSecond(t *testing.T, obj metav1.Object) {
	t.Helper()
	var newest time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Time != nil && f.Time.After(newest) {
			newest = f.Time.Time
		}
	}
	eventually(t, 5*time.Second, "the clock to pass a second", func() bool { return time.Now().Unix() > newest.Unix() })
}

// TestServerSideApply: apply creates, a repeated apply is a no-op (same
// resourceVersion), another manager's apply conflicts (409 naming the
// owner) until forced, and every write keeps managedFields.
func TestServerSideApply(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.dyn.Resource(servicesGVR).Namespace("default")
	cfg := applyConfig(t, strings.Replace(applySvc, "IMAGE", "img:1", 1))

	first, err := c.Apply(ctx, "ssa", cfg, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("first apply: %v", err)
	}
	if got := managers(first); got["alice"] != metav1.ManagedFieldsOperationApply {
		t.Errorf("managers after apply: %v", got)
	}
	nextSecond(t, first)
	again, err := c.Apply(ctx, "ssa", cfg, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if again.GetResourceVersion() != first.GetResourceVersion() {
		t.Errorf("a repeated apply wrote: resourceVersion %s -> %s", first.GetResourceVersion(), again.GetResourceVersion())
	}

	// Another manager changing alice's field conflicts.
	other := applyConfig(t, strings.Replace(applySvc, "IMAGE", "img:2", 1))
	_, err = c.Apply(ctx, "ssa", other, metav1.ApplyOptions{FieldManager: "bob"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "alice"`) {
		t.Fatalf("conflicting apply: want 409 naming alice, got %v", err)
	}
	forced, err := c.Apply(ctx, "ssa", other, metav1.ApplyOptions{FieldManager: "bob", Force: true})
	if err != nil {
		t.Fatalf("forced apply: %v", err)
	}
	img, _, _ := unstructured.NestedSlice(forced.Object, "spec", "template", "spec", "containers")
	if len(img) != 1 || img[0].(map[string]interface{})["image"] != "img:2" {
		t.Errorf("forced apply: containers %v", img)
	}
	if forced.GetGeneration() != 2 {
		t.Errorf("generation %d, want 2", forced.GetGeneration())
	}

	// An update (merge patch) is recorded as an Update by its manager; the
	// object keeps working with client-side writes.
	p, err := c.Patch(ctx, "ssa", types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"x"}}}`), metav1.PatchOptions{FieldManager: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(p); got["carol"] != metav1.ManagedFieldsOperationUpdate || got["bob"] != metav1.ManagedFieldsOperationApply {
		t.Errorf("managers after a merge patch: %v", got)
	}

	// The status subresource takes an apply of status only, recorded as
	// the status subresource's.
	st := applyConfig(t, "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: ssa\nstatus:\n  observedGeneration: 2\n")
	withStatus, err := c.ApplyStatus(ctx, "ssa", st, metav1.ApplyOptions{FieldManager: "controller"})
	if err != nil {
		t.Fatalf("apply status: %v", err)
	}
	if g, _, _ := unstructured.NestedInt64(withStatus.Object, "status", "observedGeneration"); g != 2 {
		t.Errorf("status after apply: %v", withStatus.Object["status"])
	}
	var sub string
	for _, f := range withStatus.GetManagedFields() {
		if f.Manager == "controller" {
			sub = f.Subresource
		}
	}
	if sub != "status" {
		t.Errorf("status apply recorded with subresource %q", sub)
	}

	// Apply is refused in the seed version and on bad parameters.
	for _, tc := range []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"no fieldManager", svcPath + "/ssa", applySvc, 400, "fieldManager"},
		{"bad force", svcPath + "/ssa?fieldManager=x&force=maybe", applySvc, 400, "force"},
		{"bad fieldManager", svcPath + "/ssa?fieldManager=%07", applySvc, 400, "fieldManager"},
		{"wrong apiVersion", svcPath + "/ssa?fieldManager=x", strings.Replace(applySvc, "serving.knative.dev/v1", "v1", 1), 400, "apiVersion"},
		{"wrong kind", svcPath + "/ssa?fieldManager=x", strings.Replace(applySvc, "kind: Service", "kind: Route", 1), 400, "kind"},
		{"not an object", svcPath + "/ssa?fieldManager=x", "[1]", 400, "one object"},
		{"unknown field, strict", svcPath + "/ssa?fieldManager=x&fieldValidation=Strict", applySvc + "  bogus: 1\n", 400, "bogus"},
		{"seed version", "/apis/serving.knative.dev/v1alpha1/namespaces/default/services/ssa?fieldManager=x", applySvc, 415, "v1"},
		{"cbor", svcPath + "/ssa?fieldManager=x", applySvc, 415, ""},
	} {
		ct := "application/apply-patch+yaml"
		if tc.name == "cbor" {
			ct = "application/apply-patch+cbor"
		}
		code, body := e.do("PATCH", tc.path, ct, []byte(tc.body))
		if code != tc.code || !strings.Contains(string(body), tc.msg) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, body, tc.code, tc.msg)
		}
	}
}

// TestManagedFieldsOnEveryWrite: create, update and patch of a built-in
// kind record their managers; an apply of a ConfigMap merges by key and is
// a no-op when repeated.
func TestManagedFieldsOnEveryWrite(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cms := e.kube.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(cm); got["creator"] != metav1.ManagedFieldsOperationUpdate {
		t.Errorf("after create: %v", got)
	}
	cm.Data["b"] = "2"
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No fieldManager: the User-Agent's product names the manager.
	if got := managers(cm); len(got) != 2 {
		t.Errorf("after update: %v", got)
	}
	applied, err := cms.Patch(ctx, "m", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"c":"3"}}`), metav1.PatchOptions{FieldManager: "applier"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Data["a"] != "1" || applied.Data["c"] != "3" {
		t.Errorf("apply did not merge by key: %v", applied.Data)
	}
	nextSecond(t, applied)
	again, err := cms.Patch(ctx, "m", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"c":"3"}}`), metav1.PatchOptions{FieldManager: "applier"})
	if err != nil || again.ResourceVersion != applied.ResourceVersion {
		t.Errorf("repeated apply: %v, resourceVersion %s -> %s", err, applied.ResourceVersion, again.ResourceVersion)
	}
	// A conflict on a built-in kind names the manager too.
	_, err = cms.Patch(ctx, "m", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"c":"4"}}`), metav1.PatchOptions{FieldManager: "other"})
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != http.StatusConflict || !strings.Contains(err.Error(), "applier") {
		t.Errorf("conflict: %v", err)
	}
}

// TestApplyHostile: deep nesting, alias bombs and huge bodies in an apply
// configuration never get a 500 or a crash. Deep nesting under a field the
// Knative schema preserves unknown content of is accepted and dropped (an
// unknown field of the stored type, with a warning); elsewhere it is a 4xx.
func TestApplyHostile(t *testing.T) {
	e := newEnv(t)
	deep := strings.Repeat(`{"x":`, 5000) + "1" + strings.Repeat("}", 5000)
	bomb := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\na: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		bomb += n + ": &" + n + " [*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + "]\n"
		prev = n
	}
	code, body := e.do("PATCH", svcPath+"/deep?fieldManager=x", "application/apply-patch+yaml",
		[]byte(`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"deep"},"spec":{"template":{"metadata":{"annotations":{"a":"b"},"x":`+deep+`},"spec":{"containers":[{"image":"img"}]}}}}`))
	if code != http.StatusCreated || strings.Contains(string(body), `"x":{"x"`) {
		t.Errorf("deep nesting in a preserved field: %d %.300s", code, body)
	}
	for _, tc := range []struct{ name, path, body string }{
		{"deep nesting in a typed field", "/api/v1/namespaces/default/configmaps/deep?fieldManager=x",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":` + deep + `}`},
		{"alias bomb", "/api/v1/namespaces/default/configmaps/bomb?fieldManager=x", bomb},
		{"huge", "/api/v1/namespaces/default/configmaps/huge?fieldManager=x", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"a":"` + strings.Repeat("x", 4<<20) + `"}}`},
	} {
		code, body := e.do("PATCH", tc.path, "application/apply-patch+yaml", []byte(tc.body))
		if code < 400 || code >= 500 {
			t.Errorf("%s: %d %.300s", tc.name, code, body)
		}
	}
}

// TestUpdateWithoutManagedFieldsKeepsThem: an update whose object carries
// no managedFields keeps the stored ones and adds its manager, as
// kube-apiserver does. The controllers rely on it: their informers cache
// objects without managedFields (controller.TrimForCache) and they update
// copies of those.
func TestUpdateWithoutManagedFieldsKeepsThem(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.dyn.Resource(servicesGVR).Namespace("default")
	first, err := c.Apply(ctx, "ssa", applyConfig(t, strings.Replace(applySvc, "IMAGE", "img:1", 1)), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	upd := first.DeepCopy()
	upd.SetManagedFields(nil)
	a := upd.GetAnnotations()
	a["note"] = "x"
	upd.SetAnnotations(a)
	out, err := c.Update(ctx, upd, metav1.UpdateOptions{FieldManager: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(out); got["alice"] != metav1.ManagedFieldsOperationApply || got["dave"] != metav1.ManagedFieldsOperationUpdate {
		t.Errorf("managers after an update without managedFields: %v", got)
	}
}
