package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kubectlEnv runs the real kubectl against a fresh knbox serve.
type kubectlEnv struct {
	t   *testing.T
	bin string
	env []string
	srv *server
}

func newKubectl(t *testing.T, serveArgs ...string) *kubectlEnv {
	bin := requireTool(t, "kubectl")
	dir := t.TempDir()
	srv := startServerWith(t, dir, "", serveArgs...)
	home := t.TempDir() // kubectl's discovery cache lives here
	return &kubectlEnv{t: t, bin: bin, srv: srv, env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + home}}
}

func (k *kubectlEnv) run(stdin string, args ...string) (string, error) {
	k.t.Helper()
	return run(k.t, k.env, stdin, k.bin, args...)
}

func (k *kubectlEnv) must(stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.run(stdin, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

const helloYAML = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    spec:
      containers:
      - image: 127.0.0.1:1/hello:v1
        env:
        - name: TARGET
          value: knbox
`

func TestKubectlApplyGetPatchDelete(t *testing.T) {
	k := newKubectl(t)

	out := k.must(helloYAML, "apply", "-f", "-")
	if !strings.Contains(out, "service.serving.knative.dev/hello created") {
		t.Errorf("apply: %s", out)
	}
	// Applying the same file again changes nothing the user owns: same
	// generation, same spec, same lastModifier. (kubectl may still say
	// "configured": for kinds it has no schema for it sends a JSON merge
	// patch whose container list differs from the defaulted one, exactly as
	// with Knative's CRDs on a cluster; and the controllers keep writing
	// status, so the resourceVersion moves on its own.)
	const userView = "jsonpath={.metadata.generation} {.spec} {.metadata.annotations.serving\\.knative\\.dev/lastModifier}"
	before := k.must("", "get", "ksvc", "hello", "-o", userView)
	k.must(helloYAML, "apply", "-f", "-")
	if after := k.must("", "get", "ksvc", "hello", "-o", userView); after != before {
		t.Errorf("re-apply of the same file changed the service:\n%s\n->\n%s", before, after)
	}
	// A changed file is a three-way merge patch.
	out = k.must(strings.Replace(helloYAML, "hello:v1", "hello:v2", 1), "apply", "-f", "-")
	if !strings.Contains(out, "service.serving.knative.dev/hello configured") {
		t.Errorf("apply change: %s", out)
	}
	// The control plane turns the Service into a Configuration, a
	// Revision of the latest template and a Route with a URL on the data
	// plane. (Which Revision name holds v2 depends on timing: when the
	// Service controller first runs after both applies, the Configuration
	// starts at v2 and hello-00001 has it, as on a cluster.)
	deadline := time.Now().Add(120 * time.Second)
	for {
		out := k.must("", "get", "ksvc,cfg,rev,rt", "-o", "name")
		url, _ := k.run("", "get", "ksvc", "hello", "-o", "jsonpath={.status.url}")
		latest, _ := k.run("", "get", "ksvc", "hello", "-o", "jsonpath={.status.latestCreatedRevisionName}")
		image := ""
		if latest != "" {
			image, _ = k.run("", "get", "rev", latest, "-o", "jsonpath={.spec.containers[0].image}")
		}
		if image == "127.0.0.1:1/hello:v2" && strings.Contains(out, "route.serving.knative.dev/hello") &&
			strings.HasPrefix(url, "http://hello.default.localhost:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("control plane did not converge:\n%s\nurl=%q", out, url)
		}
		time.Sleep(100 * time.Millisecond)
	}
	y := k.must("", "get", "ksvc", "hello", "-o", "yaml")
	for _, want := range []string{"image: 127.0.0.1:1/hello:v2", "generation: 2", "serving.knative.dev/creator: admin", "kubectl.kubernetes.io/last-applied-configuration"} {
		if !strings.Contains(y, want) {
			t.Errorf("get -o yaml lacks %q:\n%s", want, y)
		}
	}

	// Server-side table with Knative's columns.
	out = k.must("", "get", "ksvc")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want := []string{"NAME", "URL", "LATESTCREATED", "LATESTREADY", "READY", "REASON", "AGE"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get ksvc header %v, want %v", header, want)
	}
	if !strings.Contains(out, "hello") {
		t.Errorf("kubectl get ksvc: %s", out)
	}
	k.must("", "get", "ksvc,rev,rt,runtimeclass")
	out = k.must("", "get", "rev")
	if !strings.Contains(out, "No resources") && !strings.Contains(out, "CONFIG NAME") {
		t.Errorf("get rev: %s", out)
	}
	out = k.must("", "get", "ns")
	if !strings.Contains(out, "default") || !strings.Contains(out, "Active") {
		t.Errorf("get ns: %s", out)
	}

	// Patches: strategic (kubectl's default) is refused for a Knative kind
	// as for a custom resource on a cluster; merge and json work.
	if out, err := k.run("", "patch", "ksvc", "hello", "-p", `{"metadata":{"labels":{"tier":"web"}}}`); err == nil || !strings.Contains(out, "application/merge-patch+json") {
		t.Errorf("strategic patch of a ksvc: err=%v\n%s", err, out)
	}
	k.must("", "patch", "ksvc", "hello", "--type", "merge", "-p", `{"metadata":{"labels":{"tier":"web"}}}`)
	k.must("", "patch", "ksvc", "hello", "--type", "merge", "-p", `{"metadata":{"annotations":{"note":"x"}}}`)
	k.must("", "patch", "ksvc", "hello", "--type", "json", "-p", `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"127.0.0.1:1/hello:v3"}]`)
	out = k.must("", "get", "ksvc", "-l", "tier=web", "-o", "jsonpath={.items[0].spec.template.spec.containers[0].image} {.items[0].metadata.annotations.note} {.items[0].metadata.generation}")
	if out != "127.0.0.1:1/hello:v3 x 3" {
		t.Errorf("after patches: %q", out)
	}

	// Invalid input: kubectl prints the field and the reason, as for a cluster.
	bad := strings.Replace(helloYAML, "image: 127.0.0.1:1/hello:v1", "image: \"\"", 1)
	bad = strings.Replace(bad, "name: hello", "name: broken", 1)
	out, err := k.run(bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.template.spec.containers[0].image") || !strings.Contains(out, "is invalid") {
		t.Errorf("invalid apply: err=%v\n%s", err, out)
	}
	out, err = k.run(strings.Replace(helloYAML, "  template:", "  bogus: 1\n  template:", 1), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, `unknown field "spec.bogus"`) {
		t.Errorf("unknown field: err=%v\n%s", err, out)
	}

	// RuntimeClass, Secret and ConfigMap through kubectl too.
	k.must("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\nhandler: runsc\n", "apply", "-f", "-")
	out = k.must("", "get", "runtimeclass")
	if !strings.Contains(out, "gvisor") || !strings.Contains(out, "runsc") {
		t.Errorf("get runtimeclass: %s", out)
	}
	k.must("", "create", "secret", "generic", "creds", "--from-literal=user=u")
	k.must("", "create", "configmap", "cfg", "--from-literal=a=1")
	k.must("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg2\ndata:\n  a: \"1\"\n", "apply", "-f", "-")
	out = k.must("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg2\ndata:\n  a: \"2\"\n", "apply", "-f", "-")
	if !strings.Contains(out, "configured") {
		t.Errorf("configmap apply (strategic merge): %s", out)
	}

	out = k.must("", "delete", "ksvc", "hello")
	if !strings.Contains(out, `service.serving.knative.dev "hello" deleted`) {
		t.Errorf("delete: %s", out)
	}
	out, err = k.run("", "get", "ksvc", "hello")
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("get after delete: %v %s", err, out)
	}
}

func TestKubectlGetWatch(t *testing.T) {
	k := newKubectl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, "get", "ksvc", "-w")
	cmd.Env = append(os.Environ(), k.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGKILL) // our own child, by PID
		_ = cmd.Wait()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// kubectl has started its watch once it printed the empty list; then
	// create two services and expect a row for each.
	time.Sleep(0) // no sleep needed: rows for objects created later arrive by watch either way
	k.must(helloYAML, "apply", "-f", "-")
	k.must(strings.Replace(helloYAML, "name: hello", "name: second", 1), "apply", "-f", "-")
	seen := map[string]bool{}
	for !seen["hello"] || !seen["second"] {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl get -w ended early; saw %v", seen)
			}
			if f := strings.Fields(l); len(f) > 0 {
				seen[f[0]] = true
			}
		case <-ctx.Done():
			t.Fatalf("timed out; saw %v", seen)
		}
	}
}

// TestBuiltinRuntimeClasses: at start knbox probes its runtime handlers and
// registers a RuntimeClass for each that works here (runc and runsc are
// installed on every machine this runs on); process, which does not
// isolate, only when the config enables it (see TestOperatorPolicy).
func TestBuiltinRuntimeClasses(t *testing.T) {
	requireTool(t, "runc")
	requireTool(t, "runsc")
	k := newKubectl(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		out := k.must("", "get", "runtimeclass", "-o", "jsonpath={range .items[*]}{.metadata.name}={.handler} {end}")
		if strings.Contains(out, "runc=runc") && strings.Contains(out, "runsc=runsc") {
			if strings.Contains(out, "process") {
				t.Fatalf("runtime classes %q: process is registered without being enabled", out)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime classes after 90s: %q\n%s", out, k.srv.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
