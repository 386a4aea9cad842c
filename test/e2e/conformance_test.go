package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Knative's own conformance tests, run unmodified from the module cache
// against a real `knbox serve` (issues 9 and 12). conformancePass lists
// the tests knbox passes, by package: one of them failing or skipping fails
// this test. docs/conformance.md lists the others, each with the reason it
// does not pass; keep the two in step.
var conformancePass = map[string][]string{
	"knative.dev/serving/test/conformance/api/v1": {
		"TestProjectedServiceAccountToken",
		"TestServiceAccountValidation",
	},
	"knative.dev/serving/test/conformance/runtime": {
		"TestLivenessWithFail",
	},
}

const (
	// conformanceRepo and conformanceTag are the --dockerrepo and --tag
	// given to Knative's tests: knative.dev/pkg/test.ImagePath names the
	// image of test_images/NAME conformanceRepo/NAME:conformanceTag, which
	// is what the harness loads into knbox.
	conformanceRepo = "knbox.local/knative-tests"
	conformanceTag  = "latest"
	// conformanceIngress is the Service knbox serves to describe its HTTP
	// listener, which Knative's test framework looks up (as it does
	// kourier-system/kourier) to reach Routes.
	conformanceIngressNS   = "knative-serving"
	conformanceIngressName = "knbox-ingress"
	// conformanceTimeout bounds the run of Knative's tests (build and run).
	conformanceTimeout = 5 * time.Minute
)

// conformanceImages are Knative's test images (main packages under
// knative.dev/serving/test/test_images) that the listed tests use, by the
// name ImagePath is given.
var conformanceImages = map[string]string{
	"hellovolume":   "hellovolume",
	"pizzaplanetv1": "pizzaplanetv1",
	"readiness":     "readiness",
	"runtime":       "runtime",
}

func TestKnativeConformance(t *testing.T) {
	requireTool(t, "runc")
	goBin := requireTool(t, "go")
	k := newKubectl(t)
	for _, ns := range []string{"serving-tests", "serving-tests-alt"} {
		k.must("", "create", "namespace", ns)
	}

	ctx, cancel := context.WithTimeout(context.Background(), conformanceTimeout+time.Minute)
	defer cancel()
	archive := filepath.Join(t.TempDir(), "images.tar")
	if err := buildConformanceImages(ctx, goBin, archive); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}, "", knboxBin, "image", "load", archive)
	if err != nil {
		t.Fatalf("knbox image load: %v\n%s", err, out)
	}

	var pkgs, names []string
	for pkg, tests := range conformancePass {
		pkgs = append(pkgs, pkg)
		names = append(names, tests...)
	}
	sort.Strings(pkgs)
	_, httpPort, _ := strings.Cut(k.srv.httpAddr, ":")
	_ = httpPort
	args := append([]string{"test", "-json", "-count=1", "-tags=e2e", "-timeout", conformanceTimeout.String(),
		"-run", "^(" + strings.Join(names, "|") + ")$"}, pkgs...)
	args = append(args, "-args",
		"--kubeconfig="+filepath.Join(k.srv.dir, "kubeconfig"),
		"--ingressendpoint=127.0.0.1",
		"--resolvabledomain=false",
		"--dockerrepo="+conformanceRepo,
		"--tag="+conformanceTag,
		"--disable-logstream",
		"--spooftimeout=2m",
	)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(),
		"GATEWAY_OVERRIDE="+conformanceIngressName,
		"GATEWAY_NAMESPACE_OVERRIDE="+conformanceIngressNS,
		"KUBECONFIG="+filepath.Join(k.srv.dir, "kubeconfig"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	results, outputs := readTestEvents(stdout)
	runErr := cmd.Wait()

	var table strings.Builder
	fmt.Fprintf(&table, "%-45s %s\n", "TEST", "RESULT")
	for _, pkg := range pkgs {
		for _, name := range conformancePass[pkg] {
			key := pkg + " " + name
			res := results[key]
			if res == "" {
				res = "not run"
			}
			fmt.Fprintf(&table, "%-45s %s\n", name, res)
			if res != "pass" {
				t.Errorf("%s: %s\n%s", name, res, outputs[key])
			}
		}
	}
	t.Logf("Knative conformance (knative.dev/serving v0.42.2) against knbox:\n%s", table.String())
	if runErr != nil && !t.Failed() {
		t.Errorf("go test of the conformance packages: %v\n%s", runErr, stderr.String())
	}
	if t.Failed() && stderr.Len() > 0 {
		t.Logf("go test stderr:\n%s", stderr.String())
	}
}

// testEvent is one line of `go test -json` (cmd/test2json).
type testEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// readTestEvents reads `go test -json` output to its end: the result of
// each top-level test ("pass", "fail", "skip") and its output, both keyed
// by "package test". A package that fails to build reports under "package ".
func readTestEvents(r io.Reader) (results, outputs map[string]string) {
	results, outputs = map[string]string{}, map[string]string{}
	out := map[string]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e testEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		key := e.Package + " " + top
		switch e.Action {
		case "output":
			b := out[key]
			if b == nil {
				b = &strings.Builder{}
				out[key] = b
			}
			if b.Len() < 256<<10 {
				b.WriteString(e.Output)
			}
		case "pass", "fail", "skip":
			if e.Test == top {
				results[key] = e.Action
			}
		}
	}
	for k, b := range out {
		outputs[k] = b.String()
	}
	return results, outputs
}

// buildConformanceImages builds the test images as static binaries, each
// into a one-layer image (the binary at /ko-app/NAME, as ko lays it out,
// run as ko's default nonroot user), and writes them all to one `docker
// save` archive tagged as ImagePath names them.
func buildConformanceImages(ctx context.Context, goBin, archive string) error {
	dir, err := os.MkdirTemp("", "knbox-conformance-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var pkgs []string
	for _, p := range conformanceImages {
		pkgs = append(pkgs, "knative.dev/serving/test/test_images/"+p)
	}
	sort.Strings(pkgs)
	build := exec.CommandContext(ctx, goBin, append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + "/"}, pkgs...)...)
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	imgs := map[name.Reference]v1.Image{}
	for ref, p := range conformanceImages {
		bin := filepath.Base(p)
		img, err := binaryImage(filepath.Join(dir, bin), "/ko-app/"+bin)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		tag, err := name.NewTag(conformanceRepo + "/" + ref + ":" + conformanceTag)
		if err != nil {
			return err
		}
		imgs[tag] = img
	}
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := tarball.MultiRefWrite(imgs, f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", archive, err)
	}
	return f.Close()
}

// binaryImage is a one-layer image holding the file bin at path, its
// entrypoint.
func binaryImage(bin, path string) (v1.Image, error) {
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, d := range []string{"ko-app/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{path}, User: "65532"}
	return mutate.ConfigFile(img, cf)
}
