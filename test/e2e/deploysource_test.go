package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestDeploySource: `knbox deploy NAME --source DIR --builder IMAGE` with a
// builder made here (imagepush: it wraps the prebuilt static binary DIR/app
// into an image and pushes it to $KNBOX_IMAGE) creates the deployer's
// ServiceAccount and RoleBinding, uploads DIR, follows the build and
// serves the pushed image by digest at the URL it prints; a failing
// builder fails the deploy with the step's message and the log's tail; a
// source over builds.maxUploadBytes gets the server's 413, explained.
func TestDeploySource(t *testing.T) {
	requireTool(t, "runc")
	reg := imagetest.StartRegistry(t)
	app := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	// The upload limit: the app's archive fits, the app and 2 MB of noise
	// do not.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(app)
	zw.Close()
	limit := gz.Len() + 1<<20
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("builds:\n  registries: [%q]\n  maxUploadBytes: %d\n", reg, limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("dana-token,dana,dana-uid\ncarl-token,carl,carl-uid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--config", cfg, "--token-auth-file", tokens)
	// The instances go before knbox does (cleanups run last first).
	t.Cleanup(func() {
		for _, ns := range []string{"default", "team-a"} {
			_, _ = k.run("", "delete", "ksvc", "--all", "-n", ns, "--timeout=50s")
			if out, err := k.run("", "wait", "--for=delete", "pod", "--all", "-n", ns, "--timeout=50s"); err != nil {
				t.Logf("pods of %s still there: %v\n%s", ns, err, out)
			}
		}
	})
	builder := imagetest.PushGoImage(t, reg, "builders/wrap:test", "github.com/knbox/knbox/test/images/imagepush",
		image.Config{Cmd: []string{"-env-file", "GREETING=/workspace/greeting"}})
	deploy := func(args ...string) (string, error) {
		return run(t, []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}, "", knboxBin, append([]string{"deploy"}, args...)...)
	}
	source := func(files map[string][]byte) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}

	{ // from source to URL
		dir := source(map[string][]byte{"app": app, "greeting": []byte("built from source\n"),
			".knboxignore": []byte("*.tmp\n"), "big.tmp": noise(t, 4<<20)})
		start := time.Now()
		out, err := deploy("hello", "--source", dir, "--builder", builder, "--timeout", "120s")
		t.Logf("knbox deploy --source (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			y, _ := k.run("", "get", "builds,ksvc", "-o", "yaml")
			t.Fatalf("knbox deploy --source: %v\n%s\n%s\n%s", err, out, y, k.srv.logs())
		}
		for _, want := range []string{
			"1 left out", // big.tmp: over the limit were it sent
			"ServiceAccount default/knbox-deployer created",
			"RoleBinding default/knbox-deployer-registry created",
			"Build default/hello-build-",
			"Uploaded the source",
			"succeeded (steps: build)",
			"pushed registry.knbox.local/default/hello@sha256:",
			"Creating Service default/hello",
			"http://hello.default.",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("knbox deploy --source printed no %q", want)
			}
		}
		img := k.must("", "get", "ksvc", "hello", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if !strings.HasPrefix(img, "registry.knbox.local/default/hello@sha256:") {
			t.Errorf("the Service runs %q, not the pushed image by digest", img)
		}
		e := &buildEnv{k: k}
		if env := e.serve(t, "hello"); env["GREETING"] != "built from source" {
			t.Errorf("the deployed image has GREETING %q", env["GREETING"])
		}
	}

	{ // tenants: the caller must hold the push rights deploy grants
		k.must("", "create", "namespace", "team-a")
		k.must("", "create", "rolebinding", "dana-admin", "--clusterrole=admin", "--user=dana", "-n", "team-a")
		// carl may make builds, ServiceAccounts and RoleBindings, not push.
		k.must("", "create", "role", "no-push", "--verb=get,list,watch,create,update,delete",
			"--resource=builds.build.knative.dev,builds.build.knative.dev/source,builds.build.knative.dev/log,serviceaccounts,rolebindings.rbac.authorization.k8s.io,services.serving.knative.dev", "-n", "team-a")
		k.must("", "create", "rolebinding", "carl-no-push", "--role=no-push", "--user=carl", "-n", "team-a")
		dir := source(map[string][]byte{"app": app, "greeting": []byte("team-a\n")})
		hint := "kubectl create rolebinding knbox-deployer-registry --clusterrole=knbox-registry-edit --serviceaccount=team-a:knbox-deployer -n team-a"
		out, err := deploy("web", "--source", dir, "--builder", builder, "--timeout", "120s", "--token", "carl-token", "-n", "team-a")
		t.Logf("carl's knbox deploy --source:\n%s", out)
		if err == nil || !strings.Contains(out, "attempting to grant RBAC permissions not currently held") ||
			!strings.Contains(out, "The registry refused the push of the ServiceAccount knbox-deployer") || strings.Count(out, hint) != 2 {
			t.Errorf("carl, who may not push, made the deployer push, or was not told: %v\n%s", err, out)
		}
		out, err = deploy("web", "--source", dir, "--builder", builder, "--timeout", "120s", "--token", "dana-token", "-n", "team-a")
		t.Logf("dana's knbox deploy --source:\n%s", out)
		if err != nil || !strings.Contains(out, "RoleBinding team-a/knbox-deployer-registry created") || !strings.Contains(out, "http://web.team-a.") {
			t.Errorf("dana (admin) could not deploy from source: %v\n%s", err, out)
		}
	}

	{ // a failing builder: no app in the source
		dir := source(map[string][]byte{"greeting": []byte("hi\n")})
		out, err := deploy("broken", "--source", dir, "--builder", builder, "--timeout", "120s")
		t.Logf("knbox deploy --source (failing):\n%s", out)
		if err == nil {
			t.Fatalf("a failing build deployed:\n%s", out)
		}
		for _, want := range []string{`step "build" failed`, "read the binary", "The build log's last lines", "BuildFailed"} {
			if !strings.Contains(out, want) {
				t.Errorf("a failing build's deploy printed no %q", want)
			}
		}
		if o, err := k.run("", "get", "ksvc", "broken"); err == nil {
			t.Errorf("a Service was made of a failed build:\n%s", o)
		}
	}

	{ // a source over builds.maxUploadBytes
		dir := source(map[string][]byte{"app": app, "noise": noise(t, 2<<20)})
		out, err := deploy("toobig", "--source", dir, "--builder", builder, "--timeout", "120s")
		t.Logf("knbox deploy --source (too large):\n%s", out)
		if err == nil || !strings.Contains(out, "too large for the server") || !strings.Contains(out, "builds.maxUploadBytes") {
			t.Errorf("an upload over the limit: %v\n%s", err, out)
		}
		// The Build that never got its source is gone.
		if left := k.must("", "get", "builds", "-l", "knbox.dev/deploy=toobig", "-o", "name"); strings.TrimSpace(left) != "" {
			t.Errorf("a Build without its source is left: %s", left)
		}
	}
}

// noise is n random (incompressible) bytes.
func noise(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
