package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestKnboxCLI drives knbox's own client commands against knbox serve, as
// the README shows them: apply -f examples/, wait, get in kubectl's output
// formats, describe, the three-way merge of apply, delete; the connection
// flags; and the errors a user makes.
func TestKnboxCLI(t *testing.T) {
	requireTool(t, "runc")
	dir := t.TempDir()
	startServer(t, dir, "")
	reg := imagetest.StartRegistry(t)
	// Not root, as examples/hello.yaml says (runAsNonRoot), whose image
	// this one stands in for.
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{User: "65532"})
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
	if out := must("", "version"); !strings.Contains(out, "server: ") || strings.Contains(out, "unreachable") {
		t.Errorf("version: %s", out)
	}

	// apply -f of a directory like examples/: the example (its public image
	// swapped for the test registry's: tests reach only loopback), a
	// ConfigMap, and knbox's configuration file, which is skipped.
	manifests := t.TempDir()
	ex, err := os.ReadFile("../../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hello := strings.Replace(string(ex), "knbox.local/samples/helloworld-go:latest", reg+"/runtime-info:v1", 1)
	if !strings.Contains(hello, reg) || !strings.Contains(hello, "name: TARGET") {
		t.Fatal("examples/hello.yaml no longer names the image and env this test replaces")
	}
	config, err := os.ReadFile("../../docs/knbox.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n"
	for name, content := range map[string]string{"hello.yaml": hello, "knbox.yaml": string(config), "settings.yaml": cm} {
		if err := os.WriteFile(filepath.Join(manifests, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := must("", "apply", "-f", manifests)
	for _, want := range []string{"service.serving.knative.dev/hello created", "configmap/settings created",
		filepath.Join(manifests, "knbox.yaml") + ": document 1 (line 1): skipped: not a Kubernetes object (no apiVersion and kind)"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply -f dir: no %q in\n%s", want, out)
		}
	}
	if out := must("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s"); out != "service.serving.knative.dev/hello condition met\n" {
		t.Errorf("wait: %s", out)
	}
	if out := must("", "apply", "-f", manifests); !strings.Contains(out, "service.serving.knative.dev/hello unchanged") {
		t.Errorf("re-apply: %s", out)
	}

	// get in kubectl's output formats, by short names.
	rev := must("", "get", "ksvc", "hello", "-o", "jsonpath={.status.latestReadyRevisionName}")
	url := must("", "get", "ksvc", "hello", "-o", "jsonpath={.status.url}")
	if rev != "hello-00001" || !strings.HasPrefix(url, "http://hello.default.localhost:") {
		t.Fatalf("latest ready revision %q, URL %q", rev, url)
	}
	for _, tt := range []struct {
		args []string
		want string // a line of the output, by its fields; or the exact output for one-liners
	}{
		{[]string{"get", "ksvc"}, "NAME URL LATESTCREATED LATESTREADY READY REASON"},
		{[]string{"get", "kservice", "hello", "--no-headers"}, "hello " + url + " hello-00001 hello-00001 True"},
		{[]string{"get", "rev", "-o", "wide"}, "hello-00001 hello 1 True"},
		{[]string{"get", "rt,cfg", "-o", "name"}, "route.serving.knative.dev/hello"},
		{[]string{"get", "ksvc", "-o", "jsonpath={.items[0].status.url}"}, url},
		{[]string{"get", "ksvc,cm", "-A", "-o", "custom-columns=KIND:.kind,NAME:.metadata.name", "--sort-by", ".metadata.name", "--no-headers"}, "Service hello"},
		{[]string{"get", "rev", "-o", `go-template={{range .items}}{{.metadata.name}}={{index .metadata.labels "serving.knative.dev/service"}}{{end}}`}, "hello-00001=hello"},
	} {
		out := must("", tt.args...)
		if !hasLine(out, tt.want) {
			t.Errorf("knbox %s: no line %q in\n%s", strings.Join(tt.args, " "), tt.want, out)
		}
	}

	// describe with the conditions.
	for _, obj := range []string{"ksvc/hello", "rev/" + rev, "route/hello"} {
		out := must("", "describe", obj)
		if f := strings.Join(strings.Fields(out), " "); !strings.Contains(f, "Conditions: TYPE STATUS REASON MESSAGE AGE") || !strings.Contains(f, " Ready True ") {
			t.Errorf("describe %s has no Ready condition:\n%s", obj, out)
		}
	}

	// A field removed from the file is removed on the server; the object
	// is then as the file says.
	noEnv := hello[:strings.Index(hello, "          env:")]
	if out := must(noEnv, "apply", "-f", "-"); !strings.Contains(out, "service.serving.knative.dev/hello configured") {
		t.Errorf("apply without env: %s", out)
	}
	if out := must("", "get", "ksvc", "hello", "-o", "jsonpath={.spec.template.spec.containers[0].env}"); out != "" {
		t.Errorf("env after it was removed from the file: %s", out)
	}
	if out := must(noEnv, "apply", "-f", "-"); !strings.Contains(out, "unchanged") {
		t.Errorf("apply without env again: %s", out)
	}

	// The connection flags, as kubectl's: --kubeconfig wins over
	// $KUBECONFIG and the data dir; --context picks a context; --token
	// replaces its credentials.
	cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	token := cfg.AuthInfos[cur.AuthInfo].Token
	cfg.AuthInfos["nobody"] = &clientcmdapi.AuthInfo{Token: "not-a-token"}
	cfg.Contexts["nobody"] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: "nobody"}
	other := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, other); err != nil {
		t.Fatal(err)
	}
	names := []string{"get", "cm", "settings", "-o", "name"}
	withFlags := func(extra ...string) (string, error) {
		t.Helper()
		return run(t, []string{"KNBOX_DATA_DIR=" + t.TempDir(), "KUBECONFIG=/nonexistent"}, "", knboxBin, append(names, extra...)...)
	}
	if out, err := withFlags("--kubeconfig", other); err != nil || out != "configmap/settings\n" {
		t.Errorf("--kubeconfig: %v\n%s", err, out)
	}
	if out, err := withFlags("--kubeconfig", other, "--context", "nobody"); err == nil || !strings.Contains(out, "the server has asked for the client to provide credentials") {
		t.Errorf("--context with a bad token: %v\n%s", err, out)
	}
	if out, err := withFlags("--kubeconfig", other, "--context", "nobody", "--token", token); err != nil || out != "configmap/settings\n" {
		t.Errorf("--context and --token: %v\n%s", err, out)
	}

	// Mistakes: a type that does not exist, a manifest with a bad field.
	if out, err := knbox("", "get", "ksvcs"); err == nil || !strings.Contains(out, `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`) {
		t.Errorf("unknown type: %v %s", err, out)
	}
	bad := "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  template:\n    spec:\n      containers:\n      - image: \"\"\n---\n" + strings.Replace(cm, "settings", "other", 1)
	out, err = knbox(bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "stdin: document 1 (line 1): Service.serving.knative.dev \"bad\" is invalid:\n  spec.template.spec.containers[0].image: Required value") || !strings.Contains(out, "configmap/other created") {
		t.Errorf("apply with a bad document: %v\n%s", err, out)
	}

	// delete waits until the Service is gone, as kubectl's does.
	if out := must("", "delete", "ksvc", "hello"); !strings.Contains(out, `service.serving.knative.dev "hello" deleted`) {
		t.Errorf("delete: %s", out)
	}
	if out, err := knbox("", "get", "ksvc", "hello"); err == nil || !strings.Contains(out, `services.serving.knative.dev "hello" not found`) {
		t.Errorf("get after delete: %v %s", err, out)
	}
}

// hasLine says whether out has a line that starts with want's fields.
func hasLine(out, want string) bool {
	w := strings.Fields(want)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(w) && strings.Join(f[:len(w)], " ") == strings.Join(w, " ") {
			return true
		}
	}
	return false
}
