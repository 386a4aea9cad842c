package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// mountsUnder counts the mounts whose mount point is below dir.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			n++
		}
	}
	return n
}

// runcContainers lists the containers runc holds in knbox's state root.
func runcContainers(t *testing.T, dir string) []string {
	t.Helper()
	root := filepath.Join(dir, "runtimes", "runc")
	out, err := exec.Command("runc", "--root", root, "list", "-q").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "no such file") {
		t.Fatalf("runc list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// netnsOf lists the names under knbox's network namespace root that match
// one of ids.
func netnsOf(ids []string) []string {
	var found []string
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join("/run/knbox/netns", id)); err == nil {
			found = append(found, id)
		}
	}
	return found
}

// TestKillNineLeavesNothingBehind: knbox is killed with SIGKILL while a
// container runs; the container runs on (its shim outlives knbox), the
// restart adopts it (the same container, not a new one), serves again, and
// once the Service is deleted nothing of it remains: no container, overlay
// mount or network namespace.
func TestKillNineLeavesNothingBehind(t *testing.T) {
	requireTool(t, "runc")
	requireTool(t, "kubectl")
	dir := t.TempDir()
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	srv := startServer(t, dir, "")
	k := &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}
	k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: crash\nspec:\n  template:\n    spec:\n      containers:\n      - image: %s/runtime-info:v1\n", reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/crash", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("not ready: %v\n%s", err, out)
	}
	before := runcContainers(t, dir)
	if len(before) == 0 || mountsUnder(t, dir) == 0 || len(netnsOf(before)) == 0 {
		t.Fatalf("expected a running container with mounts and a namespace: containers %v, mounts %d, netns %v",
			before, mountsUnder(t, dir), netnsOf(before))
	}

	srv.kill()
	if left := runcContainers(t, dir); len(left) == 0 {
		t.Fatalf("the container did not outlive knbox: %v", left)
	}

	// Restart on the same data dir: the same container serves again.
	srv2 := startServer(t, dir, srv.apiAddr)
	k.srv = srv2
	deadline := time.Now().Add(120 * time.Second)
	for {
		cur := runcContainers(t, dir)
		ready, _ := k.run("", "get", "ksvc", "crash", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
		if strings.Join(cur, " ") == strings.Join(before, " ") && ready == "True" && strings.Contains(srv2.logs(), "pod adopted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: containers %v (before the kill: %v), ready %q\n%s", cur, before, ready, srv2.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// It serves through the new knbox.
	k.must("", "wait", "ksvc/crash", "--for=condition=Ready", "--timeout=60s")
	if strings.Join(runcContainers(t, dir), " ") != strings.Join(before, " ") {
		t.Errorf("containers %v after the adoption, before the kill %v", runcContainers(t, dir), before)
	}

	// Deleting the Service stops everything: no container, mount or
	// namespace of it remains.
	after := runcContainers(t, dir)
	k.must("", "delete", "ksvc", "crash")
	deadline = time.Now().Add(120 * time.Second)
	for {
		c, m, ns := runcContainers(t, dir), mountsUnder(t, filepath.Join(dir, "instances")), netnsOf(append(before, after...))
		if len(c) == 0 && m == 0 && len(ns) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after delete: containers %v, mounts under instances %d, netns %v\n%s", c, m, ns, srv2.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
