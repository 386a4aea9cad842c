package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/ptr"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/runtime"
)

const runtimeInfoPkg = "../../test/images/runtime-info"

// handlerNames are the handlers the shared tests run against.
var handlerNames = []string{"process", "runc", "runsc"}

// requireHandler skips the test unless root and the handler's binary are
// there; in CI (CI set) it fails instead.
func requireHandler(t testing.TB, name string) {
	t.Helper()
	imagetest.Require(t, os.Geteuid() == 0, "instances need root (overlay mounts, network namespaces)")
	if name != "process" {
		_, err := exec.LookPath(name)
		imagetest.Require(t, err == nil, name+" is not installed (apt-get install "+name+")")
	}
}

// newHandler opens handler name with its state under dir.
func newHandler(t testing.TB, name, dir string) runtime.Handler {
	t.Helper()
	var (
		h   runtime.Handler
		err error
	)
	switch name {
	case "process":
		h = runtime.NewProcess(filepath.Join(dir, "process"))
	case "runc":
		h, err = runtime.NewOCI(runtime.OCIConfig{Binary: "runc", Root: filepath.Join(dir, "runc")})
	case "runsc":
		// See package runtime for why runsc runs with host networking (in
		// the instance's namespace).
		h, err = runtime.NewOCI(runtime.OCIConfig{Binary: "runsc", Root: filepath.Join(dir, "runsc"), Args: []string{"--network=host", "--host-uds=open", "--oci-seccomp"},
			ManageCgroups: true})
	default:
		t.Fatalf("unknown handler %q", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// fakeLookup serves Secrets and ConfigMaps from maps.
type fakeLookup struct {
	mu      sync.Mutex
	secrets map[string]*corev1.Secret
	cms     map[string]*corev1.ConfigMap
}

func (f *fakeLookup) Secret(ns, name string) (*corev1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.secrets[ns+"/"+name]; s != nil {
		return s, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func (f *fakeLookup) ConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.cms[ns+"/"+name]; c != nil {
		return c, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

// images caches one registry and the runtime-info image per test binary.
var images struct {
	once sync.Once
	host string
	ref  string
	stop func()
}

// runtimeInfoImage returns the digest reference of the runtime-info image
// in a registry that lives as long as the test binary.
func runtimeInfoImage(t testing.TB) string {
	t.Helper()
	images.once.Do(func() {
		// The registry outlives single tests: it is registered on a
		// helper T whose cleanups never run before the process ends.
		images.host = imagetest.StartRegistry(keepAlive{t})
		images.ref = imagetest.PushGoImage(t, images.host, "runtime-info:test", runtimeInfoPkg, image.Config{ExposedPorts: []string{"8080/tcp"}})
	})
	if images.ref == "" {
		t.Fatal("no runtime-info image (an earlier test failed to build it)")
	}
	return images.ref
}

// keepAlive is a testing.TB whose Cleanup registrations are dropped, for
// fixtures shared by all tests of the binary.
type keepAlive struct{ testing.TB }

func (keepAlive) Cleanup(func()) {}

// env is one Manager with its handlers, image store and lookup.
type env struct {
	t        testing.TB
	m        *Manager
	dir      string
	handlers map[string]runtime.Handler
	lookup   *fakeLookup

	mu      sync.Mutex
	changes map[string]int
}

type envOption func(*Options)

func newEnv(t testing.TB, handlers []string, opts ...envOption) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := image.Open(image.Options{Root: filepath.Join(dir, "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, handlers: map[string]runtime.Handler{}, lookup: &fakeLookup{secrets: map[string]*corev1.Secret{}, cms: map[string]*corev1.ConfigMap{}}, changes: map[string]int{}}
	for _, h := range handlers {
		e.handlers[h] = newHandler(t, h, filepath.Join(dir, "handlers"))
	}
	o := Options{
		Images:   store,
		Handlers: e.handlers,
		Lookup:   e.lookup,
		StateDir: filepath.Join(dir, "state"),
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range opts {
		f(&o)
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
	e.m = m
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go e.drainAll(ctx) // as the router would: nothing is in flight
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// testWriter routes logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newRevision builds a revision of the runtime-info image as the API server
// would store it (Knative's defaults applied).
func newRev(t testing.TB, ns, name, handler, ref string, mutate ...func(*servingv1.Revision)) *servingv1.Revision {
	t.Helper()
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      name,
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
	for _, f := range mutate {
		f(rev)
	}
	rev.SetDefaults(context.Background())
	return rev
}

// resolveAndEnsure does what the Revision reconciler does for a new
// revision: Resolve once, record the digest, then Ensure.
func (e *env) resolveAndEnsure(rev *servingv1.Revision) controller.RevisionState {
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
		digest, err := m.Resolve(context.Background(), rev, c.Image)
		if err != nil {
			t.Fatalf("resolve %s: %v", c.Image, err)
		}
		sts = append(sts, servingv1.ContainerStatus{Name: c.Name, ImageDigest: digest})
	}
	return sts
}

// waitState ensures rev until cond holds, as the reconciler does on every
// notification, and returns the state.
func (e *env) waitState(rev *servingv1.Revision, timeout time.Duration, what string, cond func(controller.RevisionState) bool) controller.RevisionState {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var st controller.RevisionState
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

func ready(st controller.RevisionState) bool { return st.Ready && st.Actual > 0 }

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
func client(ep router.Endpoint) *http.Client {
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
	Env         map[string]string `json:"env"`
	UID         int               `json:"uid"`
	Hostname    string            `json:"hostname"`
	StdinEOF    bool              `json:"stdinEOF"`
	StdinDetail string            `json:"stdinDetail"`
	Started     time.Time         `json:"started"`
	Files       []struct {
		Path     string `json:"path"`
		Exists   bool   `json:"exists"`
		Type     string `json:"type"`
		Perm     string `json:"perm"`
		Writable bool   `json:"writable"`
	} `json:"files"`
	Cgroup struct {
		MemoryLimit *int64 `json:"memoryLimit"`
		CPUQuota    *int64 `json:"cpuQuota"`
		CPUPeriod   int64  `json:"cpuPeriod"`
	} `json:"cgroup"`
}

func (i *info) file(p string) (exists, writable bool, typ string) {
	for _, f := range i.Files {
		if f.Path == p {
			return f.Exists, f.Writable, f.Type
		}
	}
	return false, false, ""
}

func get(t testing.TB, ep router.Endpoint, path string) []byte {
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

func getInfo(t testing.TB, ep router.Endpoint) *info {
	t.Helper()
	var i info
	if err := json.Unmarshal(get(t, ep, "/"), &i); err != nil {
		t.Fatal(err)
	}
	return &i
}

// leftovers counts what instances of revisions named with prefix leave on
// the host: mounts under the state dir, network namespaces and runtime
// containers.
func (e *env) leftovers(prefix string) (mounts, namespaces, containers int) {
	e.t.Helper()
	mps, err := mountsUnder(filepath.Join(e.dir, "state"))
	if err != nil {
		e.t.Fatal(err)
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
			if strings.HasPrefix(instanceOf(c.ID()), prefix) { // sidecars too
				containers++
			}
		}
	}
	return len(mps), namespaces, containers
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
		e.m.mu.Lock()
		revs := make([]*revision, 0, len(e.m.revs))
		for _, r := range e.m.revs {
			revs = append(revs, r)
		}
		e.m.mu.Unlock()
		for _, r := range revs {
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
