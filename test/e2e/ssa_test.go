package e2e

import (
	"strings"
	"testing"
	"time"
)

const ssaCM = `apiVersion: v1
kind: ConfigMap
metadata:
  name: ssa
data:
  a: "1"
`

// awaitNextSecond waits until the wall clock enters a new second, so that a
// repeated write would carry a new managedFields time (seconds resolution).
func awaitNextSecond(t *testing.T) {
	t.Helper()
	start := time.Now().Unix()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Unix() == start {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not move")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKubectlExplain: kubectl explain prints the descriptions of Knative's
// schema, from OpenAPI v3 (its default) and v2.
func TestKubectlExplain(t *testing.T) {
	k := newKubectl(t)
	for _, args := range [][]string{
		{"explain", "ksvc.spec.template.spec.containers.image"},
		{"explain", "ksvc.spec.template.spec.containers.image", "--output=plaintext-openapiv2"},
	} {
		out := k.must("", args...)
		if !strings.Contains(out, "Container image name") || !strings.Contains(out, "serving.knative.dev") {
			t.Errorf("kubectl %s:\n%s", strings.Join(args, " "), out)
		}
	}
	out := k.must("", "explain", "configmap.data")
	if !strings.Contains(out, "Data contains the configuration data") {
		t.Errorf("kubectl explain configmap.data:\n%s", out)
	}
	out = k.must("", "explain", "ksvc.spec", "--recursive")
	if !strings.Contains(out, "traffic") || !strings.Contains(out, "containerConcurrency") {
		t.Errorf("kubectl explain ksvc.spec --recursive:\n%s", out)
	}
}

// TestKubectlServerSideApply: apply --server-side creates, a second apply
// changes nothing, another field manager conflicts until
// --force-conflicts; strategic merge patch is 415 on a ksvc and works on a
// ConfigMap; client-side apply keeps working.
func TestKubectlServerSideApply(t *testing.T) {
	k := newKubectl(t)

	out := k.must(helloYAML, "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "service.serving.knative.dev/hello serverside-applied") {
		t.Errorf("apply --server-side: %s", out)
	}
	// What kubectl's apply owns, and when it last changed it. (The
	// controllers write status meanwhile, so the Service's resourceVersion
	// moves on its own; the ConfigMap below shows the resourceVersion.)
	const owned = `jsonpath={.metadata.generation} {.metadata.managedFields[?(@.manager=="kubectl")].operation} {.metadata.managedFields[?(@.manager=="kubectl")].time} {.spec.template.spec.containers[0].image}`
	before := k.must("", "get", "ksvc", "hello", "-o", owned)
	if !strings.HasPrefix(before, "1 Apply ") {
		t.Fatalf("after apply --server-side: %q", before)
	}
	awaitNextSecond(t)
	k.must(helloYAML, "apply", "--server-side", "-f", "-")
	if after := k.must("", "get", "ksvc", "hello", "-o", owned); after != before {
		t.Errorf("second apply --server-side changed the service:\n%s\n->\n%s", before, after)
	}

	// Another manager changing kubectl's image conflicts, naming kubectl.
	v2 := strings.Replace(helloYAML, "hello:v1", "hello:v2", 1)
	out, err := k.run(v2, "apply", "--server-side", "--field-manager=deployer", "-f", "-")
	if err == nil || !strings.Contains(out, "conflict") || !strings.Contains(out, `"kubectl"`) {
		t.Errorf("conflicting apply: err=%v\n%s", err, out)
	}
	k.must(v2, "apply", "--server-side", "--field-manager=deployer", "--force-conflicts", "-f", "-")
	out = k.must("", "get", "ksvc", "hello", "-o", `jsonpath={.metadata.generation} {.spec.template.spec.containers[0].image} {.metadata.managedFields[?(@.manager=="deployer")].operation}`)
	if out != "2 127.0.0.1:1/hello:v2 Apply" {
		t.Errorf("after --force-conflicts: %q", out)
	}

	// Strategic merge patch: 415 on a Knative kind, as on a cluster.
	out, err = k.run("", "patch", "ksvc", "hello", "--type", "strategic", "-p", `{"metadata":{"labels":{"a":"b"}}}`)
	if err == nil || !strings.Contains(out, "application/merge-patch+json") {
		t.Errorf("strategic patch of a ksvc: err=%v\n%s", err, out)
	}

	// A ConfigMap: apply --server-side twice keeps the resourceVersion.
	k.must(ssaCM, "apply", "--server-side", "-f", "-")
	rv1 := k.must("", "get", "cm", "ssa", "-o", "jsonpath={.metadata.resourceVersion}")
	awaitNextSecond(t)
	k.must(ssaCM, "apply", "--server-side", "-f", "-")
	if rv2 := k.must("", "get", "cm", "ssa", "-o", "jsonpath={.metadata.resourceVersion}"); rv2 != rv1 {
		t.Errorf("second apply --server-side of a ConfigMap: resourceVersion %s -> %s", rv1, rv2)
	}
	// Strategic merge patch works on a ConfigMap.
	k.must("", "patch", "cm", "ssa", "-p", `{"data":{"b":"2"}}`)
	if out := k.must("", "get", "cm", "ssa", "-o", "jsonpath={.data.a}{.data.b}"); out != "12" {
		t.Errorf("strategic patch of a ConfigMap: %q", out)
	}
	// Client-side apply keeps working beside server-side apply.
	out = k.must(strings.Replace(ssaCM, "name: ssa", "name: csa", 1), "apply", "-f", "-")
	if !strings.Contains(out, "configmap/csa created") {
		t.Errorf("client-side apply: %s", out)
	}
	out = k.must(strings.Replace(strings.Replace(ssaCM, "name: ssa", "name: csa", 1), `"1"`, `"2"`, 1), "apply", "-f", "-")
	if !strings.Contains(out, "configmap/csa configured") {
		t.Errorf("client-side apply of a change: %s", out)
	}
	// An object made by client-side apply moves to server-side apply
	// without conflicts where kubectl's last-applied-configuration still
	// matches the live object (a ConfigMap). A Knative Service's container
	// list is atomic in its schema and defaulted by admission, so it no
	// longer matches: the move conflicts, as on a cluster, until forced.
	mig := strings.Replace(helloYAML, "name: hello", "name: mig", 1)
	k.must(mig, "apply", "-f", "-")
	if out, err := k.run(mig, "apply", "--server-side", "-f", "-"); err == nil || !strings.Contains(out, `"kubectl-client-side-apply"`) {
		t.Errorf("apply --server-side of a ksvc after client-side apply: err=%v\n%s", err, out)
	}
	k.must(mig, "apply", "--server-side", "--force-conflicts", "-f", "-")
	if out, err := k.run(strings.Replace(ssaCM, "name: ssa", "name: csa", 1), "apply", "--server-side", "-f", "-"); err != nil {
		t.Errorf("apply --server-side of a ConfigMap after client-side apply: %v\n%s", err, out)
	}
	// kubectl's client-side validation: an unknown field is refused.
	out, err = k.run(strings.Replace(ssaCM, "\ndata:", "\nbogus: 1\ndata:", 1), "apply", "--server-side", "-f", "-")
	if err == nil || !strings.Contains(out, "bogus") {
		t.Errorf("unknown field with apply --server-side: err=%v\n%s", err, out)
	}
}
