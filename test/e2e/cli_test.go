package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKnboxCLI drives knbox's own client commands against knbox serve, as
// the README shows them.
func TestKnboxCLI(t *testing.T) {
	dir := t.TempDir()
	startServer(t, dir, "")
	env := []string{"KNBOX_DATA_DIR=" + dir, "KUBECONFIG="}
	knbox := func(stdin string, args ...string) (string, error) {
		t.Helper()
		return run(t, env, stdin, knboxBin, args...)
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, err := knbox(stdin, args...)
		if err != nil {
			t.Fatalf("knbox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	kc := must("", "kubeconfig")
	if !strings.Contains(kc, "certificate-authority-data") || !strings.Contains(kc, "token:") {
		t.Errorf("kubeconfig:\n%s", kc)
	}
	if out := must("", "version"); !strings.Contains(out, "server") {
		t.Errorf("version: %s", out)
	}

	// Apply a directory with the example and a second document.
	manifests := t.TempDir()
	ex, err := os.ReadFile("../../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example names a public image; tests reach only loopback, so the
	// image points at a closed loopback port instead.
	ex = []byte(strings.Replace(string(ex), "ghcr.io/knative/helloworld-go:latest", "127.0.0.1:1/helloworld-go:latest", 1))
	if !strings.Contains(string(ex), "127.0.0.1:1/") {
		t.Fatal("examples/hello.yaml no longer names the image this test replaces")
	}
	if err := os.WriteFile(filepath.Join(manifests, "hello.yaml"), ex, 0o644); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n"
	if err := os.WriteFile(filepath.Join(manifests, "settings.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	out := must("", "apply", "-f", manifests)
	if !strings.Contains(out, "service.serving.knative.dev/hello created") || !strings.Contains(out, "configmap/settings created") {
		t.Errorf("apply: %s", out)
	}
	out = must("", "apply", "-f", manifests)
	if !strings.Contains(out, "unchanged") {
		t.Errorf("re-apply: %s", out)
	}
	out = must("", "get", "ksvc")
	if !strings.Contains(out, "LATESTCREATED") || !strings.Contains(out, "hello") {
		t.Errorf("get ksvc: %s", out)
	}
	if out := must("", "get", "ksvc", "hello", "-o", "yaml"); !strings.Contains(out, "kind: Service") {
		t.Errorf("get -o yaml: %s", out)
	}
	out, err = knbox("", "get", "ksvcs")
	if err == nil || !strings.Contains(out, `did you mean "ksvc"`) {
		t.Errorf("unknown kind: %v %s", err, out)
	}
	// A bad document is named with its field; the good one still lands.
	bad := "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  template:\n    spec:\n      containers:\n      - image: \"\"\n---\n" + strings.Replace(cm, "settings", "other", 1)
	out, err = knbox(bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.template.spec.containers[0].image") || !strings.Contains(out, "configmap/other created") {
		t.Errorf("apply with a bad document: %v\n%s", err, out)
	}
	out = must("", "delete", "ksvc", "hello")
	if !strings.Contains(out, `service.serving.knative.dev "hello" deleted`) {
		t.Errorf("delete: %s", out)
	}
}
