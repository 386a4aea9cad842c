package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/routing"
)

// fakeRuntime stands in for the runtime (issue 4): images whose name
// contains "missing" cannot be resolved; "crash" makes a revision fail;
// everything else becomes ready with one instance.
type fakeRuntime struct {
	mu       sync.Mutex
	subs     []func(string, string)
	removed  map[string]bool
	ensured  map[string]int
	resolves map[string]int
	// appear is closed when the "late" images are pushed: until then the
	// first resolution of one fails and the later ones wait.
	appear chan struct{}
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{removed: map[string]bool{}, ensured: map[string]int{}, resolves: map[string]int{}, appear: make(chan struct{})}
}

// Resolve: "missing" images never resolve; "flaky" ones fail their first
// two resolutions; "slow" ones answer only when ctx ends; "late" ones fail
// their first resolution, and the later ones wait (at most 30s, whatever
// ctx says) until appear is closed, then succeed.
func (f *fakeRuntime) Resolve(ctx context.Context, _ *servingv1.Revision, img string) (string, error) {
	f.mu.Lock()
	f.resolves[img]++
	n := f.resolves[img]
	f.mu.Unlock()
	switch {
	case strings.Contains(img, "missing"):
		return "", errors.New("MANIFEST_UNKNOWN: manifest unknown")
	case strings.Contains(img, "flaky") && n <= 2:
		return "", errors.New("registry unavailable: connection refused")
	case strings.Contains(img, "late") && n == 1:
		return "", errors.New("MANIFEST_UNKNOWN: manifest unknown")
	case strings.Contains(img, "late"):
		select {
		case <-f.appear:
		case <-time.After(30 * time.Second):
			return "", errors.New("test: the image never appeared")
		}
	case strings.Contains(img, "slow"):
		<-ctx.Done()
		return "", ctx.Err()
	}
	repo := strings.SplitN(img, ":", 2)[0]
	return repo + "@sha256:" + strings.Repeat("ab", 32), nil
}

func (f *fakeRuntime) Ensure(_ context.Context, rev *servingv1.Revision) (controller.RevisionState, error) {
	f.mu.Lock()
	f.ensured[rev.Namespace+"/"+rev.Name]++
	f.mu.Unlock()
	if strings.Contains(rev.Spec.Containers[0].Image, "crash") {
		return controller.RevisionState{Failed: true, Reason: "ExitCode1", Message: "Container failed with: boom"}, nil
	}
	if strings.Contains(rev.Spec.Containers[0].Image, "held") {
		return controller.RevisionState{Ready: true, Actual: 1, HeldReason: "ExceededQuota",
			HeldMessage: "scale to 3 held: exceeded quota: compute, requested: limits.memory=48Mi, used: limits.memory=96Mi, limited: limits.memory=128Mi"}, nil
	}
	return controller.RevisionState{Ready: true, Actual: 1}, nil
}

// Remove records the removal. It must not block, as the runtime's does
// not: revisions named "draining..." (TestDrainingRevisionsHoldNoWorker)
// stand for instances that take minutes to stop, which the runtime stops
// in the background.
func (f *fakeRuntime) Remove(ns, name string) error {
	f.mu.Lock()
	f.removed[ns+"/"+name] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeRuntime) Retain([]string) {}

func (f *fakeRuntime) Subscribe(fn func(string, string)) {
	f.mu.Lock()
	f.subs = append(f.subs, fn)
	f.mu.Unlock()
}

// fakeScaler stands in for the autoscaler: every revision it knows wants
// one instance and is active; it records reachability.
type fakeScaler struct {
	mu        sync.Mutex
	reachable map[string]bool
	subs      []func(string, string)
}

func newFakeScaler() *fakeScaler { return &fakeScaler{reachable: map[string]bool{}} }

func (f *fakeScaler) Upsert(rev *servingv1.Revision, reachable bool) {
	f.mu.Lock()
	f.reachable[rev.Namespace+"/"+rev.Name] = reachable
	f.mu.Unlock()
}

func (f *fakeScaler) Delete(ns, name string) {
	f.mu.Lock()
	delete(f.reachable, ns+"/"+name)
	f.mu.Unlock()
}

func (f *fakeScaler) Scale(ns, name string) (int32, bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.reachable[ns+"/"+name]
	return 1, true, ok
}

func (f *fakeScaler) Subscribe(fn func(string, string)) {
	f.mu.Lock()
	f.subs = append(f.subs, fn)
	f.mu.Unlock()
}

// isReachable reports what the reconciler last told the scaler.
func (f *fakeScaler) isReachable(ns, name string) (reachable, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reachable, known = f.reachable[ns+"/"+name]
	return reachable, known
}

type env struct {
	t       *testing.T
	api     *apiservertest.Env
	client  *servingclient.Clientset
	dyn     *dynamic.DynamicClient
	rt      *fakeRuntime
	scaler  *fakeScaler
	routes  *routing.Table
	cfg     *config.Config
	stopCtl func()
	// claims, when set, makes the controller reconcile DomainMappings.
	claims netclient.Interface
	// resync is the controller's resync period (0: a second).
	resync time.Duration
	// clusterDomain is Options.ClusterDomain.
	clusterDomain string
}

func newEnv(t *testing.T, gc map[string]string) *env {
	t.Helper()
	e := prepareEnv(t, gc)
	e.startController()
	return e
}

// prepareEnv is newEnv without starting the controller, so that the test
// can set the env's options first.
func prepareEnv(t *testing.T, gc map[string]string) *env {
	t.Helper()
	api := apiservertest.Start(t, "")
	cl, err := servingclient.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if gc != nil {
		cfg.ConfigMaps = map[string]map[string]string{"config-gc": gc}
	}
	return &env{t: t, api: api, client: cl, dyn: dyn, rt: newFakeRuntime(), scaler: newFakeScaler(), routes: routing.NewTable(), cfg: cfg}
}

func (e *env) startController() {
	t := e.t
	net, err := e.cfg.Network()
	if err != nil {
		t.Fatal(err)
	}
	dom, err := e.cfg.Domain()
	if err != nil {
		t.Fatal(err)
	}
	gc, err := e.cfg.GC()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(e.api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	resync := e.resync
	if resync == 0 {
		resync = time.Second
	}
	c, err := controller.New(controller.Options{
		Client: e.client, Claims: e.claims, ClusterDomain: e.clusterDomain, Runtime: e.rt, Scaler: e.scaler, Routes: e.routes, Network: net, Domain: dom, GC: gc, HTTPPort: 8080,
		APIURL: "https://api.example", DigestResolutionTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Resync: resync,
		Recorder: controller.Recorders(events),
		Builds:   e.dyn,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, 2); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	var once sync.Once
	e.stopCtl = func() { cancel(); <-done; once.Do(events.Shutdown) }
	t.Cleanup(func() { e.stopCtl() })
}

// eventually polls cond until it returns nil or the deadline passes, and
// reports the last reason.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = cond(); last == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %v", what, last)
}

var _ = fmt.Sprint

func newTableForRestart() *routing.Table { return routing.NewTable() }
