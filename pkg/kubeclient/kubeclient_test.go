package kubeclient_test

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/kubeclient"
)

// start runs an API server and returns knbox's Clientset of it and, to
// make and check objects independently, client-go's.
func start(t *testing.T) (*kubeclient.Clientset, kubernetes.Interface) {
	t.Helper()
	env := apiservertest.Start(t, "")
	cs, err := kubeclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs, kube
}

// TestClientsetRoundTrips: each verb of each kind reaches the API and
// comes back decoded, errors as the API's status errors.
func TestClientsetRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, kube := start(t)

	rcs := cs.RuntimeClasses()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc", Labels: map[string]string{"a": "1"}}, Handler: "runc"}
	made, err := rcs.Create(ctx, rc, metav1.CreateOptions{})
	if err != nil || made.Handler != "runc" || made.ResourceVersion == "" {
		t.Fatalf("create: %v, %+v", err, made)
	}
	if _, err := rcs.Create(ctx, rc, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create again: %v, want AlreadyExists", err)
	}
	got, err := rcs.Get(ctx, "runc", metav1.GetOptions{})
	if err != nil || got.UID != made.UID {
		t.Fatalf("get: %v, %+v", err, got)
	}
	got.Labels["a"] = "2"
	if up, err := rcs.Update(ctx, got, metav1.UpdateOptions{}); err != nil || up.Labels["a"] != "2" {
		t.Fatalf("update: %v, %+v", err, up)
	}
	if list, err := rcs.List(ctx, metav1.ListOptions{LabelSelector: "a=2"}); err != nil || len(list.Items) != 1 || list.Items[0].Name != "runc" {
		t.Fatalf("list a=2: %v, %+v", err, list)
	}
	if list, err := rcs.List(ctx, metav1.ListOptions{LabelSelector: "a=1"}); err != nil || len(list.Items) != 0 {
		t.Fatalf("list a=1: %v, %+v", err, list)
	}
	if err := rcs.Delete(ctx, "runc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rcs.Get(ctx, "runc", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get deleted: %v, want NotFound", err)
	}

	sas := cs.ServiceAccounts("default")
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
	if sa, err := kube.CoreV1().ServiceAccounts("default").Get(ctx, "builder", metav1.GetOptions{}); err != nil || sa.Namespace != "default" {
		t.Fatalf("the ServiceAccount through client-go: %v, %+v", err, sa)
	}
	if _, err := cs.ServiceAccounts("other").Get(ctx, "builder", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get in another namespace: %v, want NotFound", err)
	}
	if _, err := sas.CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("token of a ServiceAccount that does not exist: %v, want NotFound", err)
	}

	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "push"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "builder", Namespace: "default"}}}
	if _, err := cs.RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cs.RoleBindings("default").Get(ctx, "push", metav1.GetOptions{}); err != nil || got.RoleRef.Name != "edit" {
		t.Fatalf("get rolebinding: %v, %+v", err, got)
	}

	if pods, err := cs.Pods("default").List(ctx, metav1.ListOptions{}); err != nil || pods == nil {
		t.Fatalf("list pods: %v", err)
	}
	w, err := cs.RuntimeClasses().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if rc, ok := ev.Object.(*nodev1.RuntimeClass); !ok || rc.Name != "gvisor" {
			t.Fatalf("watch: %s %T", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch saw no RuntimeClass")
	}
}

// TestEventSink: events are created in their own namespace, then updated
// and patched by name, as client-go's broadcaster does with repeats.
func TestEventSink(t *testing.T) {
	t.Parallel()
	cs, kube := start(t)
	sink := cs.EventSink()
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "hello.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "hello"},
		Reason:         "Created", Message: "made", Type: corev1.EventTypeNormal, Count: 1, Source: corev1.EventSource{Component: "test"}}
	made, err := sink.Create(ev)
	if err != nil || made.Namespace != "default" || made.ResourceVersion == "" {
		t.Fatalf("create: %v, %+v", err, made)
	}
	made.Count = 2
	up, err := sink.Update(made)
	if err != nil || up.Count != 2 {
		t.Fatalf("update: %v, %+v", err, up)
	}
	patched, err := sink.Patch(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "hello.1", Namespace: "default"}}, []byte(`{"count":3,"message":"made again"}`))
	if err != nil || patched.Count != 3 || patched.Message != "made again" {
		t.Fatalf("patch: %v, %+v", err, patched)
	}
	got, err := kube.CoreV1().Events("default").Get(context.Background(), "hello.1", metav1.GetOptions{})
	if err != nil || got.Count != 3 || got.Reason != "Created" {
		t.Fatalf("the event through client-go: %v, %+v", err, got)
	}
}

// TestInformers: one informer per kind, shared; they list what exists,
// follow changes, transform what they cache, and honour the namespace and
// the list options' tweak.
func TestInformers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, kube := start(t)
	for _, ns := range []string{"knative-serving"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mustCreate := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pull"}}, metav1.CreateOptions{}))
	mustCreate(kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"}, metav1.CreateOptions{}))
	for _, ns := range []string{"default", "knative-serving"} {
		for _, name := range []string{"config-domain", "other"} {
			mustCreate(kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
		}
	}

	transformed := func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetAnnotations(map[string]string{"transformed": "yes"})
		}
		return obj, nil
	}
	f := kubeclient.NewInformers(cs, kubeclient.InformerOptions{Resync: time.Minute, Transform: transformed})
	if f.Secrets().Informer() != f.Secrets().Informer() {
		t.Fatal("two informers of Secrets")
	}
	secrets, cms, sas, rqs, rcs := f.Secrets(), f.ConfigMaps(), f.ServiceAccounts(), f.ResourceQuotas(), f.RuntimeClasses()
	domain := kubeclient.NewInformers(cs, kubeclient.InformerOptions{Namespace: "knative-serving", Tweak: func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", "config-domain").String()
	}})
	domainCMs := domain.ConfigMaps()

	stop := make(chan struct{})
	f.Start(stop)
	domain.Start(stop)
	defer func() {
		close(stop)
		f.Shutdown()
		domain.Shutdown()
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !f.WaitForCacheSync(waitCtx.Done()) || !domain.WaitForCacheSync(waitCtx.Done()) {
		t.Fatal("informers did not sync")
	}
	if s, err := secrets.Lister().Secrets("default").Get("pull"); err != nil || s.Annotations["transformed"] != "yes" {
		t.Fatalf("cached secret: %v, %+v", err, s)
	}
	if rc, err := rcs.Lister().Get("runc"); err != nil || rc.Handler != "runc" {
		t.Fatalf("cached runtimeclass: %v, %+v", err, rc)
	}
	if all, _ := cms.Lister().List(labels.Everything()); len(all) < 4 {
		t.Fatalf("%d ConfigMaps cached, want at least the 4 made", len(all))
	}
	if got, _ := domainCMs.Lister().List(labels.Everything()); len(got) != 1 || got[0].Namespace != "knative-serving" || got[0].Name != "config-domain" {
		t.Fatalf("the namespaced, selected informer cached %d ConfigMaps: %+v", len(got), got)
	}

	mustCreate(kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}))
	mustCreate(kube.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}}, metav1.CreateOptions{}))
	eventually(t, func() bool {
		_, errSA := sas.Lister().ServiceAccounts("default").Get("builder")
		_, errRQ := rqs.Lister().ResourceQuotas("default").Get("q")
		return errSA == nil && errRQ == nil
	})
	if err := kube.CoreV1().Secrets("default").Delete(ctx, "pull", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, err := secrets.Lister().Secrets("default").Get("pull")
		return apierrors.IsNotFound(err)
	})
}

// TestInformersShutdown: Shutdown waits for the informers to stop.
func TestInformersShutdown(t *testing.T) {
	t.Parallel()
	cs, _ := start(t)
	f := kubeclient.NewInformers(cs, kubeclient.InformerOptions{})
	secrets := f.Secrets()
	stop := make(chan struct{})
	f.Start(stop)
	if !cache.WaitForCacheSync(stop, secrets.Informer().HasSynced) {
		t.Fatal("no sync")
	}
	close(stop)
	f.Shutdown()
	if !secrets.Informer().IsStopped() {
		t.Fatal("the informer runs after Shutdown")
	}
}

// eventually waits up to 30 seconds for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
