package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestImageLoadForOfflineUse: `knbox image load` imports a `docker save`
// archive, a Service then runs its tag with no registry anywhere, `knbox
// image ls` lists it and `knbox image prune` keeps it while a Revision
// runs it.
func TestImageLoadForOfflineUse(t *testing.T) {
	requireTool(t, "runc")
	k := newKubectl(t)
	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	files := append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin})
	archive := imagetest.DockerArchive(t, "127.0.0.1:1/offline/runtime-info:v1", image.Config{Entrypoint: []string{"/app"}}, files)
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}
	knbox := func(args ...string) string {
		t.Helper()
		out, err := run(t, env, "", knboxBin, args...)
		if err != nil {
			t.Fatalf("knbox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := knbox("image", "load", path); !strings.Contains(out, "127.0.0.1:1/offline/runtime-info") {
		t.Fatalf("image load: %s", out)
	}
	k.must(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: offline
spec:
  template:
    spec:
      containers:
      - image: 127.0.0.1:1/offline/runtime-info:v1
`, "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/offline", "--for=condition=Ready", "--timeout=120s"); err != nil {
		y, _ := k.run("", "get", "ksvc,rev", "-o", "yaml")
		t.Fatalf("not ready: %v\n%s\n%s", err, out, y)
	}
	ls := knbox("image", "ls")
	if !strings.Contains(ls, "127.0.0.1:1/offline/runtime-info") || !strings.Contains(ls, "sha256:") {
		t.Errorf("image ls:\n%s", ls)
	}
	knbox("image", "prune")
	if ls2 := knbox("image", "ls"); !bytes.Contains([]byte(ls2), []byte("127.0.0.1:1/offline/runtime-info")) {
		t.Errorf("prune removed an image a Revision runs:\n%s", ls2)
	}
}
