package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

var ksvcGVK = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}

// TestFluxServerSideApply drives knbox with Flux's apply engine
// (github.com/fluxcd/pkg/ssa, what kustomize-controller runs): a set of
// Knative Services and a ConfigMap is applied in stages and waited for
// with kstatus; applying it again changes nothing; another field manager
// changing a field Flux owns gets a conflict naming Flux, takes the field
// with force, and Flux's next apply takes it back (drift correction).
func TestFluxServerSideApply(t *testing.T) {
	requireTool(t, "runc")
	dir := t.TempDir()
	startServerWith(t, dir, "")
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	// controller-runtime prints a stack trace when its logger was never set.
	ctrllog.SetLogger(logr.Discard())
	kc, err := client.New(cfg, client.Options{HTTPClient: hc, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	const flux = "kustomize-controller"
	rm := ssa.NewResourceManager(kc, polling.NewStatusPoller(kc, mapper, polling.Options{}), ssa.Owner{Field: flux, Group: "kustomize.toolkit.fluxcd.io"})

	var manifests strings.Builder
	names := []string{"alpha", "beta", "gamma"}
	for _, n := range names {
		fmt.Fprintf(&manifests, `---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: %s
  namespace: default
  labels:
    app.kubernetes.io/part-of: shop
spec:
  template:
    spec:
      containers:
      - image: %s/runtime-info:v1
        env:
        - name: TARGET
          value: flux
`, n, reg)
	}
	manifests.WriteString(`---
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-settings
  namespace: default
data:
  currency: EUR
`)
	read := func() []*unstructured.Unstructured {
		objs, err := ssautil.ReadObjects(strings.NewReader(manifests.String()))
		if err != nil {
			t.Fatal(err)
		}
		rm.SetOwnerLabels(objs, "shop", "flux-system")
		return objs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	waitOpts := ssa.WaitOptions{Interval: 500 * time.Millisecond, Timeout: 3 * time.Minute}

	apply := func(want map[string]ssa.Action) {
		t.Helper()
		cs, err := rm.ApplyAllStaged(ctx, read(), ssa.DefaultApplyOptions())
		if err != nil {
			t.Fatalf("flux apply: %v", err)
		}
		for _, e := range cs.Entries {
			if a, ok := want[e.ObjMetadata.Name]; ok && e.Action != a {
				t.Errorf("flux apply: %s %s, want %s", e.Subject, e.Action, a)
			}
		}
		if err := rm.WaitForSet(cs.ToObjMetadataSet(), waitOpts); err != nil {
			t.Fatalf("flux wait: %v", err)
		}
		// kstatus takes an object without conditions yet for current:
		// check Ready ourselves as well.
		for _, n := range names {
			awaitReady(ctx, t, kc, n)
		}
	}
	all := func(a ssa.Action) map[string]ssa.Action {
		m := map[string]ssa.Action{"shop-settings": a}
		for _, n := range names {
			m[n] = a
		}
		return m
	}

	apply(all(ssa.CreatedAction))
	for _, n := range names {
		u := getKsvc(ctx, t, kc, n)
		if !managedBy(u, flux, "Apply") {
			t.Errorf("%s: no Apply managedFields entry for %s: %v", n, flux, u.GetManagedFields())
		}
	}
	// Flux's second apply (a dry run first, then nothing) changes nothing.
	apply(all(ssa.UnchangedAction))

	// Another manager takes TARGET of alpha: a conflict naming Flux...
	other := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ksvcGVK)
		u.SetNamespace("default")
		u.SetName("alpha")
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
			"image": reg + "/runtime-info:v1",
			"env":   []any{map[string]any{"name": "TARGET", "value": "hotfix"}},
		}}, "spec", "template", "spec", "containers")
		return u
	}
	err = kc.Patch(ctx, other(), client.Apply, client.FieldOwner("hotfixer"))
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), flux) {
		t.Fatalf("apply by another manager: %v, want a conflict naming %s", err, flux)
	}
	// ...which it overrides with force...
	if err := kc.Patch(ctx, other(), client.Apply, client.FieldOwner("hotfixer"), client.ForceOwnership); err != nil {
		t.Fatalf("forced apply: %v", err)
	}
	if v := target(getKsvc(ctx, t, kc, "alpha")); v != "hotfix" {
		t.Fatalf("TARGET after the forced apply: %q", v)
	}
	// ...and Flux's next apply takes back (drift correction).
	apply(map[string]ssa.Action{"alpha": ssa.ConfiguredAction, "beta": ssa.UnchangedAction, "shop-settings": ssa.UnchangedAction})
	u := getKsvc(ctx, t, kc, "alpha")
	if v := target(u); v != "flux" {
		t.Errorf("TARGET after Flux's apply: %q, want flux", v)
	}
	if got := u.GetGeneration(); got != 3 {
		t.Errorf("alpha at generation %d, want 3 (created, hotfix, corrected)", got)
	}
}

func getKsvc(ctx context.Context, t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ksvcGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, u); err != nil {
		t.Fatalf("get ksvc %s: %v", name, err)
	}
	return u
}

// awaitReady waits until ksvc name is Ready for its latest generation.
func awaitReady(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		u := getKsvc(ctx, t, c, name)
		og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" && og == u.GetGeneration() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ksvc %s not ready: %v", name, u.Object["status"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// managedBy says whether u has a managedFields entry of manager with op.
func managedBy(u *unstructured.Unstructured, manager, op string) bool {
	for _, m := range u.GetManagedFields() {
		if m.Manager == manager && string(m.Operation) == op {
			return true
		}
	}
	return false
}

// target is the TARGET env value of u's first container.
func target(u *unstructured.Unstructured) string {
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		return ""
	}
	env, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "env")
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == "TARGET" {
			v, _ := m["value"].(string)
			return v
		}
	}
	return ""
}
