package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/version"
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

func newClient(t *testing.T, env *apiservertest.Env) *Client {
	t.Helper()
	c, err := NewClient(env.Config, "default")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func applyString(t *testing.T, c *Client, src, manifest string) []Result {
	t.Helper()
	res, err := c.Apply(context.Background(), ReadManifests(src, []byte(manifest)))
	if err != nil {
		t.Fatalf("apply %s: %v", src, err)
	}
	return res
}

func actions(rs []Result) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.String())
	}
	return strings.Join(s, "\n")
}

func getObject(t *testing.T, c *Client, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	r, err := c.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Resolve(kind)
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.dynamicFor(m, ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// run executes one knbox client command as the binary does and returns
// what it printed.
func run(t *testing.T, ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
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

func TestApplyCreateConfigureUnchanged(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	c := newClient(t, env)

	v1 := ksvc("hello", "", "World", "  labels:\n    app: hello\n    tier: web\n")
	if got := actions(applyString(t, c, "v1.yaml", v1)); got != "service.serving.knative.dev/hello created" {
		t.Fatalf("first apply: %s", got)
	}
	o := getObject(t, c, "ksvc", "default", "hello")
	var last map[string]interface{}
	if err := json.Unmarshal([]byte(o.GetAnnotations()[LastAppliedAnnotation]), &last); err != nil {
		t.Fatalf("last-applied annotation: %v", err)
	}
	if md := last["metadata"].(map[string]interface{}); md["name"] != "hello" || md["namespace"] != "default" {
		t.Errorf("last-applied metadata = %v", md)
	}
	if got := actions(applyString(t, c, "v1.yaml", v1)); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("same again: %s", got)
	}

	// Someone else adds a label; applying the same manifest keeps it.
	m, _ := c.resolver.Resolve("ksvc")
	if _, err := c.dynamicFor(m, "default").Patch(context.Background(), "hello", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"owner":"ops"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := actions(applyString(t, c, "v1.yaml", v1)); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("after another writer: %s", got)
	}

	// A new target, the tier label dropped from the manifest.
	v2 := ksvc("hello", "", "Knative", "  labels:\n    app: hello\n")
	if got := actions(applyString(t, c, "v2.yaml", v2)); got != "service.serving.knative.dev/hello configured" {
		t.Fatalf("changed: %s", got)
	}
	o = getObject(t, c, "ksvc", "default", "hello")
	if l := o.GetLabels(); l["app"] != "hello" || l["owner"] != "ops" || l["tier"] != "" {
		t.Errorf("labels = %v, want app=hello owner=ops and no tier", l)
	}
	env0, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if !strings.Contains(mustJSON(t, env0), `"value":"Knative"`) {
		t.Errorf("containers = %s", mustJSON(t, env0))
	}
	if o.GetGeneration() != 2 {
		t.Errorf("generation = %d, want 2", o.GetGeneration())
	}
	if got := actions(applyString(t, c, "v2.yaml", v2)); got != "service.serving.knative.dev/hello unchanged" {
		t.Errorf("v2 again: %s", got)
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
	if got := actions(applyString(t, c, "alpha.yaml", alpha)); got != "service.serving.knative.dev/seed created" {
		t.Errorf("v1alpha1: %s", got)
	}
	if got := actions(applyString(t, c, "alpha.yaml", alpha)); got != "service.serving.knative.dev/seed unchanged" {
		t.Errorf("v1alpha1 again: %s", got)
	}

	// Cluster-scoped kinds take no namespace.
	ns := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n"
	if got := actions(applyString(t, c, "ns.yaml", ns)); got != "namespace/team-a created" {
		t.Errorf("namespace: %s", got)
	}
}

func mustJSON(t *testing.T, v interface{}) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyNamespaces(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	c := newClient(t, env)
	applyString(t, c, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n")
	c.Namespace = "team-a"
	if got := actions(applyString(t, c, "a.yaml", ksvc("a", "", "x", ""))); got != "service.serving.knative.dev/a created" {
		t.Fatal(got)
	}
	getObject(t, c, "ksvc", "team-a", "a")

	// -n given and a different namespace in the manifest.
	c.EnforceNamespace = true
	res, err := c.Apply(context.Background(), ReadManifests("b.yaml", []byte(ksvc("b", "default", "x", ""))))
	if err == nil || !strings.Contains(err.Error(), `b.yaml: document 1 (line 1): the namespace of the object ("default") does not match the namespace given ("team-a")`) {
		t.Errorf("err = %v", err)
	}
	if len(res) != 1 || res[0].Err == nil {
		t.Errorf("results = %v", res)
	}
}

func TestApplyKubectlInterop(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed; the interoperability test needs it")
	}
	env := apiservertest.Start(t, "")
	c := newClient(t, env)
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
		t.Logf("kubectl apply -f %s: %s", filepath.Base(file), out)
	}
	annotation := func() string {
		return getObject(t, c, "ksvc", "default", "hello").GetAnnotations()[LastAppliedAnnotation]
	}

	// kubectl creates; knbox reads kubectl's annotation and finds nothing to do.
	kubectlApply(v1)
	fromKubectl := annotation()
	data, _ := os.ReadFile(v1)
	if got := actions(applyString(t, c, v1, string(data))); !strings.HasSuffix(got, " unchanged") {
		t.Errorf("knbox after kubectl: %s", got)
	}
	if got := annotation(); got != fromKubectl {
		t.Errorf("knbox rewrote kubectl's annotation:\n%s\n%s", fromKubectl, got)
	}
	// knbox drops the label kubectl applied.
	data, _ = os.ReadFile(v2)
	if got := actions(applyString(t, c, v2, string(data))); !strings.HasSuffix(got, " configured") {
		t.Errorf("knbox v2: %s", got)
	}
	if l := getObject(t, c, "ksvc", "default", "hello").GetLabels(); l["tier"] != "" {
		t.Errorf("labels after knbox v2 = %v", l)
	}
	// kubectl reads knbox's annotation: applying v1 brings the label back
	// and leaves the annotation kubectl itself would write.
	kubectlApply(v1)
	if l := getObject(t, c, "ksvc", "default", "hello").GetLabels(); l["tier"] != "web" {
		t.Errorf("labels after kubectl v1 = %v", l)
	}
	if got := annotation(); got != fromKubectl {
		t.Errorf("annotations differ:\n%s\n%s", fromKubectl, got)
	}
}

func TestApplyCommandDirectoryAndStdin(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	dir := t.TempDir()
	for name, content := range map[string]string{
		"10-config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n---\n" +
			"apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  token: t\n",
		"20-service.json": mustJSON(t, yamlToMap(t, ksvc("hello", "", "World", ""))),
		"README.md":       "not a manifest",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := run(t, nil, "", "apply", "--kubeconfig", env.Kubeconfig, "-f", dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "configmap/settings created\nsecret/creds created\nservice.serving.knative.dev/hello created\n"
	if out != want {
		t.Errorf("apply -f dir:\n%s\nwant:\n%s", out, want)
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
      - image: ghcr.io/knative/helloworld-go:latest
`
	stdin := ksvc("first", "", "one", "") + "---\n" + bad + "---\n" + ksvc("last", "", "three", "") + "---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
	out, _, err = run(t, nil, stdin, "apply", "--kubeconfig", env.Kubeconfig, "-f", "-")
	if want := "service.serving.knative.dev/first created\nservice.serving.knative.dev/last created\n"; out != want {
		t.Errorf("apply -f -:\n%s\nwant:\n%s", out, want)
	}
	if err == nil {
		t.Fatal("apply with an invalid document: no error")
	}
	wantErr := `stdin: document 2 (line 14): Service.serving.knative.dev "bad" is invalid:
  spec.template.spec.containerConcurrency: Invalid value: expected 0 <= -1 <= 1000
stdin: document 4 (line 38): no matches for kind "Widget" in version "example.com/v1"`
	if err.Error() != wantErr {
		t.Errorf("error:\n%s\nwant:\n%s", err, wantErr)
	}
	c := newClient(t, env)
	getObject(t, c, "ksvc", "default", "first")
	getObject(t, c, "ksvc", "default", "last")

	// Nothing to apply.
	if _, _, err := run(t, nil, "# nothing\n", "apply", "--kubeconfig", env.Kubeconfig, "-f", "-"); err == nil || !strings.Contains(err.Error(), "no objects") {
		t.Errorf("empty: %v", err)
	}
	if _, _, err := run(t, nil, "", "apply", "--kubeconfig", env.Kubeconfig); err == nil {
		t.Error("no -f: no error")
	}
}

func yamlToMap(t *testing.T, s string) map[string]interface{} {
	t.Helper()
	var m map[string]interface{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// getEnv is a server with: namespace team-a; in default, Service hello
// (app=hello) and ConfigMap settings; in team-a, Service other (app=other).
func getEnv(t *testing.T) *apiservertest.Env {
	t.Helper()
	env := apiservertest.Start(t, "")
	c := newClient(t, env)
	applyString(t, c, "setup.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n---\n"+
		ksvc("hello", "", "World", "  labels:\n    app: hello\n")+"---\n"+
		ksvc("other", "team-a", "World", "  labels:\n    app: other\n")+"---\n"+
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n")
	return env
}

func TestGetCommand(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	kc := []string{"--kubeconfig", env.Kubeconfig}
	tests := []struct {
		name       string
		args       []string
		wantLines  []string // each a line of stdout, in order, as fields
		wantStderr string
		wantErr    string
	}{{
		name:      "table",
		args:      []string{"get", "ksvc"},
		wantLines: []string{"NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "hello *"},
	}, {
		name:      "wide",
		args:      []string{"get", "services.serving.knative.dev", "-o", "wide"},
		wantLines: []string{"NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "hello *"},
	}, {
		name:      "all namespaces",
		args:      []string{"get", "KSVC", "-A"},
		wantLines: []string{"NAMESPACE NAME URL LATESTCREATED LATESTREADY READY REASON AGE", "default hello *", "team-a other *"},
	}, {
		name:      "selector",
		args:      []string{"get", "ksvc", "-A", "-l", "app=other"},
		wantLines: []string{"NAMESPACE NAME *", "team-a other *"},
	}, {
		name:      "namespace",
		args:      []string{"get", "service", "-n", "team-a", "--no-headers"},
		wantLines: []string{"other *"},
	}, {
		name:      "several kinds",
		args:      []string{"get", "ksvc,cm"},
		wantLines: []string{"NAME *", "service.serving.knative.dev/hello *", "", "NAME DATA AGE", "configmap/settings 1 *"},
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
		name:    "no kind",
		args:    []string{"get"},
		wantErr: "name a resource type, e.g. `knbox get ksvc`; the server has: namespaces, secrets, configmaps, runtimeclasses, services, configurations, revisions, routes",
	}, {
		name:    "watch of a missing name",
		args:    []string{"get", "ksvc", "nope", "-w"},
		wantErr: `services.serving.knative.dev "nope" not found`,
	}, {
		name:    "watch of a missing name as yaml",
		args:    []string{"get", "ksvc", "nope", "-w", "-o", "yaml"},
		wantErr: `services.serving.knative.dev "nope" not found`,
	}, {
		name:      "name output",
		args:      []string{"get", "ksvc,configmap", "-o", "name"},
		wantLines: []string{"service.serving.knative.dev/hello", "configmap/settings"},
	}, {
		name:       "empty",
		args:       []string{"get", "rt", "-n", "nobody"},
		wantStderr: "No resources found in nobody namespace.\n",
	}, {
		name:       "empty, all namespaces",
		args:       []string{"get", "secrets", "-A"},
		wantStderr: "No resources found\n",
	}, {
		name:    "unknown kind",
		args:    []string{"get", "ksvcs"},
		wantErr: `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`,
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
		wantErr: `unknown output format "xml"; use one of: json, name, wide, yaml`,
	}, {
		name:    "names across namespaces",
		args:    []string{"get", "ksvc", "hello", "-A"},
		wantErr: "an object cannot be read by name across all namespaces (-A); give its namespace with -n",
	}}
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
			checkLines(t, out, tt.wantLines)
		})
	}
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
	kc := []string{"--kubeconfig", env.Kubeconfig}

	out, _, err := run(t, nil, "", append([]string{"get", "ksvc", "hello", "-o", "yaml"}, kc...)...)
	if err != nil {
		t.Fatal(err)
	}
	one := yamlToMap(t, out)
	if one["kind"] != "Service" || one["apiVersion"] != "serving.knative.dev/v1" || one["metadata"].(map[string]interface{})["name"] != "hello" {
		t.Errorf("-o yaml of one object:\n%s", out)
	}

	out, _, err = run(t, nil, "", append([]string{"get", "ksvc,cm", "-A", "-o", "json"}, kc...)...)
	if err != nil {
		t.Fatal(err)
	}
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
	if list.APIVersion != "v1" || list.Kind != "List" || strings.Join(names, " ") != "Service/default/hello Service/team-a/other ConfigMap/default/settings" {
		t.Errorf("-o json list: %s %s %v", list.APIVersion, list.Kind, names)
	}
	if !strings.HasPrefix(out, "{\n    \"apiVersion\": \"v1\",\n") {
		t.Errorf("-o json is not indented as kubectl does:\n%.80s", out)
	}

	// One name in a List when several kinds are asked for; an empty List.
	out, _, err = run(t, nil, "", append([]string{"get", "rev", "-n", "nobody", "-o", "yaml"}, kc...)...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"; out != want {
		t.Errorf("empty list:\n%s", out)
	}
	_, _, err = run(t, nil, "", append([]string{"get", "ksvc", "nope", "-o", "json"}, kc...)...)
	if err == nil || err.Error() != `services.serving.knative.dev "nope" not found` {
		t.Errorf("missing object: %v", err)
	}
}

func TestDeleteCommand(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	kc := []string{"--kubeconfig", env.Kubeconfig}
	out, _, err := run(t, nil, "", append([]string{"delete", "ksvc", "hello"}, kc...)...)
	if err != nil || out != "service.serving.knative.dev \"hello\" deleted\n" {
		t.Errorf("delete: %q %v", out, err)
	}
	_, _, err = run(t, nil, "", append([]string{"delete", "ksvc", "hello"}, kc...)...)
	if err == nil || err.Error() != `services.serving.knative.dev "hello" not found` || !apierrors.IsNotFound(err) {
		t.Errorf("delete again: %v", err)
	}
	out, _, err = run(t, nil, "", append([]string{"delete", "ksvc/other", "-n", "team-a"}, kc...)...)
	if err != nil || out != "service.serving.knative.dev \"other\" deleted\n" {
		t.Errorf("delete kind/name -n: %q %v", out, err)
	}
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gone\n"
	out, _, err = run(t, nil, manifest, append([]string{"delete", "-f", "-"}, kc...)...)
	if out != "configmap \"settings\" deleted\n" || err == nil || err.Error() != `stdin: document 2 (line 6): configmaps "gone" not found` {
		t.Errorf("delete -f: %q %v", out, err)
	}
	if _, _, err := run(t, nil, "", append([]string{"delete", "ksvc"}, kc...)...); err == nil || !strings.Contains(err.Error(), "name the services to delete") {
		t.Errorf("delete without a name: %v", err)
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

func TestGetWatch(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	c := newClient(t, env)
	for _, tt := range []struct {
		name   string
		args   []string
		first  string // in the output before the change
		object string // the ConfigMap created or labelled watch=yes
		later  string // in the output after it
	}{
		{"table", []string{"get", "cm", "-w"}, "settings", "watched", "watched"},
		{"name", []string{"get", "cm", "-w", "-o", "name", "-l", "watch=yes"}, "", "labelled", "configmap/labelled"},
		{"one object as yaml", []string{"get", "cm", "settings", "-w", "-o", "yaml"}, "name: settings", "settings", "watch: \"yes\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errOut syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- runTo(ctx, &out, &errOut, "", append(tt.args, "--kubeconfig", env.Kubeconfig)...)
			}()
			if tt.first != "" {
				eventually(t, func() bool { return strings.Contains(out.String(), tt.first) }, 10*time.Second, "the initial list")
			}
			applyString(t, c, "w.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+tt.object+"\n  labels:\n    watch: \"yes\"\n")
			eventually(t, func() bool { return strings.Contains(out.String(), tt.later) }, 10*time.Second, tt.later+" in the watch")
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("watch ended with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("watch did not end when its context did")
			}
			if tt.name == "table" && strings.Count(out.String(), "NAME") != 1 {
				t.Errorf("header printed more than once:\n%s", out.String())
			}
		})
	}
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

	// The other commands find the server through the data directory too.
	t.Setenv("KUBECONFIG", "")
	out, _, err = run(t, nil, "", "get", "ns", "--data-dir", dir, "-o", "name")
	if err != nil || !strings.Contains(out, "namespace/default") {
		t.Errorf("get via --data-dir: %v\n%s", err, out)
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := apiservertest.Start(t, dir)
	client := "client: " + version.Version + " (" + version.GitVersion() + ")\n"

	out, _, err := run(t, nil, "", "version", "--kubeconfig", env.Kubeconfig)
	if err != nil || out != client+"server: "+version.GitVersion()+"\n" {
		t.Errorf("version: %v\n%s", err, out)
	}
	empty := t.TempDir()
	out, _, err = run(t, nil, "", "version", "--kubeconfig", filepath.Join(empty, "kubeconfig"))
	if err != nil || !strings.HasPrefix(out, client+"server: unreachable (kubeconfig ") {
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
	if err != nil || !strings.HasPrefix(out, client+"server: unreachable (cannot reach the server at https://127.0.0.1:1: ") {
		t.Errorf("version of a server that is gone: %v\n%s", err, out)
	}
	_, _, err = run(t, nil, "", "get", "ksvc", "--kubeconfig", gone)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the server at https://127.0.0.1:1") {
		t.Errorf("get from a server that is gone: %v", err)
	}
	var he *humanError
	if !errors.As(err, &he) {
		t.Errorf("error %T is not human", err)
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, bytes.ReplaceAll(kc, []byte(apiservertest.Token), []byte("not-the-token")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, nil, "", "get", "ksvc", "--kubeconfig", p)
	if err == nil || !strings.Contains(err.Error(), "the server has asked for the client to provide credentials (is the token in the kubeconfig the server's?)") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("err = %v", err)
	}
}

// TestNoServerImports keeps the client off the server's packages.
func TestNoServerImports(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not in PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"apiserver", "store", "admission"} {
			if dep == "github.com/knbox/knbox/pkg/"+banned || strings.HasPrefix(dep, "github.com/knbox/knbox/pkg/"+banned+"/") {
				t.Errorf("package cli imports %s", dep)
			}
		}
	}
}
