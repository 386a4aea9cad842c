package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// The tests of this file cover what knbox's own get, describe, delete,
// wait and api-resources do beyond the cases cli_test.go shares with
// kubectl's command libraries, which they replaced.

func TestGetFlags(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	kc := []string{"--kubeconfig", env.Kubeconfig}
	dir := t.TempDir()
	mixed := filepath.Join(dir, "mixed.yaml")
	if err := os.WriteFile(mixed, []byte(cm("c1", "3")+"---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n---\n"+cm("c2", "1")), 0o644); err != nil {
		t.Fatal(err)
	}
	cols := filepath.Join(dir, "cols.txt")
	if err := os.WriteFile(cols, []byte("NAME NUM\n.metadata.name {.data.num}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runCommandCases(t, kc, []commandCase{{
		// (The Services' status columns are empty: no controller runs here.)
		name:      "show labels",
		args:      []string{"get", "cm", "settings", "--show-labels"},
		wantLines: []string{"NAME DATA AGE LABELS", "settings 1 *"},
	}, {
		name:      "label columns",
		args:      []string{"get", "ksvc", "-A", "-L", "app", "-o", "wide"},
		wantLines: []string{"NAMESPACE NAME URL LATESTCREATED LATESTREADY READY REASON AGE APP", "default hello *", "team-a other *"},
	}, {
		name:      "field selector",
		args:      []string{"get", "cm", "--field-selector", "metadata.name=c2", "--no-headers"},
		wantLines: []string{"c2 1 *"},
	}, {
		name:    "ignore not found",
		args:    []string{"get", "cm", "c1", "nope", "--ignore-not-found", "-o", "name"},
		wantOut: "configmap/c1\n",
	}, {
		name:      "kind names",
		args:      []string{"get", "Service.serving.knative.dev", "hello", "--no-headers", "--show-kind"},
		wantLines: []string{"service.serving.knative.dev/hello *"},
	}, {
		name:    "sorted by a number, names of several types",
		args:    []string{"get", "cm", "c3", "c1", "c2", "-o", "name", "--sort-by", "{.metadata.name}"},
		wantOut: "configmap/c1\nconfigmap/c2\nconfigmap/c3\n",
	}, {
		name:    "custom-columns file",
		args:    []string{"get", "cm", "c1", "c2", "-o", "custom-columns-file=" + cols, "--no-headers"},
		wantOut: "c1    3\nc2    1\n",
	}, {
		name:    "custom-columns with a missing value",
		args:    []string{"get", "cm", "c1", "-o", "custom-columns=NAME:.metadata.name,X:.data.nope"},
		wantOut: "NAME   X\nc1     <none>\n",
	}, {
		name:    "jsonpath as JSON",
		args:    []string{"get", "cm", "c1", "-o", "jsonpath-as-json={.data}"},
		wantOut: "[\n    {\n        \"num\": \"3\"\n    }\n]\n",
	}, {
		name:    "yaml list",
		args:    []string{"get", "cm", "-l", "nothing=here", "-o", "yaml"},
		wantOut: "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
	}, {
		name:    "-f with a document that is no kind of the server's",
		args:    []string{"get", "-f", mixed, "-o", "name"},
		wantOut: "configmap/c1\nconfigmap/c2\n",
		wantErr: mixed + `: document 2 (line 8): no matches for kind "Widget" in version "example.com/v1"`,
	}, {
		name:    "a kind and a name in TYPE/NAME form mixed",
		args:    []string{"get", "ksvc/hello", "cm"},
		wantErr: `"cm": give either TYPE NAME... or TYPE/NAME... arguments, not both`,
	}, {
		name:    "a name across namespaces",
		args:    []string{"get", "ksvc", "hello", "-A"},
		wantErr: "a named object is in one namespace: leave out -A (or use -n)",
	}, {
		name:    "a bad custom column",
		args:    []string{"get", "cm", "-o", "custom-columns=NAME"},
		wantErr: `custom-columns: "NAME" is no NAME:PATH column (e.g. NAME:.metadata.name; NAME without spaces)`,
	}, {
		name:    "a bad sort expression",
		args:    []string{"get", "cm", "--sort-by", "{.a"},
		wantErr: `--sort-by: "{.a" is not a field path: write it as a.b, .a.b, {a.b} or {.a.b}`,
	}, {
		name:    "values of different types",
		args:    []string{"get", "ksvc,cm", "-o", "name", "--sort-by", "{.metadata.generation}"},
		wantOut: "configmap/c1\nconfigmap/c2\nconfigmap/c3\nconfigmap/settings\nservice.serving.knative.dev/hello\n",
	}})
}

// TestGetWatchTable: -w prints the server's table, then a row per change
// without the header again; --watch-only prints only the changes.
func TestGetWatchTable(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	out, done, cancel := background(t, env, "get", "cm", "c1", "-w")
	only, onlyDone, onlyCancel := background(t, env, "get", "cm", "-w", "--watch-only", "-o", "name")
	eventually(t, func() bool { return strings.Contains(out.String(), "c1") }, 10*time.Second, "the first table")
	// The watches have started once a change made after them shows.
	changed := func() bool {
		return strings.Count(out.String(), "\n") > 2 && strings.Contains(only.String(), "configmap/c1")
	}
	for i := 0; !changed(); i++ {
		if i == 100 {
			t.Fatalf("the watches show no change:\n%s\n%s", out, only)
		}
		knbox(t, env, cm("c1", strconv.Itoa(10+i)), "apply", "-f", "-")
		// Up to a second for the change to show, then another change
		// (a watch that started after this one misses it).
		for deadline := time.Now().Add(time.Second); !changed() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A named object that does not exist is an error, as without -w.
	if _, _, err := run(t, nil, "", "get", "cm", "nope", "-w", "--kubeconfig", env.Kubeconfig); err == nil || err.Error() != `configmaps "nope" not found` {
		t.Errorf("get -w of a missing object: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "NAME") || strings.Count(out.String(), "NAME") != 1 {
		t.Errorf("the header is not printed once, first:\n%s", out)
	}
	if strings.Contains(out.String(), "settings") {
		t.Errorf("the watch of c1 shows another object:\n%s", out)
	}
	if strings.Contains(only.String(), "configmap/c2") {
		t.Errorf("--watch-only printed the list:\n%s", only)
	}
	cancel()
	onlyCancel()
	for _, ch := range []<-chan error{done, onlyDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("watch ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end with its context")
		}
	}
}

func TestDescribeEventsAndSecrets(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	settings := getObject(t, env, cmGVR, "default", "settings")
	ev := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]interface{}{"name": "settings.1", "namespace": "default"},
		"involvedObject": map[string]interface{}{
			"apiVersion": "v1", "kind": "ConfigMap", "name": "settings", "namespace": "default", "uid": string(settings.GetUID()),
		},
		"type": "Normal", "reason": "Checked", "message": "the settings\nwere read",
		"source":        map[string]interface{}{"component": "tester"},
		"count":         int64(3),
		"lastTimestamp": time.Now().UTC().Format(time.RFC3339),
	}}
	evGVR := schema.GroupVersionResource{Version: "v1", Resource: "events"}
	if _, err := dyn(t, env).Resource(evGVR).Namespace("default").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	knbox(t, env, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  token: sixteen-letters!\n", "apply", "-f", "-")

	for _, tt := range []struct {
		args    []string
		want    []string
		notWant []string
	}{
		{[]string{"describe", "cm", "settings"}, []string{"Events: TYPE REASON AGE FROM MESSAGE Normal Checked ", "s (x3) tester the settings were read"}, nil},
		{[]string{"describe", "cm", "settings", "--show-events=false"}, nil, []string{"Events:"}},
		{[]string{"describe", "cm", "c1"}, []string{"Events: <none>"}, nil},
		{[]string{"describe", "secret", "creds"}, []string{"Data: token: <16 bytes>"}, []string{"sixteen", "c2l4dGVlbi"}},
	} {
		out := knbox(t, env, "", tt.args...)
		fields := strings.Join(strings.Fields(out), " ")
		for _, w := range tt.want {
			if !strings.Contains(fields, w) {
				t.Errorf("knbox %s: no %q in\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(out, w) {
				t.Errorf("knbox %s: %q in\n%s", strings.Join(tt.args, " "), w, out)
			}
		}
	}
	// An Event of another object with the same name (another uid) is not shown.
	knbox(t, env, "", "delete", "cm", "settings")
	knbox(t, env, cm("settings", "1"), "apply", "-f", "-")
	if out := knbox(t, env, "", "describe", "cm", "settings"); strings.Contains(out, "Checked") {
		t.Errorf("the Event of the deleted object shows:\n%s", out)
	}
}

func TestDeleteFlags(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	ctx := context.Background()
	cms := dyn(t, env).Resource(cmGVR).Namespace("default")

	// --dry-run=server deletes nothing.
	if out := knbox(t, env, "", "delete", "cm", "c1", "--dry-run=server"); out != "configmap \"c1\" deleted (server dry run)\n" {
		t.Errorf("dry run: %q", out)
	}
	getObject(t, env, cmGVR, "default", "c1")
	if out := knbox(t, env, "", "delete", "cm/nope", "cm/c1", "--ignore-not-found", "-o", "name"); out != "configmap/c1\n" {
		t.Errorf("--ignore-not-found: %q", out)
	}
	// -l across namespaces, then --all.
	if out := knbox(t, env, "", "delete", "ksvc", "-l", "app", "-A", "--cascade=orphan"); out != "service.serving.knative.dev \"hello\" deleted\nservice.serving.knative.dev \"other\" deleted\n" {
		t.Errorf("delete -l -A: %q", out)
	}
	if out := knbox(t, env, "", "delete", "cm", "--all", "--wait=false"); out != "configmap \"c2\" deleted\nconfigmap \"c3\" deleted\nconfigmap \"settings\" deleted\n" {
		t.Errorf("delete --all: %q", out)
	}

	// --wait (the default) returns once the object is gone: here when its
	// finalizer is removed.
	knbox(t, env, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n", "apply", "-f", "-")
	out, done, _ := background(t, env, "delete", "cm", "held")
	eventually(t, func() bool {
		o, err := cms.Get(ctx, "held", metav1.GetOptions{})
		return err == nil && o.GetDeletionTimestamp() != nil
	}, 10*time.Second, "the deletion to start")
	select {
	case err := <-done:
		t.Fatalf("delete returned while the object is there: %v %s", err, out)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := cms.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || out.String() != "configmap \"held\" deleted\n" {
			t.Errorf("delete --wait: %v %q", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("delete --wait did not return when the object went")
	}
	if _, err := cms.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("held: %v", err)
	}

	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"delete", "cm", "x", "--cascade=maybe"}, "--cascade=maybe: want background, foreground or orphan"},
		{[]string{"delete", "cm", "x", "--dry-run=yes"}, "--dry-run=yes: want none, server or client"},
		{[]string{"delete", "cm", "x", "--all"}, "--all chooses every object of the type: name no objects with it"},
		{[]string{"delete", "cm", "x", "--now", "--grace-period=3"}, "give --now or --grace-period, not both"},
	} {
		_, _, err := run(t, nil, "", append(tt.args, "--kubeconfig", env.Kubeconfig)...)
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%v: error %v, want %s", tt.args, err, tt.wantErr)
		}
	}
}

func TestWaitMore(t *testing.T) {
	t.Parallel()
	env := getEnv(t)

	// A JSONPath without a value waits until the expression has one.
	out, done, _ := background(t, env, "wait", "ksvc", "-l", "app=hello", "--for=jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}", "--timeout=60s")
	setConditions(t, env, ksvcGVR, "hello", map[string]interface{}{"type": "Ready", "status": "False", "reason": "Failing"})
	select {
	case err := <-done:
		if err != nil || out.String() != "service.serving.knative.dev/hello condition met\n" {
			t.Errorf("wait for a JSONPath's value: %v\n%s", err, out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("wait did not return")
	}
	// Case does not matter in condition names and values.
	if out := knbox(t, env, "", "wait", "ksvc/hello", "--for=condition=ready=false", "--timeout=0"); out != "service.serving.knative.dev/hello condition met\n" {
		t.Errorf("condition=ready=false: %q", out)
	}
	// A status of an older generation does not count.
	knbox(t, env, ksvc("hello", "", "Moon", "  labels:\n    app: hello\n"), "apply", "-f", "-")
	if _, _, err := run(t, nil, "", "wait", "ksvc/hello", "--for=condition=Ready=False", "--timeout=0", "--kubeconfig", env.Kubeconfig); err == nil {
		t.Error("a condition of an older generation counts")
	}

	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"wait", "cm/c1", "--for=jsonpath={.data.num}=4", "--timeout=200ms"}, "timed out waiting for the condition on configmaps/c1"},
		{[]string{"wait", "cm/nope", "--for=condition=Ready", "--timeout=1s"}, `configmaps "nope" not found`},
		{[]string{"wait", "cm", "-l", "nothing=here", "--for=delete"}, "no matching resources found"},
		{[]string{"wait", "cm", "--for=delete"}, "name the objects to wait for: TYPE NAME..., TYPE/NAME..., or TYPE with -l SELECTOR or --all, or -f FILE"},
		{[]string{"wait", "cm/c1", "--for=jsonpath={.data}=x", "--timeout=0"}, "--for=jsonpath: {.data} gives an object or a list; give an expression that gives a string, a number or a boolean"},
		{[]string{"wait", "cm/c1"}, "give the condition to wait for: --for=condition=NAME[=VALUE], --for=delete or --for=jsonpath='{EXPR}'[=VALUE]"},
	} {
		_, _, err := run(t, nil, "", append(tt.args, "--kubeconfig", env.Kubeconfig)...)
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("%v: error %v, want %s", tt.args, err, tt.wantErr)
		}
	}
	// A missing object is gone already: nothing to print.
	if out := knbox(t, env, "", "wait", "cm/nope", "--for=delete"); out != "" {
		t.Errorf("wait for the deletion of a missing object: %q", out)
	}
}

func TestParseFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    waitFor
		wantErr bool
	}{
		{in: "delete", want: waitFor{deleted: true}},
		{in: "condition=Ready", want: waitFor{condition: "Ready", value: "True"}},
		{in: "condition=Ready=False", want: waitFor{condition: "Ready", value: "False"}},
		{in: "jsonpath={.status.url}=http://a.b", want: waitFor{expr: "{.status.url}", value: "http://a.b", hasValue: true}},
		{in: "jsonpath='{.a.b}'=x=y", want: waitFor{expr: "{.a.b}", value: "x=y", hasValue: true}},
		{in: "jsonpath=.a.b", want: waitFor{expr: "{.a.b}"}},
		{in: `jsonpath=.a[?(@.x=="y")].z=1`, want: waitFor{expr: `{.a[?(@.x=="y")].z}`, value: "1", hasValue: true}},
		{in: "ready", wantErr: true},
		{in: "condition=", wantErr: true},
		{in: "condition=Ready=", wantErr: true},
		{in: "jsonpath={.a", wantErr: true},
		{in: "jsonpath={.a}x", wantErr: true},
		{in: "jsonpath={.a}=", wantErr: true},
		{in: "jsonpath=", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := parseFor(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseFor(%q) error %v", tt.in, err)
			continue
		}
		got.path = nil
		if got != tt.want {
			t.Errorf("parseFor(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestAPIResourcesFlags(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	for _, tt := range []struct {
		args  []string
		lines []string
	}{
		{[]string{"--api-group", "serving.knative.dev", "--categories", "all", "-o", "wide", "--sort-by", "kind"}, []string{
			"NAME SHORTNAMES APIVERSION NAMESPACED KIND VERBS CATEGORIES",
			"configurations config,cfg serving.knative.dev/v1 true Configuration create,delete,deletecollection,get,list,patch,update,watch all,knative,serving",
			"domainmappings dm serving.knative.dev/v1beta1 true DomainMapping *",
			"revisions rev serving.knative.dev/v1 true Revision *",
			"routes rt serving.knative.dev/v1 true Route *",
			"services kservice,ksvc serving.knative.dev/v1 true Service *",
		}},
		{[]string{"--api-group", "serving.knative.dev", "-o", "name"}, []string{
			"configurations.serving.knative.dev", "domainmappings.serving.knative.dev", "revisions.serving.knative.dev",
			"routes.serving.knative.dev", "services.serving.knative.dev",
		}},
		{[]string{"--api-group", "", "--namespaced=false", "--verbs", "list", "--no-headers"}, []string{"namespaces ns v1 false Namespace"}},
	} {
		out := knbox(t, env, "", append([]string{"api-resources"}, tt.args...)...)
		checkLines(t, out, tt.lines)
	}
	_, _, err := run(t, nil, "", "api-resources", "--sort-by", "age", "--kubeconfig", env.Kubeconfig)
	if err == nil || err.Error() != "--sort-by age: want name or kind" {
		t.Errorf("bad --sort-by: %v", err)
	}
}
