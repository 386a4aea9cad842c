package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// runcByStatus lists the containers runc holds in knbox's state root
// whose status is status ("running", "created").
func runcByStatus(t *testing.T, dir, status string) []string {
	t.Helper()
	root := filepath.Join(dir, "runtimes", "runc")
	out, err := exec.Command("runc", "--root", root, "list", "--format", "json").Output()
	if err != nil {
		t.Fatalf("runc list: %v", err)
	}
	var es []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &es); err != nil {
		t.Fatalf("runc list: %v: %s", err, out)
	}
	var ids []string
	for _, e := range es {
		if e.Status == status {
			ids = append(ids, e.ID)
		}
	}
	return ids
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
// container runs and the revision's prepared sandbox waits (created, not
// started); the container runs on (its shim outlives knbox), the restart
// adopts it (the same container, not a new one) and removes the prepared
// sandbox (its container, mounts, network namespace), serves again, and
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
	before := runcByStatus(t, dir, "running")
	if len(before) == 0 || mountsUnder(t, dir) == 0 || len(netnsOf(before)) == 0 {
		t.Fatalf("expected a running container with mounts and a namespace: containers %v, mounts %d, netns %v",
			before, mountsUnder(t, dir), netnsOf(before))
	}
	// The revision's prepared sandbox, made in the background.
	var spare []string
	for deadline := time.Now().Add(60 * time.Second); len(spare) == 0; time.Sleep(100 * time.Millisecond) {
		if spare = runcByStatus(t, dir, "created"); len(spare) == 0 && time.Now().After(deadline) {
			t.Fatalf("no prepared sandbox (a created container) within 60s: %v\n%s", runcContainers(t, dir), srv.logs())
		}
	}
	if len(netnsOf(spare)) != 1 {
		t.Fatalf("the prepared sandbox %v has no network namespace", spare)
	}

	srv.kill()
	if left := runcByStatus(t, dir, "running"); len(left) == 0 {
		t.Fatalf("the container did not outlive knbox: %v", left)
	}

	// Restart on the same data dir: the same container serves again.
	srv2 := startServer(t, dir, srv.apiAddr)
	k.srv = srv2
	deadline := time.Now().Add(120 * time.Second)
	for {
		cur := runcByStatus(t, dir, "running")
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
	if cur := runcByStatus(t, dir, "running"); strings.Join(cur, " ") != strings.Join(before, " ") {
		t.Errorf("containers %v after the adoption, before the kill %v", cur, before)
	}
	// The prepared sandbox of the killed knbox is gone, all of it (the
	// new knbox may prepare another, under another name).
	for _, id := range spare {
		if slices.Contains(runcContainers(t, dir), id) || len(netnsOf([]string{id})) != 0 || mountsUnder(t, filepath.Join(dir, "instances", "instances", id)) != 0 {
			t.Errorf("the prepared sandbox %s of the killed knbox is left: containers %v, netns %v", id, runcContainers(t, dir), netnsOf(spare))
		}
		if _, err := os.Stat(filepath.Join(dir, "instances", "instances", id)); !os.IsNotExist(err) {
			t.Errorf("the directory of the prepared sandbox %s: %v", id, err)
		}
	}

	// Deleting the Service stops everything: no container, mount or
	// namespace of it remains.
	after := runcContainers(t, dir)
	k.must("", "delete", "ksvc", "crash")
	deadline = time.Now().Add(120 * time.Second)
	for {
		c, m, ns := runcContainers(t, dir), mountsUnder(t, filepath.Join(dir, "instances")), netnsOf(append(append(before, after...), spare...))
		if len(c) == 0 && m == 0 && len(ns) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after delete: containers %v, mounts under instances %d, netns %v\n%s", c, m, ns, srv2.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
