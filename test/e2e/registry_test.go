package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestRegistryPushThenServe: go-containerregistry's remote.Write and
// crane.Push push an image to knbox's embedded registry with knbox tokens
// (Basic, any user name); without a token the push gets 401, and a user
// whose RBAC role is edit in team-a gets 403 in default, one whose role is
// view pulls and cannot push. A Service naming the pushed image by the
// registry's address becomes Ready and serves it, and so does one that
// knbox deploy makes naming it registry.knbox.local/...; a Service may not
// name another namespace's image its writer cannot pull.
func TestRegistryPushThenServe(t *testing.T) {
	requireTool(t, "runc")
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("alice-secret-token,alice,alice-uid\nvicky-secret-token,vicky,vicky-uid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--token-auth-file", tokens)
	admin, err := os.ReadFile(filepath.Join(k.srv.dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	// The instances go before knbox does (cleanups run last first), so
	// that stopping it on a busy machine has little left to stop.
	t.Cleanup(func() {
		for _, ns := range []string{"default", "team-a"} {
			_, _ = k.run("", "delete", "ksvc", "--all", "-n", ns, "--timeout=50s")
			if out, err := k.run("", "wait", "--for=delete", "pod", "--all", "-n", ns, "--timeout=50s"); err != nil {
				t.Logf("pods of %s still there: %v\n%s", ns, err, out)
			}
		}
	})
	adminAuth := &authn.Basic{Username: "whoever", Password: strings.TrimSpace(string(admin))}
	reg := k.srv.registryAddr

	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	img := imagetest.Build(t, image.Config{Entrypoint: []string{"/app"}}, append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin}))
	ref, err := name.ParseReference(reg + "/default/runtime-info:v1")
	if err != nil {
		t.Fatal(err)
	}
	status := func(err error) int {
		var te *transport.Error
		if !errors.As(err, &te) {
			t.Fatalf("want a registry error, got %v", err)
		}
		return te.StatusCode
	}
	if err := remote.Write(ref, img); status(err) != http.StatusUnauthorized {
		t.Fatalf("push without a token: %v, want 401", err)
	}
	k.must("", "create", "namespace", "team-a")
	k.must("", "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", "team-a")
	alice := &authn.Basic{Username: "alice", Password: "alice-secret-token"}
	if err := crane.Push(img, reg+"/default/runtime-info:v1", crane.WithAuth(alice), crane.Insecure); status(err) != http.StatusForbidden {
		t.Fatalf("alice's push to default: %v, want 403", err)
	}
	if err := crane.Push(img, reg+"/team-a/runtime-info:v1", crane.WithAuth(alice), crane.Insecure); err != nil {
		t.Fatalf("alice's push to team-a: %v", err)
	}
	// view pulls, and cannot push.
	k.must("", "create", "rolebinding", "vicky-view", "--clusterrole=view", "--user=vicky", "-n", "team-a")
	vicky := &authn.Basic{Username: "vicky", Password: "vicky-secret-token"}
	if _, err := crane.Pull(reg+"/team-a/runtime-info:v1", crane.WithAuth(vicky)); err != nil {
		t.Errorf("vicky's pull from team-a: %v", err)
	}
	if err := crane.Push(img, reg+"/team-a/other:v1", crane.WithAuth(vicky)); status(err) != http.StatusForbidden {
		t.Errorf("vicky's push to team-a: %v, want 403", err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(adminAuth)); err != nil {
		t.Fatalf("push: %v", err)
	}
	// The wrong digest and a manifest naming a missing blob are refused.
	put := func(method, path, body, contentType string) *http.Response {
		req, _ := http.NewRequest(method, "http://"+reg+path, strings.NewReader(body))
		req.SetBasicAuth("x", strings.TrimSpace(string(admin)))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
		return resp
	}
	if r := put("POST", "/v2/default/x/blobs/uploads/?digest=sha256:"+strings.Repeat("0", 64), "hello", ""); r.StatusCode != http.StatusBadRequest {
		t.Errorf("wrong digest: %d", r.StatusCode)
	}
	missing := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("1", 64) + `","size":2},"layers":[]}`
	if r := put("PUT", "/v2/default/x/manifests/v1", missing, "application/vnd.oci.image.manifest.v1+json"); r.StatusCode != http.StatusBadRequest {
		t.Errorf("manifest naming a missing blob: %d", r.StatusCode)
	}

	// By the registry's address here, by registry.knbox.local with knbox
	// deploy below: two instances, so that the machine has little to stop.
	for _, c := range []struct{ name, image string }{
		{"pushed", reg + "/default/runtime-info:v1"},
	} {
		k.must(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: `+c.name+`
spec:
  template:
    spec:
      containers:
      - image: `+c.image+`
`, "apply", "-f", "-")
		if out, err := k.run("", "wait", "ksvc/"+c.name, "--for=condition=Ready", "--timeout=120s"); err != nil {
			y, _ := k.run("", "get", "ksvc,rev", "-o", "yaml")
			t.Fatalf("%s not ready: %v\n%s\n%s", c.name, err, out, y)
		}
		client := &http.Client{Timeout: 30 * time.Second}
		req, _ := http.NewRequest("GET", "http://"+k.srv.httpAddr+"/", nil)
		req.Host = c.name + ".default.localhost"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), c.name) {
			t.Fatalf("%s answered %d: %.300s", c.name, resp.StatusCode, body)
		}
	}

	// alice may name her namespace's image, not default's, which she
	// cannot pull.
	svcIn := func(name, img string) string {
		return "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: " + name + "\n  namespace: team-a\nspec:\n  template:\n    spec:\n      containers:\n      - image: " + img + "\n"
	}
	if out, err := k.run(svcIn("own", "registry.knbox.local/team-a/runtime-info:v1"), "--token", "alice-secret-token", "apply", "--dry-run=server", "-f", "-"); err != nil {
		t.Errorf("alice's Service naming her image: %v\n%s", err, out)
	}
	out, err := k.run(svcIn("theirs", "registry.knbox.local/default/runtime-info:v1"), "--token", "alice-secret-token", "apply", "--dry-run=server", "-f", "-")
	if err == nil || !strings.Contains(out, "may not pull it") {
		t.Errorf("alice's Service naming default's image: %v\n%s", err, out)
	}

	// knbox deploy of the pushed image: progress, then the URL.
	out, err = run(t, []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}, "", knboxBin,
		"deploy", "deployed", "--image", "registry.knbox.local/default/runtime-info:v1", "--env", "GREETING=hi", "--timeout", "120s")
	if err != nil {
		t.Fatalf("knbox deploy: %v\n%s", err, out)
	}
	t.Logf("knbox deploy:\n%s", out)
	for _, want := range []string{"Creating Service default/deployed", "Revision deployed-00001 created", "image resolved to registry.knbox.local/default/runtime-info@sha256:", "http://deployed.default."} {
		if !strings.Contains(out, want) {
			t.Errorf("knbox deploy printed no %q:\n%s", want, out)
		}
	}
}
