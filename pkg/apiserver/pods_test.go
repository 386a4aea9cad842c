package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// fakePods is a PodSource whose instances the test sets.
type fakePods struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	deleted map[string]int
	// ownerGone counts OwnerGone calls.
	ownerGone map[string]int
	subs      []func(ns, name string)
}

func newFakePods() *fakePods {
	return &fakePods{pods: map[string]*corev1.Pod{}, deleted: map[string]int{}, ownerGone: map[string]int{}}
}

func (f *fakePods) Pods() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out
}

func (f *fakePods) Pod(ns, name string) (*corev1.Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	if !ok {
		return nil, false
	}
	return p.DeepCopy(), true
}

func (f *fakePods) DeletePod(ns, name string) error {
	f.mu.Lock()
	f.deleted[ns+"/"+name]++
	f.mu.Unlock()
	return nil
}

func (f *fakePods) OwnerGone(ns, name string, _ types.UID) error {
	f.mu.Lock()
	f.ownerGone[ns+"/"+name]++
	f.mu.Unlock()
	return nil
}

func (f *fakePods) SubscribePods(fn func(ns, name string)) {
	f.mu.Lock()
	f.subs = append(f.subs, fn)
	f.mu.Unlock()
}

func (f *fakePods) set(p *corev1.Pod) {
	f.mu.Lock()
	f.pods[p.Namespace+"/"+p.Name] = p
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(p.Namespace, p.Name)
	}
}

func (f *fakePods) remove(ns, name string) {
	f.mu.Lock()
	delete(f.pods, ns+"/"+name)
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(ns, name)
	}
}

func (f *fakePods) deletes(ns, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleted[ns+"/"+name]
}

func instancePod(name, service string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		Labels: map[string]string{"serving.knative.dev/service": service, "app": name}}}
	p.Spec.Containers = []corev1.Container{{Name: "user-container", Image: "img"}}
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "user-container", Ready: ready,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	return p
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPodsMirror serves a PodSource's instances as Pods: list by label,
// watch, status changes, read-only to writes, delete stopping the
// instance, and the Pod gone with it.
func TestPodsMirror(t *testing.T) {
	api := apiservertest.StartWith(t, apiservertest.Options{User: "alice@example.com"})
	e := startEnvFrom(t, api)
	src := newFakePods()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); api.Server.RunPods(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	pods := e.kube.CoreV1().Pods("default")

	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=hello"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	src.set(instancePod("hello-00001-abcdefgh", "hello", false))
	src.set(instancePod("other-00001-abcdefgh", "other", true))
	var list *corev1.PodList
	poll(t, "the pods listed by label", func() bool {
		list, err = pods.List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=hello"})
		return err == nil && len(list.Items) == 1
	})
	p := list.Items[0]
	if p.Name != "hello-00001-abcdefgh" || p.UID == "" || p.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s uid %q phase %s", p.Name, p.UID, p.Status.Phase)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added || ev.Object.(*corev1.Pod).Name != p.Name {
			t.Errorf("first event %s %T, want ADDED of %s", ev.Type, ev.Object, p.Name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}

	// A status change reaches the Pod and the watch; the UID stays.
	src.set(instancePod("hello-00001-abcdefgh", "hello", true))
	poll(t, "the pod ready", func() bool {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.ContainerStatuses[0].Ready && got.UID == p.UID
	})

	// Read-only but for delete.
	if _, err := pods.Create(ctx, instancePod("mine", "hello", true), metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("create: %v, want 405", err)
	}
	if _, err := pods.Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("patch: %v, want 405", err)
	}
	if _, err := pods.UpdateStatus(ctx, &p, metav1.UpdateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("update status: %v, want 405", err)
	}

	// Delete: the Pod is Terminating, the instance is asked to stop; once
	// it is gone, so is the Pod.
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the instance stopped", func() bool { return src.deletes("default", p.Name) > 0 })
	got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("after delete: %v %v, want Terminating", got, err)
	}
	src.remove("default", p.Name)
	poll(t, "the pod gone", func() bool {
		_, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := pods.Get(ctx, "other-00001-abcdefgh", metav1.GetOptions{}); err != nil {
		t.Errorf("the other pod: %v", err)
	}

	// An instance that stops by itself (a scale-down) shows Terminating;
	// the mirror does not stop it again.
	other := instancePod("other-00001-abcdefgh", "other", true)
	now := metav1.Now()
	other.DeletionTimestamp = &now
	src.set(other)
	poll(t, "the scaled-down pod terminating", func() bool {
		got, err := pods.Get(ctx, other.Name, metav1.GetOptions{})
		return err == nil && got.DeletionTimestamp != nil
	})
	if n := src.deletes("default", other.Name); n != 0 {
		t.Errorf("the mirror stopped a stopping instance %d times", n)
	}
	src.remove("default", other.Name)
	poll(t, "the scaled-down pod gone", func() bool {
		_, err := pods.Get(ctx, other.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

var _ apiserver.PodSource = (*fakePods)(nil)

// TestPodLogs reads pods/log through client-go: the options reach the log
// source checked, a wrong container or option is a 400, a previous run
// that did not end is a 400 as the kubelet says it, and a follow ends
// when the Pod is gone.
func TestPodLogs(t *testing.T) {
	var mu sync.Mutex
	var got apiserver.PodLogOptions
	api := apiservertest.StartWith(t, apiservertest.Options{User: "alice@example.com", Server: func(o *apiserver.Options) {
		o.PodLogs = func(ctx context.Context, w io.Writer, p *corev1.Pod, opts apiserver.PodLogOptions) error {
			mu.Lock()
			got = opts
			mu.Unlock()
			if opts.Previous {
				return apiserver.ErrNoPreviousContainer
			}
			fmt.Fprintf(w, "line of %s/%s\n", p.Name, opts.Container)
			if opts.Follow {
				<-ctx.Done()
			}
			return nil
		}
	}})
	e := startEnvFrom(t, api)
	src := newFakePods()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); api.Server.RunPods(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	pods := e.kube.CoreV1().Pods("default")
	p := instancePod("hello-00001-abcdefgh", "hello", true)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "img"})
	src.set(p)
	poll(t, "the pod", func() bool { _, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); return err == nil })

	tail := int64(5)
	b, err := pods.GetLogs(p.Name, &corev1.PodLogOptions{Container: "user-container", TailLines: &tail, Timestamps: true}).DoRaw(ctx)
	if err != nil || string(b) != "line of hello-00001-abcdefgh/user-container\n" {
		t.Fatalf("logs: %q %v", b, err)
	}
	mu.Lock()
	if got.TailLines == nil || *got.TailLines != 5 || !got.Timestamps || got.Follow {
		t.Errorf("options %+v", got)
	}
	mu.Unlock()
	for _, tc := range []struct {
		query, want string
	}{
		{"", "a container name must be specified"},
		{"container=nope", "container nope is not valid"},
		{"container=side&tailLines=-1", "tailLines"},
		{"container=side&sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z", "at most one of"},
		{"container=side&follow=maybe", "follow"},
		{"container=side&limitBytes=0", "limitBytes"},
		{"container=side&previous=true", `previous terminated container \"side\" in pod`},
	} {
		code, body := e.do("GET", "/api/v1/namespaces/default/pods/"+p.Name+"/log?"+tc.query, "", nil)
		if code != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("%q: %d %s, want 400 with %q", tc.query, code, body, tc.want)
		}
	}
	code, body := e.do("GET", "/api/v1/namespaces/default/pods/nope/log", "", nil)
	if code != 404 {
		t.Errorf("log of no pod: %d %s", code, body)
	}

	// A follow ends once the pod is gone.
	rc, err := pods.GetLogs(p.Name, &corev1.PodLogOptions{Container: "side", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ended := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(rc); ended <- b }()
	src.remove("default", p.Name)
	select {
	case b := <-ended:
		if string(b) != "line of hello-00001-abcdefgh/side\n" {
			t.Errorf("followed %q", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end with the pod")
	}
}

// TestPodSubresourcesAuthorized: pods/log, pods/exec and
// pods/portforward are authorized as their own subresources: reading Pods
// grants none of them, RBAC's edit role grants them, and a WebSocket exec
// (a GET) needs create as well.
func TestPodSubresourcesAuthorized(t *testing.T) {
	e := newAuthEnv(t, func(o *apiserver.Options) {
		o.PodLogs = func(ctx context.Context, w io.Writer, p *corev1.Pod, opts apiserver.PodLogOptions) error {
			_, err := io.WriteString(w, "a line\n")
			return err
		}
		o.Exec = func(ctx context.Context, p *corev1.Pod, c string, cmd []string, in io.Reader, out, errw io.Writer) (int, error) {
			return 0, nil
		}
		o.PortForward = func(ctx context.Context, p *corev1.Pod, port int32) (net.Conn, error) {
			return nil, errors.New("no")
		}
	})
	src := newFakePods()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.api.Server.RunPods(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	p := instancePod("web-00001-abcdefgh", "web", true)
	p.Namespace = "team-a"
	src.set(p)
	poll(t, "the pod", func() bool {
		_, err := e.admin.CoreV1().Pods("team-a").Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil
	})
	for _, r := range []*rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "exec-get"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/exec"}, Verbs: []string{"get"}}}},
	} {
		if _, err := e.admin.RbacV1().Roles("team-a").Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for user, role := range map[string]string{"carol": "pod-reader", "bob": "exec-get"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}}
		if _, err := e.admin.RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	base := "/api/v1/namespaces/team-a/pods/" + p.Name
	exec := base + "/exec?command=ls&stdout=true"
	for _, tc := range []struct {
		token, method, path string
		forbidden           bool
	}{
		{carolToken, "GET", base, false},
		{carolToken, "GET", base + "/log", true},
		{carolToken, "POST", exec, true},
		{carolToken, "POST", base + "/portforward", true},
		{carolToken, "DELETE", base, true},
		{aliceToken, "GET", base + "/log", false},
		{aliceToken, "POST", exec, false},
		{aliceToken, "POST", base + "/portforward", false},
		{bobToken, "GET", exec, true}, // a WebSocket exec needs create too
	} {
		poll(t, "RBAC", func() bool {
			code, _ := e.do(tc.token, tc.method, tc.path, "")
			return (code == 403) == tc.forbidden
		})
	}
	if code, body := e.do(aliceToken, "GET", base+"/log", ""); code != 200 || string(body) != "a line\n" {
		t.Errorf("log as alice: %d %s", code, body)
	}
}

// TestTokenBoundToPod: a TokenRequest may bind a token to a served Pod
// (kubectl create token --bound-object-kind Pod); the token stops working
// once the Pod is gone.
func TestTokenBoundToPod(t *testing.T) {
	e := newAuthEnv(t, nil)
	src := newFakePods()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.api.Server.RunPods(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	p := instancePod("web-00001-abcdefgh", "web", true)
	p.Namespace = "team-a"
	src.set(p)
	var stored *corev1.Pod
	poll(t, "the pod", func() bool {
		var err error
		stored, err = e.admin.CoreV1().Pods("team-a").Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil
	})
	tr, err := e.admin.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: stored.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(tr.Status.Token, "GET", "/apis", ""); code != 200 {
		t.Fatalf("pod-bound token: %d %s", code, body)
	}
	if _, err := e.admin.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "nope"}},
	}, metav1.CreateOptions{}); err == nil {
		t.Error("a token bound to no pod")
	}
	src.remove("team-a", p.Name)
	poll(t, "the token refused once the pod is gone", func() bool {
		code, _ := e.do(tr.Status.Token, "GET", "/apis", "")
		return code == 401
	})
}

func (f *fakePods) ownerGones(ns, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ownerGone[ns+"/"+name]
}

// TestPodsOfDeletedRevision: a Pod deleted by a user while its Revision
// lives stops its instance to be replaced (DeletePod); the Pods the
// garbage collector deletes with their Revision stop theirs with nothing
// in their place (OwnerGone), as a deleted ReplicaSet makes no more pods.
func TestPodsOfDeletedRevision(t *testing.T) {
	api := apiservertest.StartWith(t, apiservertest.Options{User: "alice@example.com"})
	e := startEnvFrom(t, api)
	src := newFakePods()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); api.Server.RunPods(ctx, src) }()
	t.Cleanup(func() { cancel(); <-done })
	pods := e.kube.CoreV1().Pods("default")
	revs := e.serving.ServingV1().Revisions("default")

	owned := func(podName, revName string) *corev1.Pod {
		rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: revName, Namespace: "default"}}
		rev.Spec.Containers = []corev1.Container{{Image: "img"}}
		rev, err := revs.Create(ctx, rev, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := instancePod(podName, "svc", true)
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Revision",
			Name: rev.Name, UID: rev.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		src.set(p)
		poll(t, "pod "+podName+" mirrored", func() bool {
			_, err := pods.Get(ctx, podName, metav1.GetOptions{})
			return err == nil
		})
		return p
	}
	live := owned("live-00001-deployment-aaaaaaaa", "live-00001")
	gone := owned("gone-00001-deployment-bbbbbbbb", "gone-00001")
	fg := owned("fg-00001-deployment-cccccccc", "fg-00001")

	if err := pods.Delete(ctx, live.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the user's delete to stop the instance", func() bool { return src.deletes("default", live.Name) > 0 })
	if n := src.ownerGones("default", live.Name); n != 0 {
		t.Errorf("a Pod deleted by a user while its Revision lives: %d OwnerGone, want DeletePod only", n)
	}

	if err := revs.Delete(ctx, "gone-00001", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the collected Pod's instance to stop", func() bool { return src.ownerGones("default", gone.Name) > 0 })
	// Foreground: the Revision stays (deleting) until its Pods are gone;
	// they are not replaced either.
	fgp := metav1.DeletePropagationForeground
	if err := revs.Delete(ctx, "fg-00001", metav1.DeleteOptions{PropagationPolicy: &fgp}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the foreground-collected Pod's instance to stop", func() bool { return src.ownerGones("default", fg.Name) > 0 })
	// An instance whose Revision is gone by the time its Pod is stored:
	// the Pod is collected (a pass is queued for it).
	late := instancePod("gone-00001-deployment-dddddddd", "svc", true)
	late.OwnerReferences = gone.OwnerReferences
	src.set(late)
	poll(t, "the late Pod of a deleted Revision collected", func() bool { return src.ownerGones("default", late.Name) > 0 })
	for _, p := range []*corev1.Pod{gone, fg, late} {
		if n := src.deletes("default", p.Name); n != 0 {
			t.Errorf("pod %s of a deleted Revision: %d DeletePod (replaced), want OwnerGone only", p.Name, n)
		}
		src.remove("default", p.Name)
	}
	poll(t, "the Pods gone", func() bool {
		_, e1 := pods.Get(ctx, gone.Name, metav1.GetOptions{})
		_, e2 := pods.Get(ctx, fg.Name, metav1.GetOptions{})
		_, e3 := pods.Get(ctx, late.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3)
	})
	poll(t, "the foreground-deleted Revision gone", func() bool {
		_, err := revs.Get(ctx, "fg-00001", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
