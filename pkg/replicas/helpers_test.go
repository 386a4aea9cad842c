package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/ptr"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/kubeclient"
	"github.com/knbox/knbox/pkg/kubeclient/kubeclienttest"
	"github.com/knbox/knbox/pkg/logs"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/pod/podtest"
	"github.com/knbox/knbox/pkg/runtime"
)

// The fixtures shared with the other pod tests (see package podtest).
var (
	requireHandler   = podtest.RequireHandler
	newHandler       = podtest.NewHandler
	runtimeInfoImage = podtest.RuntimeInfoImage
	busyboxImage     = podtest.BusyboxImage
)

// fakeScale stands in for the autoscaler: a desired scale per revision,
// set by the test.
type fakeScale struct {
	mu      sync.Mutex
	desired map[key]int32
	subs    []func(namespace, name string)
}

func (f *fakeScale) Desired(ns, name string) (int32, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.desired[key{ns, name}]
	return d, ok
}

func (f *fakeScale) Subscribe(fn func(ns, name string)) {
	f.mu.Lock()
	f.subs = append(f.subs, fn)
	f.mu.Unlock()
}

func (f *fakeScale) set(ns, name string, n int32) {
	f.mu.Lock()
	f.desired[key{ns, name}] = n
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(ns, name)
	}
}

// env is one Manager with a real pod runtime, an image store, a log store
// and informers over a fake clientset.
type env struct {
	t        testing.TB
	m        *Manager
	pods     *pod.Runtime
	logs     *logs.Store
	dir      string
	handlers map[string]runtime.Handler
	kube     *fake.Clientset
	scale    *fakeScale

	mu      sync.Mutex
	changes map[string]int
}

// envOption changes the Manager's options or the pod runtime's.
type envOption struct {
	m func(*Options)
	p func(*pod.Options)
}

func withOptions(f func(*Options)) envOption        { return envOption{m: f} }
func withPodOptions(f func(*pod.Options)) envOption { return envOption{p: f} }

func newEnv(t testing.TB, handlers []string, opts ...envOption) *env {
	t.Helper()
	kube := fake.NewSimpleClientset()
	for _, h := range append(handlers, "kata") {
		handler := h
		if h == "kata" {
			handler = "kata-qemu"
		}
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: h}, Handler: handler}
		if _, err := kube.NodeV1().RuntimeClasses().Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return newEnvWith(t, kube, handlers, opts...)
}

// newEnvWith is newEnv over a given clientset, whose informers may not
// have synced when it returns.
func newEnvWith(t testing.TB, kube *fake.Clientset, handlers []string, opts ...envOption) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := image.Open(image.Options{Root: filepath.Join(dir, "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := logs.NewStore(filepath.Join(dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, handlers: map[string]runtime.Handler{}, kube: kube, logs: ls,
		scale: &fakeScale{desired: map[key]int32{}}, changes: map[string]int{}}
	for _, h := range handlers {
		e.handlers[h] = newHandler(t, h, filepath.Join(dir, "handlers"))
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if len(e.handlers) == 0 {
		e.handlers["process"] = runtime.NewProcess(filepath.Join(dir, "handlers", "process"))
	}
	po := pod.Options{Images: store, Handlers: e.handlers, StateDir: filepath.Join(dir, "pods"), Logger: log}
	for _, f := range opts {
		if f.p != nil {
			f.p(&po)
		}
	}
	pods, err := pod.New(po)
	if err != nil {
		t.Fatal(err)
	}
	inf := kubeclient.NewInformers(kubeclienttest.Typed(kube), kubeclient.InformerOptions{})
	o := Options{Pods: pods, Images: store, Logs: ls, Scale: e.scale, Informers: inf, Logger: log}
	for _, f := range opts {
		if f.m != nil {
			f.m(&o)
		}
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	m.Subscribe(func(ns, name string) {
		e.mu.Lock()
		e.changes[ns+"/"+name]++
		e.mu.Unlock()
	})
	e.m, e.pods = m, pods
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go e.drainAll(ctx) // as the router would: nothing is in flight
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := pods.Close(ctx); err != nil {
			t.Errorf("close pods: %v", err)
		}
		close(stop)
		inf.Shutdown()
	})
	return e
}

// synced waits for the informers' first list.
func (e *env) synced() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), e.m.synced...) {
		e.t.Fatal("informers did not sync")
	}
}

// setSecret creates or updates a Secret through the API (the informers
// see it).
func (e *env) setSecret(ns, name string, data map[string]string) {
	e.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	ctx := context.Background()
	_, err := e.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = e.kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) setConfigMap(ns, name string, data map[string]string) {
	e.t.Helper()
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	ctx := context.Background()
	_, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = e.kube.CoreV1().ConfigMaps(ns).Update(ctx, c, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// testWriter routes logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newRev builds a revision of the runtime-info image as the API server
// would store it (Knative's defaults applied).
func newRev(t testing.TB, ns, name, handler, ref string, mutate ...func(*servingv1.Revision)) *servingv1.Revision {
	t.Helper()
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      name,
			UID:       types.UID("uid-" + name),
			Labels: map[string]string{
				serving.ServiceLabelKey:       "svc-" + name,
				serving.ConfigurationLabelKey: "cfg-" + name,
			},
		},
		Spec: servingv1.RevisionSpec{
			PodSpec: corev1.PodSpec{
				Containers: []corev1.Container{{Image: ref}},
			},
			TimeoutSeconds: ptr.Int64(5),
		},
	}
	if handler != "" {
		rev.Spec.RuntimeClassName = ptr.String(handler)
	}
	if handler == "process" {
		// The process handler refuses root (TestProcessRefusesRoot).
		rev.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.Int64(65534)}
	}
	for _, f := range mutate {
		f(rev)
	}
	rev.SetDefaults(context.Background())
	return rev
}

// resolveAndEnsure does what the Revision reconciler does for a new
// revision: Resolve once, record the digest, then Ensure.
func (e *env) resolveAndEnsure(rev *servingv1.Revision) State {
	e.t.Helper()
	ctx := context.Background()
	rev.Status.ContainerStatuses = resolveAll(e.t, e.m, rev)
	st, err := e.m.Ensure(ctx, rev)
	if err != nil {
		e.t.Fatalf("ensure: %v", err)
	}
	return st
}

// resolveAll resolves every container's image of rev, as the Revision
// reconciler does: one status per container, in their order.
func resolveAll(t testing.TB, m *Manager, rev *servingv1.Revision) []servingv1.ContainerStatus {
	t.Helper()
	var sts []servingv1.ContainerStatus
	for _, c := range rev.Spec.Containers {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		digest, err := m.Resolve(ctx, rev, c.Image)
		cancel()
		if err != nil {
			t.Fatalf("resolve %s: %v", c.Image, err)
		}
		sts = append(sts, servingv1.ContainerStatus{Name: c.Name, ImageDigest: digest})
	}
	return sts
}

// waitState ensures rev until cond holds, as the reconciler does on every
// notification, and returns the state.
func (e *env) waitState(rev *servingv1.Revision, timeout time.Duration, what string, cond func(State) bool) State {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var st State
	for {
		var err error
		st, err = e.m.Ensure(context.Background(), rev)
		if err != nil {
			e.t.Fatalf("ensure: %v", err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v; state %+v", what, timeout, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ready(st State) bool  { return st.Ready && st.Actual > 0 }
func failed(st State) bool { return st.Failed }

// eventually waits for cond, failing the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// client talks HTTP to an endpoint through its Dial.
func client(ep Endpoint) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return ep.Dial(ctx) },
			DisableKeepAlives: true,
		},
	}
}

// info is the part of runtime-info's answer the tests read.
type info struct {
	Env      map[string]string `json:"env"`
	Hostname string            `json:"hostname"`
	Started  time.Time         `json:"started"`
	Files    []struct {
		Path     string `json:"path"`
		Exists   bool   `json:"exists"`
		Type     string `json:"type"`
		Writable bool   `json:"writable"`
	} `json:"files"`
}

func (i *info) file(p string) (exists, writable bool, typ string) {
	for _, f := range i.Files {
		if f.Path == p {
			return f.Exists, f.Writable, f.Type
		}
	}
	return false, false, ""
}

func get(t testing.TB, ep Endpoint, path string) []byte {
	t.Helper()
	resp, err := client(ep).Get("http://instance" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b
}

func getInfo(t testing.TB, ep Endpoint) *info {
	t.Helper()
	var i info
	if err := json.Unmarshal(get(t, ep, "/"), &i); err != nil {
		t.Fatal(err)
	}
	return &i
}

// logs is what the revision's log holds.
func (e *env) logsOf(ns, name string) string {
	e.t.Helper()
	var b bytes.Buffer
	if err := e.logs.Copy(context.Background(), ns, name, logs.CopyOptions{}, &b); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

func (e *env) instances(ns, name string) int {
	r := e.m.revision(ns, name)
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.instances)
}

func (e *env) notifications(ns, name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changes[ns+"/"+name]
}

func endpointIDs(eps []Endpoint) []string {
	var ids []string
	for _, ep := range eps {
		ids = append(ids, ep.ID)
	}
	return ids
}

// leftovers counts what instances of revisions named with prefix leave on
// the host: mounts under the pods' directory, network namespaces and
// runtime containers.
func (e *env) leftovers(prefix string) (mounts, namespaces, containers int) {
	e.t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(e.dir, "pods", prefix)) {
			mounts++
		}
	}
	nss, err := network.List(network.DefaultRoot)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ns := range nss {
		if strings.HasPrefix(ns.Name, prefix) {
			namespaces++
		}
	}
	for _, h := range e.handlers {
		cs, err := h.Recover(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, c := range cs {
			id := c.ID()
			if _, after, ok := strings.Cut(id, "_"); ok {
				id = after // a sidecar
			}
			if strings.HasPrefix(id, prefix) {
				containers++
			}
		}
	}
	return mounts, namespaces, containers
}

// uniqueName returns a revision name no other test (or earlier run) uses,
// so that host-wide counts can be filtered by it.
func uniqueName(base string) string {
	return fmt.Sprintf("%s-%x", base, time.Now().UnixNano()&0xffffff)
}

// routerDrains does what the router does for an endpoint that leaves
// Endpoints with nothing in flight: it calls Drained.
func (e *env) routerDrains(ctx context.Context, ns, rev, id string) {
	for ctx.Err() == nil {
		found := false
		for _, ep := range e.m.Endpoints(ns, rev) {
			found = found || ep.ID == id
		}
		if !found {
			e.m.Drained(ns, rev, id)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drainAll calls Drained for every stopping instance until ctx ends.
func (e *env) drainAll(ctx context.Context) {
	for ctx.Err() == nil {
		for _, r := range e.m.revisions() {
			r.mu.Lock()
			var ids []string
			for id, in := range r.instances {
				if in.stopping {
					ids = append(ids, id)
				}
			}
			r.mu.Unlock()
			for _, id := range ids {
				e.m.Drained(r.key.namespace, r.key.name, id)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// activate does what a request for a revision at zero does: the router
// pokes the Manager and the autoscaler, which asks for one instance.
func (e *env) activate(ns, name string) {
	if d, _ := e.scale.Desired(ns, name); d < 1 {
		e.scale.set(ns, name, 1)
	}
	e.m.Poke(ns, name)
}

func ptrBool(b bool) *bool { return &b }
