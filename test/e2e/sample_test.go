package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSampleWorksOffline: what `make run` and the README do, with no
// registry anywhere: build the sample image from examples/helloworld
// (hack/sampleimage), load it, apply examples/hello.yaml as it is, and the
// Service answers "Hello knbox!" at its host.
func TestSampleWorksOffline(t *testing.T) {
	requireTool(t, "runc")
	k := newKubectl(t)
	archive := filepath.Join(t.TempDir(), "helloworld.tar")
	build := exec.Command("go", "run", "./hack/sampleimage", "-o", archive)
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/sampleimage: %v\n%s", err, out)
	}
	out, err := run(t, []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}, "", knboxBin, "image", "load", archive)
	if err != nil || !strings.Contains(out, "knbox.local/samples/helloworld-go") {
		t.Fatalf("image load: %v\n%s", err, out)
	}
	example, err := os.ReadFile("../../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k.must(string(example), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s"); err != nil {
		y, _ := k.run("", "get", "ksvc,rev", "-o", "yaml")
		t.Fatalf("not ready: %v\n%s\n%s", err, out, y)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+k.srv.httpAddr+"/", nil)
	req.Host = "hello.default.localhost"
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "Hello knbox!\n" {
		t.Errorf("GET hello.default.localhost: %d %q, want 200 %q", resp.StatusCode, body, "Hello knbox!\n")
	}
}
