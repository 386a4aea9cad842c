package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// buildUploadLimit is builds.maxUploadBytes in the tests.
const buildUploadLimit = 1 << 20

// buildEnv is one knbox serve whose builds reach a loopback registry, with
// the two step images in it: "fetch" (busybox with the runtime-info binary
// at /payload/app) and "push" (imagepush).
type buildEnv struct {
	k      *kubectlEnv
	cfg    string // the knbox config file
	reg    string
	fetch  string
	pusher string
}

// newBuildEnv starts it; relayed are more loopback addresses of the host
// that builds reach (as builds.registries).
func newBuildEnv(t *testing.T, relayed ...string) *buildEnv {
	t.Helper()
	requireTool(t, "runc")
	reg := imagetest.StartRegistry(t)
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	regs := fmt.Sprintf("%q", reg)
	for _, r := range relayed {
		regs += fmt.Sprintf(", %q", r)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("builds:\n  registries: [%s]\n  maxUploadBytes: %d\n", regs, buildUploadLimit)), 0o644); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--config", cfg)
	app := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	e := &buildEnv{k: k, reg: reg, cfg: cfg}
	e.fetch = imagetest.PushImage(t, reg, "steps/fetch:test", image.Config{Cmd: []string{"sh"}},
		append(imagetest.BusyboxFiles(t), imagetest.File{Path: "payload/app", Mode: 0o755, Body: app}))
	e.pusher = imagetest.PushGoImage(t, reg, "steps/push:test", "github.com/knbox/knbox/test/images/imagepush", image.Config{})
	return e
}

// steps is a build's steps: the first writes the app and a greeting to
// /workspace (or runs fetchScript instead), the second makes the image and
// pushes it as ref.
func (e *buildEnv) steps(indent int, ref, fetchScript string) string {
	if fetchScript == "" {
		fetchScript = "cp /payload/app /workspace/app && echo built by knbox step one > /workspace/greeting"
	}
	in := strings.Repeat(" ", indent)
	return fmt.Sprintf(`
%[1]s- name: fetch
%[1]s  image: %[2]s
%[1]s  command: ["sh", "-c", %[3]q]
%[1]s- name: push
%[1]s  image: %[4]s
%[1]s  args: ["-env-file", "GREETING=/workspace/greeting", %[5]q]`, in, e.fetch, fetchScript, e.pusher, ref)
}

// waitCond waits until kubectl's jsonpath of obj prints want.
func (e *buildEnv) waitCond(t *testing.T, obj, jsonpath, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := e.k.run("", "get", obj, "-o", "jsonpath="+jsonpath)
		if strings.TrimSpace(out) == want {
			return
		}
		if time.Now().After(deadline) {
			y, _ := e.k.run("", "get", "builds,revisions.v1.serving.knative.dev,ksvc", "-o", "yaml")
			t.Fatalf("%s %s: %q, want %q after %v\n%s\n%s", obj, jsonpath, out, want, timeout, y, e.k.srv.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serve GETs the Service's URL through the router and decodes
// runtime-info's answer.
func (e *buildEnv) serve(t *testing.T, svc string) map[string]string {
	t.Helper()
	u := strings.TrimSpace(e.k.must("", "get", "ksvc.v1.serving.knative.dev", svc, "-o", "jsonpath={.status.url}"))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.k.srv.httpAddr)
		}}}
	resp, err := client.Get(u + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, body)
	}
	var info struct {
		Env map[string]string `json:"env"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
	return info.Env
}

// gzipTar is a tar.gz archive of one file.
func gzipTar(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBuild: a v1alpha1 Service whose build has two steps (one writes to
// /workspace, the next makes an image of it and pushes it to a loopback
// registry) becomes Ready and serves that image; a failing step fails the
// Revision with the step's message; buildRef to an existing Build works;
// a build that never ends is stopped at its timeout; an uploaded source is
// unpacked into the workspace (over builds.maxUploadBytes: 413); a restart
// of knbox fails a running build cleanly.
func TestBuild(t *testing.T) {
	e := newBuildEnv(t)

	{ // inline build
		ref := e.reg + "/built/app:v1"
		e.k.must(fmt.Sprintf(`apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: built
spec:
  runLatest:
    configuration:
      build:
        apiVersion: build.knative.dev/v1alpha1
        kind: Build
        spec:
          timeout: 3m
          steps:%s
      revisionTemplate:
        spec:
          container:
            image: %s
`, e.steps(10, ref, ""), ref), "apply", "-f", "-")
		// The Revision waits for its Build, then runs what it pushed.
		e.waitCond(t, "build/built-00001", `{.status.conditions[?(@.type=="Succeeded")].status}`, "True", 3*time.Minute)
		e.waitCond(t, "ksvc.v1.serving.knative.dev/built", `{.status.conditions[?(@.type=="Ready")].status}`, "True", 2*time.Minute)
		e.waitCond(t, "revision.v1.serving.knative.dev/built-00001", `{.status.conditions[?(@.type=="BuildSucceeded")].status}`, "True", time.Second)
		if env := e.serve(t, "built"); env["GREETING"] != "built by knbox step one" {
			t.Errorf("the image the build pushed has GREETING %q", env["GREETING"])
		}
		// The Build's status and the steps' output.
		b := e.k.must("", "get", "build", "built-00001", "-o", "json")
		var build struct {
			Metadata struct {
				OwnerReferences []struct{ Kind, Name string } `json:"ownerReferences"`
			} `json:"metadata"`
			Status struct {
				StartTime, CompletionTime string
				StepsCompleted            []string `json:"stepsCompleted"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(b), &build); err != nil {
			t.Fatal(err)
		}
		if len(build.Metadata.OwnerReferences) != 1 || build.Metadata.OwnerReferences[0].Kind != "Revision" ||
			strings.Join(build.Status.StepsCompleted, ",") != "fetch,push" || build.Status.StartTime == "" || build.Status.CompletionTime == "" {
			t.Errorf("build: %s", b)
		}
		if logs := e.k.must("", "get", "--raw", "/apis/build.knative.dev/v1alpha1/namespaces/default/builds/built-00001/log"); !strings.Contains(logs, "pushed "+e.reg+"/built/app@sha256:") {
			t.Errorf("build log:\n%s", logs)
		}
		if out, err := run(t, []string{"KNBOX_DATA_DIR=" + e.k.srv.dir, "KUBECONFIG="}, "", knboxBin, "logs", "--build", "built-00001"); err != nil ||
			!strings.Contains(out, "[push] pushed "+e.reg+"/built/app@sha256:") {
			t.Errorf("knbox logs --build: %v\n%s", err, out)
		}
		// The v1alpha1 view shows the build; the v1 view keeps it in an
		// annotation.
		if out := e.k.must("", "get", "services.v1alpha1.serving.knative.dev", "built", "-o", "jsonpath={.spec.runLatest.configuration.build.spec.steps[1].name}"); out != "push" {
			t.Errorf("v1alpha1 build steps[1].name = %q", out)
		}
	}

	{ // failing step
		ref := e.reg + "/broken/app:v1"
		e.k.must(fmt.Sprintf(`apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: broken
spec:
  runLatest:
    configuration:
      build:
        steps:%s
      revisionTemplate:
        spec:
          container:
            image: %s
`, e.steps(8, ref, "echo some noise; printf 'compile error: main.go:3: undefined: x' >/dev/termination-log; exit 2"), ref), "apply", "-f", "-")
		e.waitCond(t, "revision.v1.serving.knative.dev/broken-00001", `{.status.conditions[?(@.type=="Ready")].status}`, "False", 3*time.Minute)
		msg := e.k.must("", "get", "revision.v1.serving.knative.dev/broken-00001", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`)
		if !strings.Contains(msg, "compile error: main.go:3: undefined: x") || !strings.Contains(msg, `step "fetch"`) {
			t.Errorf("Revision's Ready message %q does not carry the step's termination message", msg)
		}
		e.waitCond(t, "build/broken-00001", `{.status.conditions[?(@.type=="Succeeded")].reason}`, "BuildFailed", time.Second)
		e.waitCond(t, "build/broken-00001", `{.status.stepStates[0].terminated.exitCode}`, "2", time.Second)
		if out := e.k.must("", "get", "build/broken-00001", "-o", "jsonpath={.status.stepStates[1].waiting.reason}"); out == "" {
			t.Errorf("the second step ran or has no state")
		}
	}

	{ // buildRef
		ref := e.reg + "/shared/app:v1"
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: shared
spec:
  steps:%s
`, e.steps(2, ref, "")), "apply", "-f", "-")
		e.k.must(fmt.Sprintf(`apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: byref
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          buildRef:
            apiVersion: build.knative.dev/v1alpha1
            kind: Build
            name: shared
          container:
            image: %s
`, ref), "apply", "-f", "-")
		e.waitCond(t, "ksvc.v1.serving.knative.dev/byref", `{.status.conditions[?(@.type=="Ready")].status}`, "True", 3*time.Minute)
		if env := e.serve(t, "byref"); env["GREETING"] != "built by knbox step one" {
			t.Errorf("GREETING %q", env["GREETING"])
		}
		if out := e.k.must("", "get", "revisions.v1alpha1.serving.knative.dev", "byref-00001", "-o", "jsonpath={.spec.buildRef.name}"); out != "shared" {
			t.Errorf("v1alpha1 buildRef.name %q", out)
		}
	}

	{ // timeout
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: forever
spec:
  timeout: 5s
  steps:
  - name: sleep
    image: %s
    command: ["sh", "-c", "echo sleeping; exec sleep 3600"]
`, e.fetch), "apply", "-f", "-")
		e.waitCond(t, "build/forever", `{.status.conditions[?(@.type=="Succeeded")].reason}`, "BuildTimeout", 2*time.Minute)
		e.waitCond(t, "build/forever", `{.status.conditions[?(@.type=="Succeeded")].status}`, "False", time.Second)
		e.waitCond(t, "build/forever", `{.status.stepStates[0].terminated.reason}`, "BuildTimeout", time.Second)
	}

	{ // a build pushes to knbox's embedded registry with its ServiceAccount's token
		reg := e.k.srv.registryAddr
		e.k.must("", "create", "serviceaccount", "builder")
		e.k.must("", "create", "rolebinding", "builder-push", "--clusterrole=knbox-registry-edit", "--serviceaccount=default:builder")
		ref := reg + "/default/embedded:v1"
		e.k.must(fmt.Sprintf(`apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: embedded
spec:
  runLatest:
    configuration:
      build:
        serviceAccountName: builder
        steps:%s
      revisionTemplate:
        spec:
          container:
            image: %s
`, e.steps(8, ref, ""), ref), "apply", "-f", "-")
		e.waitCond(t, "ksvc.v1.serving.knative.dev/embedded", `{.status.conditions[?(@.type=="Ready")].status}`, "True", 3*time.Minute)
		if env := e.serve(t, "embedded"); env["GREETING"] != "built by knbox step one" {
			t.Errorf("GREETING %q", env["GREETING"])
		}
		// Without a role the push is refused, and the build says so.
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: unauthorized
spec:
  steps:%s
`, e.steps(2, reg+"/default/nope:v1", "")), "apply", "-f", "-")
		e.waitCond(t, "build/unauthorized", `{.status.conditions[?(@.type=="Succeeded")].status}`, "False", 2*time.Minute)
		if msg := e.k.must("", "get", "build/unauthorized", "-o", `jsonpath={.status.conditions[?(@.type=="Succeeded")].message}`); !strings.Contains(msg, `step "push"`) || !strings.Contains(strings.ToLower(msg), "denied") && !strings.Contains(msg, "403") && !strings.Contains(strings.ToUpper(msg), "UNAUTHORIZED") {
			t.Errorf("an unauthorized push: %q", msg)
		}
	}

	{ // an uploaded source
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: uploaded
spec:
  source:
    upload: {}
  steps:
  - name: check
    image: %s
    command: ["sh", "-c", "cat src/hello.txt; test \"$(cat /workspace/src/hello.txt)\" = 'hello from the upload'"]
`, e.fetch), "apply", "-f", "-")
		e.waitCond(t, "build/uploaded", `{.status.conditions[?(@.type=="Succeeded")].reason}`, "WaitingForSource", time.Minute)
		path := "/apis/build.knative.dev/v1alpha1/namespaces/default/builds/uploaded/source"
		put := func(body []byte) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return clientFor(t, e.k.srv.dir).RESTClient().Put().AbsPath(path).Body(body).Do(ctx).Error()
		}
		big := make([]byte, buildUploadLimit+1)
		if err := put(big); !apierrors.IsRequestEntityTooLargeError(err) {
			t.Errorf("an upload over builds.maxUploadBytes: %v, want 413", err)
		}
		if err := put(gzipTar(t, "src/hello.txt", "hello from the upload\n")); err != nil {
			t.Fatalf("upload: %v", err)
		}
		e.waitCond(t, "build/uploaded", `{.status.conditions[?(@.type=="Succeeded")].status}`, "True", 2*time.Minute)
		if err := put(gzipTar(t, "src/hello.txt", "again")); !apierrors.IsConflict(err) {
			t.Errorf("a second upload: %v, want 409", err)
		}
		if err := clientFor(t, e.k.srv.dir).RESTClient().Put().AbsPath("/apis/build.knative.dev/v1alpha1/namespaces/default/builds/forever/source").
			Body([]byte("x")).Do(context.Background()).Error(); !apierrors.IsBadRequest(err) {
			t.Errorf("an upload to a Build without source.upload: %v, want 400", err)
		}
		if logs := e.k.must("", "get", "--raw", "/apis/build.knative.dev/v1alpha1/namespaces/default/builds/uploaded/log"); !strings.Contains(logs, "hello from the upload") {
			t.Errorf("build log:\n%s", logs)
		}
	}

	{ // bad input
		out, err := e.k.run(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: bad
spec:
  timeout: 100h
  steps:
  - name: s
    image: x
    ports: [{containerPort: 80}]
`, "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "spec.timeout") || !strings.Contains(out, "spec.steps[0].ports") {
			t.Errorf("bad build: %v\n%s", err, out)
		}
	}

	{ // a restart of knbox fails a running build cleanly
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: interrupted
spec:
  steps:
  - name: sleep
    image: %s
    command: ["sh", "-c", "exec sleep 3600"]
`, e.fetch), "apply", "-f", "-")
		deadline := time.Now().Add(2 * time.Minute)
		var pod string
		for {
			out, _ := e.k.run("", "get", "build/interrupted", "-o", "jsonpath={.status.stepStates[0].running.startedAt} {.status.podName}")
			if f := strings.Fields(out); len(f) == 2 {
				pod = f[1]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("build/interrupted does not run: %q\n%s", out, e.k.srv.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
		podDir := filepath.Join(e.k.srv.dir, "instances", "instances", pod)
		if _, err := os.Stat(podDir); err != nil {
			t.Fatalf("the build's pod directory: %v", err)
		}
		srv := e.k.srv
		srv.kill()
		e.k.srv = startServerWith(t, srv.dir, srv.apiAddr, "--config", e.cfg)
		e.waitCond(t, "build/interrupted", `{.status.conditions[?(@.type=="Succeeded")].reason}`, "BuildInterrupted", 2*time.Minute)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if _, err := os.Stat(podDir); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the interrupted build's pod is still there: %s", podDir)
			}
		}
		// The Service built earlier still serves after the restart.
		if env := e.serve(t, "built"); env["GREETING"] != "built by knbox step one" {
			t.Errorf("after the restart GREETING %q", env["GREETING"])
		}
	}

	{ // a deleted Build's logs go with it
		logDir := filepath.Join(e.k.srv.dir, "instances", "logs", "default", "_build.uploaded")
		if _, err := os.Stat(logDir); err != nil {
			t.Fatalf("build logs: %v", err)
		}
		e.k.must("", "delete", "build", "uploaded")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if _, err := os.Stat(logDir); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a deleted Build's logs are still there: %s", logDir)
			}
		}
	}
}
