package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver"
)

func ksvc(name, image string) *servingv1.Service {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
	return s
}

func TestServiceCRUDWithKnativeClientset(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.serving.ServingV1().Services("default")

	created, err := c.Create(ctx, ksvc("hello", "example.com/hello:v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Errorf("system metadata not set: uid=%q rv=%q ts=%v", created.UID, created.ResourceVersion, created.CreationTimestamp)
	}
	if created.Generation != 1 {
		t.Errorf("generation = %d, want 1", created.Generation)
	}
	// Knative's own defaults ran.
	spec := created.Spec.Template.Spec
	if spec.TimeoutSeconds == nil || *spec.TimeoutSeconds != 300 {
		t.Errorf("timeoutSeconds not defaulted to 300: %v", spec.TimeoutSeconds)
	}
	if spec.Containers[0].Name != "user-container" || spec.Containers[0].ReadinessProbe == nil {
		t.Errorf("container defaults missing: %+v", spec.Containers[0])
	}
	if len(created.Spec.Traffic) != 1 || created.Spec.Traffic[0].LatestRevision == nil || !*created.Spec.Traffic[0].LatestRevision {
		t.Errorf("traffic not defaulted to latest: %+v", created.Spec.Traffic)
	}
	if got := created.Annotations["serving.knative.dev/creator"]; got != "alice@example.com" {
		t.Errorf("creator = %q", got)
	}
	if got := created.Annotations["serving.knative.dev/lastModifier"]; got != "alice@example.com" {
		t.Errorf("lastModifier = %q", got)
	}

	got, err := c.Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != created.ResourceVersion {
		t.Errorf("get rv %s != create rv %s", got.ResourceVersion, created.ResourceVersion)
	}

	// A spec change bumps generation; a label change does not.
	got.Spec.Template.Spec.Containers[0].Image = "example.com/hello:v2"
	upd, err := c.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if upd.Generation != 2 {
		t.Errorf("generation after spec change = %d, want 2", upd.Generation)
	}
	upd.Labels = map[string]string{"team": "a"}
	upd2, err := c.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if upd2.Generation != 2 {
		t.Errorf("generation after label change = %d, want 2", upd2.Generation)
	}
	// An update that changes nothing keeps the resourceVersion.
	same, err := c.Update(ctx, upd2, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if same.ResourceVersion != upd2.ResourceVersion {
		t.Errorf("no-op update changed rv %s -> %s", upd2.ResourceVersion, same.ResourceVersion)
	}

	// Stale update: 409 Conflict.
	_, err = c.Update(ctx, upd, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("stale update: want Conflict, got %v", err)
	}

	list, err := c.List(ctx, metav1.ListOptions{LabelSelector: "team=a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "hello" || list.ResourceVersion == "" {
		t.Errorf("list by label: %d items, rv %q", len(list.Items), list.ResourceVersion)
	}
	list, err = c.List(ctx, metav1.ListOptions{LabelSelector: "team=b"})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("list team=b: %v, %d items", err, len(list.Items))
	}
	list, err = c.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=hello"})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("list by field: %v, %v", err, list)
	}
	_, err = c.List(ctx, metav1.ListOptions{FieldSelector: "spec.foo=bar"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: want BadRequest, got %v", err)
	}

	if err := c.Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "hello", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: want NotFound, got %v", err)
	}
	if err := c.Delete(ctx, "hello", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: want NotFound, got %v", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.serving.ServingV1().Services("default")
	if _, err := c.Create(ctx, ksvc("dup", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Create(ctx, ksvc("dup", "img"), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("duplicate: want AlreadyExists, got %v", err)
	}

	// Knative's validation: a missing image is refused with a 422 whose
	// cause names the field.
	bad := ksvc("noimage", "")
	_, err = c.Create(ctx, bad, metav1.CreateOptions{})
	assertInvalid(t, err, "spec.template.spec.containers[0].image")

	// A RuntimeClass that does not exist is refused (the KEP) ...
	rc := ksvc("sandboxed", "img")
	rc.Spec.Template.Spec.RuntimeClassName = ptr.To("gvisor")
	_, err = c.Create(ctx, rc, metav1.CreateOptions{})
	assertInvalid(t, err, "spec.template.spec.runtimeClassName")
	// ... and accepted once it exists.
	if _, err := e.kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Errorf("with the RuntimeClass present: %v", err)
	}

	// A missing namespace is refused as Kubernetes refuses it.
	inNope := ksvc("x", "img")
	inNope.Namespace = ""
	_, err = e.serving.ServingV1().Services("nope").Create(ctx, inNope, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `namespaces "nope" not found`) {
		t.Errorf("missing namespace: got %v", err)
	}

	// Invalid names.
	for _, name := range []string{"Upper", "has.dot", strings.Repeat("a", 64), "-lead"} {
		_, err := c.Create(ctx, ksvc(name, "img"), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("name %q: want Invalid, got %v", name, err)
		}
	}

	// generateName.
	g := ksvc("", "img")
	g.GenerateName = "gen-"
	got, err := c.Create(ctx, g, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.Name, "gen-") || len(got.Name) != len("gen-")+5 {
		t.Errorf("generated name %q", got.Name)
	}
	_, err = c.Create(ctx, ksvc("", "img"), metav1.CreateOptions{})
	assertInvalid(t, err, "metadata.name")
}

func assertInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 Invalid naming %s, got %v", field, err)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Code != 422 || st.Details == nil {
		t.Fatalf("status %d details %v", st.Code, st.Details)
	}
	for _, c := range st.Details.Causes {
		if c.Field == field && c.Message != "" {
			return
		}
	}
	t.Errorf("no cause for %s in %+v", field, st.Details.Causes)
}

func TestStatusSubresource(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.serving.ServingV1().Services("default")
	s, err := c.Create(ctx, ksvc("st", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Status sent on the main resource is ignored.
	s.Status.LatestCreatedRevisionName = "ignored"
	s.Spec.Template.Spec.Containers[0].Image = "img2"
	s, err = c.Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.LatestCreatedRevisionName != "" {
		t.Errorf("status changed through the main resource")
	}
	gen := s.Generation
	// Status changes through /status; spec sent there is ignored and the
	// generation stays.
	s.Status.LatestCreatedRevisionName = "st-00002"
	s.Status.ObservedGeneration = gen
	s.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionTrue}}
	s.Spec.Template.Spec.Containers[0].Image = "not-via-status"
	s, err = c.UpdateStatus(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.LatestCreatedRevisionName != "st-00002" || s.Generation != gen {
		t.Errorf("status update: latestCreated=%q generation %d->%d", s.Status.LatestCreatedRevisionName, gen, s.Generation)
	}
	if img := s.Spec.Template.Spec.Containers[0].Image; img != "img2" {
		t.Errorf("spec changed through /status: image %q", img)
	}
	// Patch on /status too.
	p := []byte(`{"status":{"latestReadyRevisionName":"st-00002"}}`)
	s, err = c.Patch(ctx, "st", types.MergePatchType, p, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.LatestReadyRevisionName != "st-00002" {
		t.Errorf("status patch not applied: %+v", s.Status)
	}
}

func TestPatchTypes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.serving.ServingV1().Services("default")
	if _, err := c.Create(ctx, ksvc("p", "img:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Patch(ctx, "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
	if err != nil || s.Labels["a"] != "b" {
		t.Fatalf("merge patch: %v %v", err, s)
	}
	s, err = c.Patch(ctx, "p", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"img:2"}]`), metav1.PatchOptions{})
	if err != nil || s.Spec.Template.Spec.Containers[0].Image != "img:2" || s.Generation != 2 {
		t.Fatalf("json patch: %v gen=%d", err, s.Generation)
	}
	// A Knative kind takes no strategic merge patch (415, as a custom
	// resource on a cluster); a built-in kind does.
	_, err = c.Patch(ctx, "p", types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"user-container","env":[{"name":"A","value":"1"}]}]}}}}`), metav1.PatchOptions{})
	if !apierrors.IsUnsupportedMediaType(err) || !strings.Contains(err.Error(), "application/merge-patch+json") {
		t.Fatalf("strategic patch of a Service: want 415 naming the accepted types, got %v", err)
	}
	cms := e.kube.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "smp"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Patch(ctx, "smp", types.StrategicMergePatchType, []byte(`{"data":{"b":"2"}}`), metav1.PatchOptions{})
	if err != nil || cm.Data["a"] != "1" || cm.Data["b"] != "2" {
		t.Fatalf("strategic patch of a ConfigMap: %v %v", err, cm)
	}
	// A patch that makes the object invalid is refused and nothing changes.
	_, err = c.Patch(ctx, "p", types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"image":""}]}}}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("invalid patch: want Invalid, got %v", err)
	}
	_, err = c.Patch(ctx, "p", types.JSONPatchType, []byte(`[{"op":"nope"}]`), metav1.PatchOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("malformed json patch: want BadRequest, got %v", err)
	}
	_, err = c.Patch(ctx, "p", types.ApplyPatchType, []byte(`{}`), metav1.PatchOptions{FieldManager: "x"})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "apiVersion") {
		t.Errorf("apply patch without apiVersion: want BadRequest naming apiVersion, got %v", err)
	}
	after, _ := c.Get(ctx, "p", metav1.GetOptions{})
	if after.ResourceVersion != s.ResourceVersion {
		t.Errorf("refused patches changed the object")
	}
}

func TestWatchResumeAndGone(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.serving.ServingV1().Services("default")
	s1, err := c.Create(ctx, ksvc("w1", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Events after s1's revision: w2 created, w1 updated, w1 deleted.
	if _, err := c.Create(ctx, ksvc("w2", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s1.Labels = map[string]string{"x": "y"}
	if _, err := c.Update(ctx, s1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: s1.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := []struct {
		typ  watch.EventType
		name string
	}{{watch.Added, "w2"}, {watch.Modified, "w1"}, {watch.Deleted, "w1"}}
	for _, wnt := range want {
		select {
		case ev := <-w.ResultChan():
			svc, ok := ev.Object.(*servingv1.Service)
			if ev.Type != wnt.typ || !ok || svc.Name != wnt.name {
				t.Fatalf("event %s %T, want %s %s", ev.Type, ev.Object, wnt.typ, wnt.name)
			}
		case <-ctx.Done():
			t.Fatal("timed out waiting for watch events")
		}
	}
	// Live events arrive too, filtered by label.
	wl, err := c.Watch(ctx, metav1.ListOptions{LabelSelector: "live=yes"})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Stop()
	live := ksvc("w3", "img")
	live.Labels = map[string]string{"live": "yes"}
	if _, err := c.Create(ctx, ksvc("w4-unlabelled", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-wl.ResultChan():
		if svc := ev.Object.(*servingv1.Service); ev.Type != watch.Added || svc.Name != "w3" {
			t.Fatalf("live event %s %s", ev.Type, svc.Name)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for live event")
	}
}

func TestCascadingDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	svc, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("owner", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default", OwnerReferences: []metav1.OwnerReference{ref}}}
	cfg.Spec.Template.Spec.Containers = []corev1.Container{{Image: "img"}}
	cfg, err = e.serving.ServingV1().Configurations("default").Create(ctx, cfg, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "owner-00001", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "serving.knative.dev/v1", Kind: "Configuration", Name: cfg.Name, UID: cfg.UID}}}}
	rev.Spec.Containers = []corev1.Container{{Image: "img"}}
	if _, err := e.serving.ServingV1().Revisions("default").Create(ctx, rev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An unrelated configuration survives.
	other := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"}}
	other.Spec.Template.Spec.Containers = []corev1.Container{{Image: "img"}}
	if _, err := e.serving.ServingV1().Configurations("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := e.serving.ServingV1().Services("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "configuration and revision to be collected", func() bool {
		_, e1 := e.serving.ServingV1().Configurations("default").Get(ctx, "owner", metav1.GetOptions{})
		_, e2 := e.serving.ServingV1().Revisions("default").Get(ctx, "owner-00001", metav1.GetOptions{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2)
	})
	if _, err := e.serving.ServingV1().Configurations("default").Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Errorf("unrelated configuration: %v", err)
	}

	// Foreground: the owner stays until its dependents are gone.
	svc, _ = e.serving.ServingV1().Services("default").Create(ctx, ksvc("fg", "img"), metav1.CreateOptions{})
	dep := route("fg", svc.UID)
	if _, err := e.serving.ServingV1().Routes("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fg := metav1.DeletePropagationForeground
	if err := e.serving.ServingV1().Services("default").Delete(ctx, "fg", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "foreground deletion to finish", func() bool {
		_, e1 := e.serving.ServingV1().Services("default").Get(ctx, "fg", metav1.GetOptions{})
		_, e2 := e.serving.ServingV1().Routes("default").Get(ctx, "fg", metav1.GetOptions{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2)
	})

	// Orphan: dependents stay, without the owner reference.
	svc, _ = e.serving.ServingV1().Services("default").Create(ctx, ksvc("orph", "img"), metav1.CreateOptions{})
	dep = route("orph", svc.UID)
	if _, err := e.serving.ServingV1().Routes("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := metav1.DeletePropagationOrphan
	if err := e.serving.ServingV1().Services("default").Delete(ctx, "orph", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	rt, err := e.serving.ServingV1().Routes("default").Get(ctx, "orph", metav1.GetOptions{})
	if err != nil || len(rt.OwnerReferences) != 0 {
		t.Errorf("orphaned route: %v %+v", err, rt)
	}
}

func route(name string, owner types.UID) *servingv1.Route {
	r := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: name, UID: owner}}}}
	r.Spec.Traffic = []servingv1.TrafficTarget{{ConfigurationName: name, Percent: ptr.To[int64](100)}}
	return r
}

func TestNamespaceLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := e.kube.CoreV1().Namespaces()
	if _, err := ns.Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("default namespace: %v", err)
	}
	if _, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inA := ksvc("s", "img")
	inA.Namespace = "team-a"
	if _, err := e.serving.ServingV1().Services("team-a").Create(ctx, inA, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Secrets("team-a").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "namespace team-a and its content to go", func() bool {
		_, err := ns.Get(ctx, "team-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := e.kube.CoreV1().Secrets("team-a").Get(ctx, "sec", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("secret survived its namespace: %v", err)
	}
	if err := ns.Delete(ctx, "default", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting default: want Forbidden, got %v", err)
	}
}

func TestCoreKinds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sec, err := e.kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"user": "u"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["user"]) != "u" || len(sec.StringData) != 0 || sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret defaults: %+v", sec)
	}
	_, err = e.kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Data: map[string][]byte{"no/slash": []byte("x")}}, metav1.CreateOptions{})
	assertInvalid(t, err, "data[no/slash]")
	cm, err := e.kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "1"}, Immutable: ptr.To(true)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["a"] = "2"
	_, err = e.kube.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	assertInvalid(t, err, "data")

	rcs := e.kube.NodeV1().RuntimeClasses()
	rc, err := rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc.Handler = "runc"
	_, err = rcs.Update(ctx, rc, metav1.UpdateOptions{})
	assertInvalid(t, err, "handler")
	_, err = rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nohandler"}}, metav1.CreateOptions{})
	assertInvalid(t, err, "handler")
	// Unconditional update (no resourceVersion) is allowed for built-in kinds.
	sec.ResourceVersion = ""
	sec.Labels = map[string]string{"x": "y"}
	if _, err := e.kube.CoreV1().Secrets("default").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Errorf("unconditional secret update: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	for _, h := range []string{"", "Bearer wrong", "Basic YWRtaW46YWRtaW4=", "Bearer"} {
		req, _ := http.NewRequest("POST", e.url+"/apis/serving.knative.dev/v1/namespaces/default/services", strings.NewReader(`{"metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"image":"i"}]}}}}`))
		req.Header.Set("Content-Type", "application/json")
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st metav1.Status
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != 401 || st.Reason != metav1.StatusReasonUnauthorized {
			t.Errorf("auth %q: code %d reason %s", h, resp.StatusCode, st.Reason)
		}
	}
	if _, err := e.serving.ServingV1().Services("default").Get(context.Background(), "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("unauthenticated create stored something: %v", err)
	}
	code, _ := e.do("GET", "/healthz", "", nil)
	if code != 200 {
		t.Errorf("healthz %d", code)
	}
}

func TestExecProbesRefused(t *testing.T) {
	e := newEnv(t)
	s := ksvc("probe", "img")
	s.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	_, err := e.serving.ServingV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{})
	assertInvalid(t, err, "spec.template.spec.containers[0].readinessProbe.exec")
	s.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}}
	if _, err := e.serving.ServingV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Errorf("httpGet probe refused: %v", err)
	}
}

// TestCascadingDeleteByPages: a pass that reads the store one object per
// page collects every dependent and keeps the unrelated object.
func TestCascadingDeleteByPages(t *testing.T) {
	defer apiserver.SetGCPageSize(1)()
	e := newEnv(t)
	ctx := context.Background()
	svc, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("owner", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: svc.Name, UID: svc.UID}
	names := []string{"a", "b", "c", "unrelated"}
	for _, n := range names {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"}}
		if n != "unrelated" {
			cfg.OwnerReferences = []metav1.OwnerReference{ref}
		}
		cfg.Spec.Template.Spec.Containers = []corev1.Container{{Image: "img"}}
		if _, err := e.serving.ServingV1().Configurations("default").Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.serving.ServingV1().Services("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the dependents to be collected", func() bool {
		for _, n := range names[:3] {
			if _, err := e.serving.ServingV1().Configurations("default").Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	if _, err := e.serving.ServingV1().Configurations("default").Get(ctx, "unrelated", metav1.GetOptions{}); err != nil {
		t.Errorf("unrelated configuration: %v", err)
	}
}

// TestMissingOwnerCollects: a create or an update that gives an object an
// owner that does not exist queues a garbage collector pass, which
// deletes it; updates that leave the owner references alone do not
// keep a dependent from its owner's cascade.
func TestMissingOwnerCollects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cfgs := e.serving.ServingV1().Configurations("default")
	created := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "created-orphan", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "gone", UID: "uid-gone"}}}}
	created.Spec.Template.Spec.Containers = []corev1.Container{{Image: "img"}}
	if _, err := cfgs.Create(ctx, created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the configuration created with a missing owner to be collected", func() bool {
		_, err := cfgs.Get(ctx, "created-orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	mk := func(name string) *servingv1.Configuration {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		cfg.Spec.Template.Spec.Containers = []corev1.Container{{Image: "img"}}
		cfg, err := cfgs.Create(ctx, cfg, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	orphan := mk("orphan")
	orphan.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "gone", UID: "uid-gone"}}
	if _, err := cfgs.Update(ctx, orphan, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the configuration with a missing owner to be collected", func() bool {
		_, err := cfgs.Get(ctx, "orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	svc, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("owner", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep := mk("dependent")
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: svc.Name, UID: svc.UID}}
	if dep, err = cfgs.Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep.Status.LatestCreatedRevisionName = "dependent-00001"
	if _, err := cfgs.UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cfgs.Get(ctx, "dependent", metav1.GetOptions{}); err != nil {
		t.Fatalf("the dependent of a live owner: %v", err)
	}
	if err := e.serving.ServingV1().Services("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the dependent to be collected with its owner", func() bool {
		_, err := cfgs.Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
