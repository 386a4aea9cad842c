package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// ksvc is a Knative Service manifest; extra is appended to its metadata.
func ksvc(name, ns, target, extra string) string {
	s := "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: " + name + "\n"
	if ns != "" {
		s += "  namespace: " + ns + "\n"
	}
	s += extra
	return s + `spec:
  template:
    spec:
      containers:
      - image: ghcr.io/knative/helloworld-go:latest
        env:
        - name: TARGET
          value: ` + target + "\n"
}

// cm is a ConfigMap manifest with data num: value.
func cm(name, value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  num: \"" + value + "\"\n"
}

var (
	ksvcGVR  = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	routeGVR = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "routes"}
	cmGVR    = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// dyn is a dynamic client of env, for what the tests check on the server.
func dyn(t *testing.T, env *apiservertest.Env) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func getObject(t *testing.T, env *apiservertest.Env, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	o, err := dyn(t, env).Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// run executes one knbox client command as the binary does and returns
// what it printed.
func run(t testing.TB, ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	if t != nil {
		t.Helper()
	}
	var out, errOut bytes.Buffer
	err = runTo(ctx, &out, &errOut, stdin, args...)
	return out.String(), errOut.String(), err
}

func runTo(ctx context.Context, out, errOut interface{ Write([]byte) (int, error) }, stdin string, args ...string) error {
	root := &cobra.Command{Use: "knbox", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(Commands()...)
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(out)
	root.SetErr(errOut)
	if ctx == nil {
		ctx = context.Background()
	}
	return root.ExecuteContext(ctx)
}

// knbox runs a command against env and fails the test on an error.
func knbox(t *testing.T, env *apiservertest.Env, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, nil, stdin, append(args, "--kubeconfig", env.Kubeconfig)...)
	if err != nil {
		t.Fatalf("knbox %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func TestApplyThreeWayMerge(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	apply := func(manifest string) string {
		t.Helper()
		return strings.TrimSpace(knbox(t, env, manifest, "apply", "-f", "-"))
	}

	v1 := ksvc("hello", "", "World", "  labels:\n    app: hello\n    tier: web\n")
	if got := apply(v1); got != "service.serving.knative.dev/hello created" {
		t.Fatalf("first apply: %s", got)
	}
	o := getObject(t, env, ksvcGVR, "default", "hello")
	var last map[string]interface{}
	if err := json.Unmarshal([]byte(o.GetAnnotations()[LastAppliedAnnotation]), &last); err != nil {
		t.Fatalf("last-applied annotation: %v", err)
	}
	if md := last["metadata"].(map[string]interface{}); md["name"] != "hello" || md["namespace"] != "default" {
		t.Errorf("last-applied metadata = %v", md)
	}
	if got := apply(v1); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("same again: %s", got)
	}

	// Someone else adds a label; applying the same manifest keeps it.
	if _, err := dyn(t, env).Resource(ksvcGVR).Namespace("default").Patch(context.Background(), "hello", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"owner":"ops"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := apply(v1); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("after another writer: %s", got)
	}

	// A new target, the tier label removed from the file: removed on the
	// server too, the other writer's label kept.
	v2 := ksvc("hello", "", "Knative", "  labels:\n    app: hello\n")
	if got := apply(v2); got != "service.serving.knative.dev/hello configured" {
		t.Fatalf("changed: %s", got)
	}
	o = getObject(t, env, ksvcGVR, "default", "hello")
	if l := o.GetLabels(); l["app"] != "hello" || l["owner"] != "ops" || l["tier"] != "" {
		t.Errorf("labels = %v, want app=hello owner=ops and no tier", l)
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if b, _ := json.Marshal(containers); !strings.Contains(string(b), `"value":"Knative"`) {
		t.Errorf("containers = %s", b)
	}
	if o.GetGeneration() != 2 {
		t.Errorf("generation = %d, want 2", o.GetGeneration())
	}
	if got := apply(v2); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("v2 again: %s", got)
	}

	// Core kinds get a strategic merge patch: a key removed from the
	// file's data is removed on the server.
	apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n  b: \"2\"\n")
	if got := apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n"); got != "configmap/settings configured" {
		t.Errorf("configmap: %s", got)
	}
	if data, _, _ := unstructured.NestedStringMap(getObject(t, env, cmGVR, "default", "settings").Object, "data"); len(data) != 1 || data["a"] != "1" {
		t.Errorf("configmap data = %v, want only a", data)
	}

	// The seed API (v1alpha1) applies the same way.
	alpha := `apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: seed
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          container:
            image: ghcr.io/knative/helloworld-go:latest
`
	if got := apply(alpha); got != "service.serving.knative.dev/seed created" {
		t.Errorf("v1alpha1: %s", got)
	}
	if got := apply(alpha); got != "service.serving.knative.dev/seed unchanged" {
		t.Errorf("v1alpha1 again: %s", got)
	}

	// Cluster-scoped kinds take no namespace.
	if got := apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n"); got != "namespace/team-a created" {
		t.Errorf("namespace: %s", got)
	}
}

func TestApplyNamespaces(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	knbox(t, env, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n", "apply", "-f", "-")
	if out := knbox(t, env, ksvc("a", "", "x", ""), "apply", "-f", "-", "-n", "team-a"); out != "service.serving.knative.dev/a created\n" {
		t.Fatal(out)
	}
	getObject(t, env, ksvcGVR, "team-a", "a")

	// -n given and a different namespace in the manifest.
	_, _, err := run(t, nil, ksvc("b", "default", "x", ""), "apply", "-f", "-", "-n", "team-a", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != `stdin: document 1 (line 1): the namespace of the object ("default") does not match the namespace given ("team-a"): leave out -n or pass -n default` {
		t.Errorf("err = %v", err)
	}
}

func TestApplyKubectlInterop(t *testing.T) {
	t.Parallel()
	kubectl := requireKubectl(t)
	env := apiservertest.Start(t, "")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1.yaml", ksvc("hello", "", "World", "  labels:\n    app: hello\n    tier: web\n"))
	v2 := write("v2.yaml", ksvc("hello", "", "World", "  labels:\n    app: hello\n"))
	kubectlApply := func(file string) {
		t.Helper()
		cmd := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "--cache-dir", filepath.Join(dir, "cache"), "apply", "-f", file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", file, err, out)
		}
	}
	annotation := func() string {
		return getObject(t, env, ksvcGVR, "default", "hello").GetAnnotations()[LastAppliedAnnotation]
	}

	// kubectl creates; knbox reads kubectl's annotation and finds nothing to do.
	kubectlApply(v1)
	fromKubectl := annotation()
	if got := knbox(t, env, "", "apply", "-f", v1); !strings.HasSuffix(got, " unchanged\n") {
		t.Errorf("knbox after kubectl: %s", got)
	}
	if got := annotation(); got != fromKubectl {
		t.Errorf("knbox rewrote kubectl's annotation:\n%s\n%s", fromKubectl, got)
	}
	// knbox drops the label kubectl applied.
	if got := knbox(t, env, "", "apply", "-f", v2); !strings.HasSuffix(got, " configured\n") {
		t.Errorf("knbox v2: %s", got)
	}
	if l := getObject(t, env, ksvcGVR, "default", "hello").GetLabels(); l["tier"] != "" {
		t.Errorf("labels after knbox v2 = %v", l)
	}
	// kubectl reads knbox's annotation: applying v1 brings the label back
	// and leaves the annotation kubectl itself would write.
	kubectlApply(v1)
	if l := getObject(t, env, ksvcGVR, "default", "hello").GetLabels(); l["tier"] != "web" {
		t.Errorf("labels after kubectl v1 = %v", l)
	}
	if got := annotation(); got != fromKubectl {
		t.Errorf("annotations differ:\n%s\n%s", fromKubectl, got)
	}
}

// requireKubectl returns kubectl's path; in CI it must be there.
func requireKubectl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kubectl is required in CI (hack/install-deps.sh installs it): %v", err)
		}
		t.Skip("kubectl is not installed (run hack/install-deps.sh)")
	}
	return p
}

func TestApplyFilesAndErrors(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	dir := t.TempDir()
	for name, content := range map[string]string{
		"10-config.yaml": cm("settings", "1") + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  token: t\n",
		"20-service.json": `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello"},` +
			`"spec":{"template":{"spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go:latest"}]}}}}`,
		"30-knbox.yaml": "# knbox's own configuration, not a Kubernetes object\napiAddr: 127.0.0.1:6443\n",
		"README.md":     "not a manifest",
		"sub/deep.yaml": cm("deep", "2"),
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err := run(t, nil, "", "apply", "--kubeconfig", env.Kubeconfig, "-f", dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "configmap/settings created\nsecret/creds created\nservice.serving.knative.dev/hello created\n"; out != want {
		t.Errorf("apply -f dir:\n%s\nwant:\n%s", out, want)
	}
	if note := filepath.Join(dir, "30-knbox.yaml") + ": document 1 (line 1): skipped: not a Kubernetes object (no apiVersion and kind)\n"; !strings.Contains(errOut, note) {
		t.Errorf("stderr does not note the skipped file:\n%s", errOut)
	}
	if out := knbox(t, env, "", "apply", "-R", "-f", dir); !strings.Contains(out, "configmap/deep created") {
		t.Errorf("apply -R:\n%s", out)
	}

	bad := `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: bad
spec:
  template:
    spec:
      containerConcurrency: -1
      containers:
      - image: ""
`
	stdin := ksvc("first", "", "one", "") + "---\n" + bad + "---\n" + ksvc("last", "", "three", "") +
		"---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n" +
		"---\napiVersion: serving.knative.dev/v1\nkind: Servce\nmetadata:\n  name: typo\n" +
		"---\napiVersion: serving.knative.dev/v2\nkind: Service\nmetadata:\n  name: v2\n" +
		"---\napiVersion: v1\nkind: ConfigMap\n"
	out, _, err = run(t, nil, stdin, "apply", "--kubeconfig", env.Kubeconfig, "-f", "-")
	if want := "service.serving.knative.dev/first created\nservice.serving.knative.dev/last created\n"; out != want {
		t.Errorf("apply -f -:\n%s\nwant:\n%s", out, want)
	}
	if err == nil {
		t.Fatal("apply with invalid documents: no error")
	}
	wantErr := `stdin: document 2 (line 14): Service.serving.knative.dev "bad" is invalid:
  spec.template.spec.containerConcurrency: Invalid value: expected 0 <= -1 <= 1000
  spec.template.spec.containers[0].image: Required value: missing field(s)
stdin: document 4 (line 38): no matches for kind "Widget" in version "example.com/v1"
stdin: document 5 (line 43): no matches for kind "Servce" in version "serving.knative.dev/v1"; did you mean "Service"?
stdin: document 6 (line 48): no matches for kind "Service" in version "serving.knative.dev/v2" (the server serves it in serving.knative.dev/v1)
stdin: document 7 (line 53): metadata.name: Required value (apply needs a name)`
	if err.Error() != wantErr {
		t.Errorf("error:\n%s\nwant:\n%s", err, wantErr)
	}
	getObject(t, env, ksvcGVR, "default", "first")
	getObject(t, env, ksvcGVR, "default", "last")

	for _, tt := range []struct {
		name    string
		stdin   string
		args    []string
		wantErr string
	}{
		{"nothing to apply", "# nothing\n", []string{"-f", "-"}, "no objects to apply in [-]"},
		{"no -f", "", nil, "give the manifests to apply with -f FILE|DIR|-"},
		{"a missing file", "", []string{"-f", filepath.Join(dir, "nope.yaml")}, `the path "` + filepath.Join(dir, "nope.yaml") + `" does not exist`},
		{"a URL", "", []string{"-f", "https://example.com/x.yaml"}, "https://example.com/x.yaml: knbox reads manifests from files and stdin only; download it first (curl -fsSL https://example.com/x.yaml | knbox apply -f -)"},
		{"only a configuration file", "apiAddr: x\n", []string{"-f", "-"}, "no objects to apply in [-]"},
	} {
		_, _, err := run(t, nil, tt.stdin, append([]string{"apply", "--kubeconfig", env.Kubeconfig}, tt.args...)...)
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.wantErr)
		}
	}
}

// getEnv is a server with: namespace team-a; in default, Service hello
// (app=hello) and ConfigMaps settings, c1, c2 and c3; in team-a, Service
// other (app=other).
func getEnv(t *testing.T) *apiservertest.Env {
	t.Helper()
	env := apiservertest.Start(t, "")
	knbox(t, env, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n---\n"+
		ksvc("hello", "", "World", "  labels:\n    app: hello\n")+"---\n"+
		ksvc("other", "team-a", "World", "  labels:\n    app: other\n")+"---\n"+
		cm("settings", "0")+"---\n"+cm("c1", "3")+"---\n"+cm("c2", "1")+"---\n"+cm("c3", "2"), "apply", "-f", "-")
	return env
}

func TestGetCommand(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	kc := []string{"--kubeconfig", env.Kubeconfig}
	runCommandCases(t, kc, []commandCase{{
		name:      "table",
		args:      []string{"get", "ksvc"},
		wantLines: []string{"NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "hello *"},
	}, {
		name:      "wide",
		args:      []string{"get", "services.serving.knative.dev", "-o", "wide"},
		wantLines: []string{"NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "hello *"},
	}, {
		name:      "all namespaces",
		args:      []string{"get", "ksvc", "-A"},
		wantLines: []string{"NAMESPACE NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "default hello *", "team-a other *"},
	}, {
		name:      "selector",
		args:      []string{"get", "ksvc", "-A", "-l", "app=other"},
		wantLines: []string{"NAMESPACE NAME *", "team-a other *"},
	}, {
		name:      "namespace, short name",
		args:      []string{"get", "kservice", "-n", "team-a", "--no-headers"},
		wantLines: []string{"other *"},
	}, {
		name:      "several kinds",
		args:      []string{"get", "ksvc,cm", "-l", "app"},
		wantLines: []string{"NAME *", "service.serving.knative.dev/hello *"},
	}, {
		name:      "names in kind/name form",
		args:      []string{"get", "ksvc/hello", "cm/settings"},
		wantLines: []string{"NAME *", "service.serving.knative.dev/hello *", "", "NAME DATA AGE", "configmap/settings 1 *"},
	}, {
		name:      "cluster-scoped with -A has no namespace column",
		args:      []string{"get", "ns", "-A"},
		wantLines: []string{"NAME STATUS AGE", "default Active *", "team-a Active *"},
	}, {
		name:      "the all category",
		args:      []string{"get", "all"},
		wantLines: []string{"NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "service.serving.knative.dev/hello *"},
	}, {
		name:    "name output",
		args:    []string{"get", "ksvc,configmap", "-o", "name", "--sort-by", ".metadata.name"},
		wantOut: "configmap/c1\nconfigmap/c2\nconfigmap/c3\nservice.serving.knative.dev/hello\nconfigmap/settings\n",
	}, {
		name:    "jsonpath",
		args:    []string{"get", "ksvc", "-A", "-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}`},
		wantOut: "default/hello\nteam-a/other\n",
	}, {
		name:    "jsonpath of one object",
		args:    []string{"get", "ksvc", "hello", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value}"},
		wantOut: "World",
	}, {
		name:    "custom-columns sorted by a field",
		args:    []string{"get", "cm", "-o", "custom-columns=NAME:.metadata.name,N:.data.num", "--sort-by", ".data.num"},
		wantOut: "NAME       N\nsettings   0\nc2         1\nc3         2\nc1         3\n",
	}, {
		name:    "go-template",
		args:    []string{"get", "ksvc", "-A", "-o", `go-template={{range .items}}{{.metadata.name}} {{index .metadata.labels "app"}};{{end}}`},
		wantOut: "hello hello;other other;",
	}, {
		name:      "table sorted by a field",
		args:      []string{"get", "cm", "--sort-by", "{.data.num}", "--no-headers"},
		wantLines: []string{"settings *", "c2 *", "c3 *", "c1 *"},
	}, {
		name:       "empty",
		args:       []string{"get", "rt", "-n", "nobody"},
		wantStderr: "No resources found in nobody namespace.\n",
	}, {
		name:       "empty, all namespaces",
		args:       []string{"get", "secrets", "-A"},
		wantStderr: "No resources found\n",
	}, {
		name:    "no kind",
		args:    []string{"get"},
		wantErr: "name a resource type, e.g. `knbox get ksvc`, or give -f FILE; `knbox api-resources` lists the types",
	}, {
		name:    "unknown kind",
		args:    []string{"get", "ksvcs"},
		wantErr: `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`,
	}, {
		name:    "unknown kind among several",
		args:    []string{"get", "ksvc,revison"},
		wantErr: `the server doesn't have a resource type "revison"; did you mean "revision"?`,
	}, {
		name:    "unknown kind, nothing close",
		args:    []string{"get", "deployments"},
		wantErr: `the server doesn't have a resource type "deployments"`,
	}, {
		name:      "missing name",
		args:      []string{"get", "ksvc", "hello", "nope"},
		wantLines: []string{"NAME *", "hello *"},
		wantErr:   `services.serving.knative.dev "nope" not found`,
	}, {
		name:    "bad output",
		args:    []string{"get", "ksvc", "-o", "xml"},
		wantErr: `unable to match a printer suitable for the output format "xml", allowed formats are: custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,template,templatefile,wide,yaml`,
	}, {
		name:    "bad jsonpath",
		args:    []string{"get", "ksvc", "-o", "jsonpath={.items[*"},
		wantErr: `error parsing jsonpath {.items[*, unterminated array`,
	}, {
		name:    "a sort field that cannot sort",
		args:    []string{"get", "cm", "-o", "name", "--sort-by", ".metadata"},
		wantErr: `cannot sort by .metadata: its value is an object, which does not sort; give an expression whose values are strings, numbers or times`,
	}, {
		name:    "bad selector",
		args:    []string{"get", "ksvc", "-l", "a b"},
		wantErr: `-l "a b": unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt`,
	}})
}

// checkLines compares output lines by their whitespace-separated fields;
// a final "*" field matches any rest of the line.
func checkLines(t *testing.T, out string, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		got = nil
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		g, w := strings.Fields(got[i]), strings.Fields(want[i])
		if n := len(w); n > 0 && w[n-1] == "*" {
			w = w[:n-1]
			if len(g) > len(w) {
				g = g[:len(w)]
			}
		}
		if strings.Join(g, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want %q\n%s", i, got[i], want[i], out)
		}
	}
}

func TestGetObjects(t *testing.T) {
	t.Parallel()
	env := getEnv(t)

	var one map[string]interface{}
	if err := yaml.Unmarshal([]byte(knbox(t, env, "", "get", "ksvc", "hello", "-o", "yaml")), &one); err != nil {
		t.Fatal(err)
	}
	if one["kind"] != "Service" || one["apiVersion"] != "serving.knative.dev/v1" || one["metadata"].(map[string]interface{})["name"] != "hello" {
		t.Errorf("-o yaml of one object: %v", one)
	}

	out := knbox(t, env, "", "get", "ksvc,cm", "-A", "-o", "json", "-l", "app")
	var list struct {
		APIVersion string                      `json:"apiVersion"`
		Kind       string                      `json:"kind"`
		Items      []unstructured.Unstructured `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	var names []string
	for _, it := range list.Items {
		names = append(names, it.GetKind()+"/"+it.GetNamespace()+"/"+it.GetName())
	}
	if list.APIVersion != "v1" || list.Kind != "List" || strings.Join(names, " ") != "Service/default/hello Service/team-a/other" {
		t.Errorf("-o json list: %s %s %v", list.APIVersion, list.Kind, names)
	}

	// The seed API's view of the same Service.
	if out := knbox(t, env, "", "get", "services.v1alpha1.serving.knative.dev", "hello", "-o", "jsonpath={.apiVersion} {.spec.runLatest.configuration.revisionTemplate.spec.container.image}"); out != "serving.knative.dev/v1alpha1 ghcr.io/knative/helloworld-go:latest" {
		t.Errorf("v1alpha1 view: %s", out)
	}

	// -f names the objects to get.
	p := filepath.Join(t.TempDir(), "hello.yaml")
	if err := os.WriteFile(p, []byte(ksvc("hello", "", "x", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := knbox(t, env, "", "get", "-f", p, "-o", "name"); out != "service.serving.knative.dev/hello\n" {
		t.Errorf("get -f: %s", out)
	}
	_, _, err := run(t, nil, "", "get", "ksvc", "nope", "-o", "json", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != `services.serving.knative.dev "nope" not found` || !apierrors.IsNotFound(err) {
		t.Errorf("missing object: %v", err)
	}
}

// syncBuffer is a bytes.Buffer for a writer and a reader in different
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func eventually(t *testing.T, cond func() bool, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// background runs a command until the test ends or it returns; done
// receives its error.
func background(t *testing.T, env *apiservertest.Env, args ...string) (out *syncBuffer, done <-chan error, cancel func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out = &syncBuffer{}
	ch := make(chan error, 1)
	go func() {
		ch <- runTo(ctx, out, out, "", append(args, "--kubeconfig", env.Kubeconfig)...)
	}()
	return out, ch, cancel
}

func TestGetWatch(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	out, done, cancel := background(t, env, "get", "cm", "-w", "-o", "name", "-l", "watch=yes")
	// The watch has started once a change made after it shows.
	for i := 0; !strings.Contains(out.String(), "configmap/probe"); i++ {
		knbox(t, env, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n  labels:\n    watch: \"yes\"\ndata:\n  i: \""+strconv.Itoa(i)+"\"\n", "apply", "-f", "-")
		eventually(t, func() bool { return strings.Contains(out.String(), "configmap/probe") }, time.Second, "")
	}
	knbox(t, env, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n  labels:\n    watch: \"yes\"\n", "apply", "-f", "-")
	eventually(t, func() bool { return strings.Contains(out.String(), "configmap/watched") }, 10*time.Second, "the new ConfigMap in the watch")
	if strings.Contains(out.String(), "settings") {
		t.Errorf("the watch shows what its selector excludes:\n%s", out)
	}
	// The command ends with its context (as on SIGINT).
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
}

// setConditions writes status conditions of a Knative object through its
// status subresource, as the controllers do.
func setConditions(t *testing.T, env *apiservertest.Env, gvr schema.GroupVersionResource, name string, conds ...map[string]interface{}) {
	t.Helper()
	ri := dyn(t, env).Resource(gvr).Namespace("default")
	o, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list := make([]interface{}, 0, len(conds))
	for _, c := range conds {
		c["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
		list = append(list, c)
	}
	if err := unstructured.SetNestedField(o.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(o.Object, o.GetGeneration(), "status", "observedGeneration"); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.UpdateStatus(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	knbox(t, env, `apiVersion: serving.knative.dev/v1
kind: Route
metadata:
  name: hello
spec:
  traffic:
  - configurationName: hello
    percent: 100
`, "apply", "-f", "-")
	setConditions(t, env, ksvcGVR, "hello",
		map[string]interface{}{"type": "Ready", "status": "False", "reason": "RevisionMissing", "message": "Configuration \"hello\" does not have any ready Revision."})
	setConditions(t, env, routeGVR, "hello",
		map[string]interface{}{"type": "AllTrafficAssigned", "status": "Unknown", "reason": "ConfigurationMissing"})

	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"describe", "ksvc", "hello"}, []string{"Name: hello Namespace: default Kind: Service API Version: serving.knative.dev/v1 Labels: app=hello",
			"Spec: template:", "image: ghcr.io/knative/helloworld-go:latest", "Status: observedGeneration: 1 Conditions:",
			"TYPE STATUS REASON MESSAGE AGE Ready False RevisionMissing Configuration \"hello\" does not have any ready Revision.", "Events: <none>"}},
		{[]string{"describe", "route/hello"}, []string{"Kind: Route", "- configurationName: hello", "AllTrafficAssigned Unknown ConfigurationMissing -"}},
		{[]string{"describe", "ksvc", "-l", "app=hello"}, []string{"Name: hello"}},
		{[]string{"describe", "ksvc", "hel"}, []string{"Name: hello"}}, // a name prefix
		{[]string{"describe", "cm", "settings"}, []string{"Name: settings", "Data: num: \"0\""}},
	} {
		out := knbox(t, env, "", tt.args...)
		fields := strings.Join(strings.Fields(out), " ") // columns vary in width
		for _, w := range tt.want {
			if !strings.Contains(fields, w) {
				t.Errorf("knbox %s: no %q in\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
	}
	_, _, err := run(t, nil, "", "describe", "rev", "nope", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != `revisions.serving.knative.dev "nope" not found` {
		t.Errorf("describe of a missing object: %v", err)
	}
	_, _, err = run(t, nil, "", "describe", "revisons", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != `the server doesn't have a resource type "revisons"; did you mean "revisions"?` {
		t.Errorf("describe of an unknown type: %v", err)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	env := getEnv(t)

	out, done, _ := background(t, env, "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=60s")
	setConditions(t, env, ksvcGVR, "hello", map[string]interface{}{"type": "Ready", "status": "Unknown"})
	setConditions(t, env, ksvcGVR, "hello", map[string]interface{}{"type": "Ready", "status": "True"})
	select {
	case err := <-done:
		if err != nil || out.String() != "service.serving.knative.dev/hello condition met\n" {
			t.Errorf("wait: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("wait did not return after the condition was met")
	}

	if out := knbox(t, env, "", "wait", "ksvc", "--all", "--for=jsonpath={.status.conditions[0].status}=True"); out != "service.serving.knative.dev/hello condition met\n" {
		t.Errorf("wait --all for a jsonpath: %s", out)
	}

	_, _, err := run(t, nil, "", "wait", "cm/settings", "--for=delete", "--timeout=0", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != "condition not met for configmaps/settings" {
		t.Errorf("wait --for=delete of an object that stays: %v", err)
	}
	out, done, _ = background(t, env, "wait", "cm/settings", "--for=delete", "--timeout=60s")
	knbox(t, env, "", "delete", "cm", "settings", "--wait=false")
	select {
	case err := <-done:
		// Nothing is printed when the object was gone before wait looked.
		if err != nil || (out.String() != "configmap/settings condition met\n" && out.String() != "") {
			t.Errorf("wait --for=delete: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("wait --for=delete did not return after the deletion")
	}

	_, _, err = run(t, nil, "", "wait", "ksvc/hello", "--for=condition=Ready=False", "--timeout=0", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != "condition not met for services/hello" {
		t.Errorf("wait for what is not so: %v", err)
	}
	_, _, err = run(t, nil, "", "wait", "ksvc/hello", "--for=ready", "--kubeconfig", env.Kubeconfig)
	if err == nil || !strings.Contains(err.Error(), "unrecognized condition: \"ready\"") {
		t.Errorf("wait with a bad --for: %v", err)
	}
}

func TestDeleteCommand(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	if out := knbox(t, env, "", "delete", "ksvc", "hello"); out != "service.serving.knative.dev \"hello\" deleted\n" {
		t.Errorf("delete: %q", out)
	}
	_, _, err := run(t, nil, "", "delete", "ksvc", "hello", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != `services.serving.knative.dev "hello" not found` || !apierrors.IsNotFound(err) {
		t.Errorf("delete again: %v", err)
	}
	if out := knbox(t, env, "", "delete", "ksvc/other", "-n", "team-a"); out != "service.serving.knative.dev \"other\" deleted\n" {
		t.Errorf("delete kind/name -n: %q", out)
	}
	// (kubectl's -f reads stdin from the process's, so a file here.)
	p := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(p, []byte(cm("settings", "0")+"---\n"+cm("gone", "0")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, nil, "", "delete", "-f", p, "--kubeconfig", env.Kubeconfig)
	if out != "configmap \"settings\" deleted\n" || err == nil || err.Error() != p+`: document 2 (line 8): configmaps "gone" not found` {
		t.Errorf("delete -f: %q %v", out, err)
	}
	if out := knbox(t, env, "", "delete", "cm", "-l", "nothing=here"); out != "No resources found\n" {
		t.Errorf("delete -l of nothing: %q", out)
	}
	if _, _, err := run(t, nil, "", "delete", "ksvc", "--kubeconfig", env.Kubeconfig); err == nil || !strings.Contains(err.Error(), "name the objects to delete: ") {
		t.Errorf("delete without a name: %v", err)
	}
}

func TestAPIResources(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	out := knbox(t, env, "", "api-resources", "--api-group", "serving.knative.dev")
	checkLines(t, out, []string{
		"NAME SHORTNAMES APIVERSION NAMESPACED KIND",
		"configurations config,cfg serving.knative.dev/v1 true Configuration",
		"domainmappings dm serving.knative.dev/v1beta1 true DomainMapping",
		"revisions rev serving.knative.dev/v1 true Revision",
		"routes rt serving.knative.dev/v1 true Route",
		"services kservice,ksvc serving.knative.dev/v1 true Service",
	})
}

func TestKubeconfigCommand(t *testing.T) {
	dir := t.TempDir()
	env := apiservertest.Start(t, dir)
	want, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, nil, "", "kubeconfig", "--data-dir", dir)
	if err != nil || out != string(want) {
		t.Errorf("kubeconfig: %v\n%s", err, out)
	}
	t.Setenv("KNBOX_DATA_DIR", dir)
	if out, _, err := run(t, nil, "", "kubeconfig"); err != nil || out != string(want) {
		t.Errorf("kubeconfig from $KNBOX_DATA_DIR: %v", err)
	}
	empty := t.TempDir()
	_, _, err = run(t, nil, "", "kubeconfig", "--data-dir", empty)
	if want := "no kubeconfig in " + empty + ": start the server first with `knbox serve --data-dir " + empty + "`"; err == nil || err.Error() != want {
		t.Errorf("missing: %v", err)
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	out := knbox(t, env, "", "version")
	if !strings.HasPrefix(out, "client: ") || !strings.Contains(out, "\nserver: ") || strings.Contains(out, "unreachable") {
		t.Errorf("version:\n%s", out)
	}
	empty := t.TempDir()
	out, _, err := run(t, nil, "", "version", "--kubeconfig", filepath.Join(empty, "kubeconfig"))
	if err != nil || !strings.Contains(out, "server: unreachable (stat "+filepath.Join(empty, "kubeconfig")+": no such file or directory)") {
		t.Errorf("version without a kubeconfig: %v\n%s", err, out)
	}

	// A kubeconfig for a server that is gone.
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(empty, "gone")
	if err := os.WriteFile(gone, bytes.ReplaceAll(kc, []byte(strings.TrimPrefix(env.URL, "https://")), []byte("127.0.0.1:1")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, nil, "", "version", "--kubeconfig", gone)
	if err != nil || !strings.Contains(out, "server: unreachable (cannot reach the server at https://127.0.0.1:1: ") {
		t.Errorf("version of a server that is gone: %v\n%s", err, out)
	}
	_, _, err = run(t, nil, "", "get", "ksvc", "--kubeconfig", gone)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the server at https://127.0.0.1:1") {
		t.Errorf("get from a server that is gone: %v", err)
	}
	var he *humanError
	if !errors.As(err, &he) {
		t.Errorf("error %T is not worded for users", err)
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	_, _, err := run(t, nil, "", "get", "ksvc", "--kubeconfig", env.Kubeconfig, "--token", "not-the-token")
	if err == nil || !strings.Contains(err.Error(), "the server has asked for the client to provide credentials (is the token in the kubeconfig the server's?)") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v", err)
	}
}

// TestSameButStatus: apply's "unchanged" ignores what controllers write
// meanwhile (status, and with it the resourceVersion), not what it sent.
func TestSameButStatus(t *testing.T) {
	t.Parallel()
	obj := func(rv, target, ready string) *unstructured.Unstructured {
		var o map[string]interface{}
		if err := yaml.Unmarshal([]byte(ksvc("hello", "default", target, "  resourceVersion: \""+rv+"\"\n  managedFields: [{manager: m"+rv+"}]\n")+
			"status:\n  conditions:\n  - {type: Ready, status: \""+ready+"\"}\n"), &o); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: o}
	}
	if !sameButStatus(obj("1", "a", "Unknown"), obj("2", "a", "True")) {
		t.Error("a status write counts as a change")
	}
	if sameButStatus(obj("1", "a", "True"), obj("2", "b", "True")) {
		t.Error("a spec change counts as none")
	}
}

// TestApplyRefusesUnknownFields: knbox apply validates strictly, as
// kubectl's default does (the server alone would drop the field with a
// warning), on create and on the patch of an existing object.
func TestApplyRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	bad := strings.Replace(ksvc("strict", "", "World", ""), "spec:\n", "spec:\n  bogus: 1\n", 1)
	for _, step := range []string{"create", "patch"} {
		_, errOut, err := run(t, nil, bad, "apply", "-f", "-", "--kubeconfig", env.Kubeconfig)
		if err == nil || !strings.Contains(err.Error()+errOut, "bogus") {
			t.Errorf("%s with an unknown field: err=%v %s", step, err, errOut)
		}
		knbox(t, env, ksvc("strict", "", "World", ""), "apply", "-f", "-")
	}
}

// commandCase is a command run against a server, with what it must print
// or fail with.
type commandCase struct {
	name       string
	args       []string
	wantOut    string   // exact stdout, if not ""
	wantLines  []string // each a line of stdout, in order, as fields
	wantStderr string
	wantErr    string
}

// runCommandCases runs each case in parallel with the connection flags kc.
func runCommandCases(t *testing.T, kc []string, tests []commandCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, err := run(t, nil, "", append(tt.args, kc...)...)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Errorf("error %v, want %s", err, tt.wantErr)
			}
			if errOut != tt.wantStderr {
				t.Errorf("stderr %q, want %q", errOut, tt.wantStderr)
			}
			if tt.wantOut != "" && out != tt.wantOut {
				t.Errorf("stdout:\n%q\nwant:\n%q", out, tt.wantOut)
			}
			if tt.wantOut == "" {
				checkLines(t, out, tt.wantLines)
			}
		})
	}
}
