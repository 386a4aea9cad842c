package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kubectlutil "k8s.io/kubectl/pkg/util"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// FuzzReadManifests: whatever -f holds, every document is an object with
// apiVersion and kind, an error naming the document, or a skipped
// non-object; what apply does next with an object does not fail.
func FuzzReadManifests(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"---\napiVersion: v1\nkind: Secret\n---\n--- # x\nkind: X\n",
		`{"apiVersion":"v1","kind":"ConfigMap"}{"apiVersion":"v1"}`,
		"{apiVersion: v1, kind: ConfigMap}",
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n- 1\n- {a: b}\n",
		"apiVersion: v1\nkind: ServiceList\nitems: 3\n",
		"- 1\n- 2\n",
		"a: &a [*a]\n",
		"apiAddr: 127.0.0.1:6443\nconfigMaps: {}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: 1}, name: [x]}\n",
		"\xff\xfe\x00",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs := ReadManifests("in.yaml", data)
		for i, d := range docs {
			if d.Source != "in.yaml" || d.Index < 1 {
				t.Fatalf("document %d: source %q index %d", i, d.Source, d.Index)
			}
			switch {
			case d.Skipped:
				if d.Object != nil || d.Err != nil {
					t.Fatalf("skipped document %d has an object or an error", i)
				}
				continue
			case d.Err != nil:
				if d.Object != nil {
					t.Fatalf("document %d has both an object and an error", i)
				}
				if !strings.Contains(d.Err.Error(), fmt.Sprintf("in.yaml: document %d", d.Index)) {
					t.Fatalf("error %q does not name document %d", d.Err, d.Index)
				}
				continue
			case d.Object == nil:
				t.Fatalf("document %d has neither an object nor an error", i)
			}
			b, err := json.Marshal(d.Object.Object)
			if err != nil {
				t.Fatalf("document %d does not encode: %v", i, err)
			}
			var back map[string]interface{}
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("document %d is not a JSON object: %v", i, err)
			}
			for _, k := range []string{"apiVersion", "kind"} {
				if s, ok := back[k].(string); !ok || s == "" {
					t.Fatalf("document %d: %s is %v", i, k, back[k])
				}
			}
			// What apply does with it next must not fail either.
			_ = d.Object.GetName()
			_ = d.Object.GetNamespace()
			_ = d.Object.GroupVersionKind()
			if _, err := kubectlutil.GetModifiedConfiguration(d.Object, true, unstructured.UnstructuredJSONScheme); err != nil {
				t.Fatalf("document %d: %v", i, err)
			}
		}
	})
}

// FuzzPrintFlags: get's -o (formats, jsonpath, custom-columns and
// go-template expressions) and --sort-by, through the command against a
// real server with three Services, either print or fail with an error;
// nothing panics and nothing ends the process.
func FuzzPrintFlags(f *testing.F) {
	for _, s := range [][2]string{
		{"jsonpath={.items[*].metadata.name}", ""},
		{`jsonpath={range .items[?(@.status.conditions[0].status=="True")]}{.status.url}{"\n"}{end}`, ".metadata.name"},
		{"jsonpath-as-json={..name}", "{.spec.template.spec.containers[0].env[0].value}"},
		{"custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type==\"Ready\")].status", ".metadata.labels"},
		{"custom-columns=:,::", "{.items}"},
		{`go-template={{range .items}}{{.metadata.name}} {{index .metadata.labels "app"}}{{end}}`, ""},
		{`go-template={{define "a"}}{{template "a"}}{{end}}{{template "a"}}`, ""},
		{"yaml", ".metadata.creationTimestamp"},
		{"json", "{.metadata.labels.app"},
		{"name", "metadata"},
		{"wide", ".spec.template"},
		{"", ""},
	} {
		f.Add(s[0], s[1])
	}
	env := apiservertest.Start(f, "")
	var services []string
	for _, name := range []string{"b", "a", "c"} {
		services = append(services, ksvc(name, "", name, "  labels: {app: "+name+"}\n"))
	}
	if _, _, err := run(nil, nil, strings.Join(services, "---\n"), "apply", "-f", "-", "--kubeconfig", env.Kubeconfig); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, output, sortBy string) {
		// The -file formats read a file the user names; not this test's.
		if strings.Contains(output, "file") {
			return
		}
		args := []string{"get", "ksvc", "-o", output, "--kubeconfig", env.Kubeconfig}
		if sortBy != "" {
			args = append(args, "--sort-by", sortBy)
		}
		_, _, _ = run(t, nil, "", args...)
	})
}

// FuzzSelectors: the other free-form flags and arguments (-l and
// --field-selector, wait's --for, resource type names) are refused with an
// error or accepted; nothing panics, and a "did you mean" costs little
// whatever the name's length.
func FuzzSelectors(f *testing.F) {
	for _, s := range []string{
		"app=hello,tier!=web", "app in (a,b),!x", "metadata.name=hello", "a b", "x==y,",
		"condition=Ready", "condition=Ready=False", "delete", "jsonpath={.status.url}=http://a", "jsonpath='{.status.conditions[0].status}'=True",
		"ksvc", "KSVC", "revison", "services.serving.knative.dev", "", "=", "\x00",
	} {
		f.Add(s)
	}
	kc := filepath.Join(f.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
`), 0o600); err != nil {
		f.Fatal(err)
	}
	known := []string{"services", "service", "ksvc", "kservice", "revisions", "revision", "rev", "routes", "route", "rt", "configurations", "configuration", "config", "cfg"}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = labels.Parse(s)
		_, _ = fields.ParseSelector(s)
		if hint := suggest(s, known); hint != "" && !strings.Contains(strings.Join(known, " "), hint) {
			t.Fatalf("suggest(%q) = %q, not a known name", s, hint)
		}
		// wait parses --for before it reaches the server.
		_, _, _ = run(t, nil, "", "wait", "ksvc/hello", "--for", s, "--timeout=0", "--kubeconfig", kc)
	})
}

// FuzzKubeconfig: whatever --kubeconfig holds, the connection loads it or
// fails with an error naming the problem, without a request (so without
// running an exec plugin it names).
func FuzzKubeconfig(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u, namespace: team-a}}]\n",
		"apiVersion: v1\nkind: Config\ncurrent-context: c\nusers: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}}}]\ncontexts: [{name: c, context: {cluster: nowhere, user: u}}]\n",
		"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"%zz\", certificate-authority-data: eA==}}]\n",
		"kind: Pod\n", "{", "", "\x00\xff",
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "c")
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, context string) {
		p := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", len(data)))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c := newConnection()
		c.flags.kubeconfig = p
		c.flags.context = context
		_, _, _ = c.ToRawKubeConfigLoader().Namespace()
		if rc, err := c.ToRESTConfig(); err == nil && rc == nil {
			t.Fatal("no configuration and no error")
		}
	})
}

// FuzzDeployFlags: the parsers of deploy's --env, --traffic and --tag
// never panic, and what they accept is within bounds.
func FuzzDeployFlags(f *testing.F) {
	for _, s := range []string{"A=1", "A-", "@latest=100", "web-00001=90", "@latest=candidate", "=", "-", "x=%", "a=b=c"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if set, _, err := parseEnv([]string{a, b}); err == nil {
			for k := range set {
				if k == "" {
					t.Fatalf("empty env name from %q %q", a, b)
				}
			}
		}
		if tt, err := parseTraffic([]string{a, b}); err == nil {
			var sum int64
			for _, x := range tt {
				sum += *x.Percent
			}
			if sum != 100 {
				t.Fatalf("traffic %q %q sums to %d", a, b, sum)
			}
		}
		if tags, err := parseTags([]string{a, b}); err == nil {
			for rev, tag := range tags {
				if rev == "" || tag == "" {
					t.Fatalf("tags %q %q: %v", a, b, tags)
				}
			}
		}
	})
}

// FuzzWaitFor: wait's --for parser refuses or accepts whatever it is
// given, and what it accepts is one well-formed condition.
func FuzzWaitFor(f *testing.F) {
	for _, s := range []string{
		"delete", "DELETE", "condition=Ready", "condition=Ready=False", "condition==", "condition=a=b=c",
		"jsonpath={.status.url}=http://a", "jsonpath='{.status.conditions[0].status}'=True", "jsonpath=.a.b",
		`jsonpath={.a[?(@.x=="}")].b}=1`, "jsonpath={{}}", "jsonpath='", "jsonpath={.a}=", "jsonpath=[(=", "ready", "",
	} {
		f.Add(s)
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": "a", "generation": int64(2)},
		"status": map[string]interface{}{"observedGeneration": int64(2), "url": "http://a",
			"conditions": []interface{}{map[string]interface{}{"type": "Ready", "status": "True"}, "junk"}},
	}}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := parseFor(s)
		if err != nil {
			if w != (waitFor{}) {
				t.Fatalf("parseFor(%q) failed with a condition: %+v", s, w)
			}
			return
		}
		kinds := 0
		if w.deleted {
			kinds++
		}
		if w.condition != "" {
			kinds++
			if w.value == "" {
				t.Fatalf("parseFor(%q): a condition without a value", s)
			}
		}
		if w.path != nil {
			kinds++
			if !strings.HasPrefix(w.expr, "{") || !strings.HasSuffix(w.expr, "}") || (w.hasValue && w.value == "") {
				t.Fatalf("parseFor(%q) = %+v", s, w)
			}
		}
		if kinds != 1 {
			t.Fatalf("parseFor(%q) = %+v: %d kinds of condition", s, w, kinds)
		}
		_, _ = w.met(obj)
	})
}

// FuzzSortBy: --sort-by either sorts, giving a permutation of the
// objects that is ordered by the values, or fails with an error.
func FuzzSortBy(f *testing.F) {
	for _, s := range []string{".metadata.name", "{.data.num}", ".metadata", "{.a", "{.items[*]}", "{range .x}{end}", "{.spec.n}", "{.status.t}", "", "{$}", "{@}"} {
		f.Add(s, "b", int64(3))
	}
	f.Fuzz(func(t *testing.T, expr, name string, n int64) {
		objs := []map[string]interface{}{
			{"metadata": map[string]interface{}{"name": name}, "data": map[string]interface{}{"num": "2"}, "spec": map[string]interface{}{"n": n}, "status": map[string]interface{}{"t": "2026-11-28T10:00:00Z"}},
			{"metadata": map[string]interface{}{"name": "a"}, "spec": map[string]interface{}{"n": int64(1)}},
			{"metadata": map[string]interface{}{"name": "c"}, "data": map[string]interface{}{"num": "10"}, "spec": map[string]interface{}{"n": 1.5}, "status": map[string]interface{}{"t": name}},
		}
		order, err := sortObjects(expr, objs)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, i := range order {
			if i < 0 || i >= len(objs) || seen[i] {
				t.Fatalf("sortObjects(%q) = %v: not a permutation", expr, order)
			}
			seen[i] = true
		}
		if len(order) != len(objs) {
			t.Fatalf("sortObjects(%q) = %v: not a permutation", expr, order)
		}
	})
}

// FuzzCustomColumns: -o custom-columns' spec is refused or prints a
// header and a line per object.
func FuzzCustomColumns(f *testing.F) {
	for _, s := range []string{"NAME:.metadata.name,N:.data.num", "A:{.a},B:b.c", "NAME", ":", "A:.x[?(@.y==1)]", "A:{.a", "A:.items[*].b,B:{range .x}{end}"} {
		f.Add(s)
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "a"}, "data": map[string]interface{}{"num": "1"},
	}}
	f.Fuzz(func(t *testing.T, spec string) {
		cols, err := parseColumns(spec, false)
		if err != nil {
			return
		}
		var b strings.Builder
		if err := (&columnsPrinter{columns: cols}).PrintObj(obj, &b); err != nil {
			return
		}
		if n := strings.Count(b.String(), "\n"); n != 2 {
			t.Fatalf("custom-columns=%s printed %d lines:\n%s", spec, n, b.String())
		}
	})
}
