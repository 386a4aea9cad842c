package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/ptr"
)

// TestDeleteServiceWithInstances deletes three Services at once, whose
// Revisions run instances that ignore SIGTERM (so each stops only when its
// grace period, the Revision's timeoutSeconds, ends), one of them at
// min-scale 3 (more than the Revision reconciler's workers, so that
// removals that held them would leave a Revision's Pods to the garbage
// collector), then at once creates a Service of the same name and an
// unrelated one: both become Ready while the old instances still stop
// (the Revision reconciler is not held by them, the name is free), the
// garbage collector's deletes of the old Pods make no replacements (no
// "instance deleted through the API" loop), the old Pods show
// Terminating, and in the end runc has no instance of the old Revisions
// left.
func TestDeleteServiceWithInstances(t *testing.T) {
	e := newContractEnv(t)
	const rc = "runc"
	// Long enough that the old instances outlive the new Services'
	// start on a loaded machine; the test waits for it once, at the end.
	const grace = 150
	stubborn := corev1.Container{Image: e.toolRef, Command: []string{"/bin/sh", "-c", "trap '' TERM; /app & wait"}}
	svc := contractService("del", rc, stubborn)
	svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "3"}
	svc.Spec.Template.Spec.TimeoutSeconds = ptr.Int64(grace)
	e.apply(t, svc)
	var holds []string
	for _, n := range []string{"hold1", "hold2"} {
		h := contractService(n, rc, stubborn)
		h.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
		h.Spec.Template.Spec.TimeoutSeconds = ptr.Int64(grace)
		e.apply(t, h)
		holds = append(holds, h.Name)
	}
	name := svc.Name
	e.waitReady(t, name)
	for _, h := range holds {
		e.waitReady(t, h)
	}
	rev := name + "-00001"
	oldUID := e.kubectl(t, "", "get", "rev", rev, "-o", "jsonpath={.metadata.uid}")
	instOf := func(sel string) []string {
		out, _ := e.kubectlRun(t, "", "get", "pods", "-l", sel, "-o", `jsonpath={range .items[*]}{.metadata.annotations.knbox\.dev/instance}{"\n"}{end}`)
		return strings.Fields(out)
	}
	oldSel := "serving.knative.dev/revisionUID=" + oldUID
	var old []string
	awaitOutput(t, "three running pods", 3*time.Minute, func() string {
		out, _ := e.kubectlRun(t, "", "get", "pods", "-l", oldSel, "--no-headers")
		return out
	}, func(s string) bool {
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[1] == "1/1" && f[2] == "Running" {
				n++
			}
		}
		return n == 3
	})
	old = instOf(oldSel)
	if len(old) != 3 {
		t.Fatalf("instances of %s: %v, want 3", rev, old)
	}
	for _, h := range holds {
		hold := instOf("serving.knative.dev/service=" + h)
		if len(hold) != 1 {
			t.Fatalf("instances of %s: %v, want 1", h, hold)
		}
		old = append(old, hold...)
	}
	isOld := map[string]bool{}
	for _, id := range old {
		isOld[id] = true
	}
	runcRoot := filepath.Join(e.k.srv.dir, "runtimes", "runc")
	runcIDs := func() []string {
		// runc list fails when a container's state goes while it lists
		// (an instance that ends): asked again, a few times.
		for i := 0; ; i++ {
			out, err := exec.Command("runc", "--root", runcRoot, "list", "-q").CombinedOutput()
			if err == nil {
				return strings.Fields(string(out))
			}
			if i == 10 {
				t.Fatalf("runc list: %v\n%s", err, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	oldLeft := func() int {
		n := 0
		for _, id := range runcIDs() {
			if isOld[id] {
				n++
			}
		}
		return n
	}
	if n := oldLeft(); n != len(old) {
		t.Fatalf("runc runs %d of the instances %v (%v)", n, old, runcIDs())
	}

	e.kubectl(t, "", append([]string{"delete", "ksvc"}, append(holds, name)...)...)
	// At once: the same name again (instances that stop at SIGTERM) and
	// an unrelated Service.
	again := contractService("del", rc, corev1.Container{Image: e.infoRef})
	e.apply(t, again)
	other := contractService("other", rc, corev1.Container{Image: e.infoRef})
	e.apply(t, other)
	e.waitReady(t, name)
	e.waitReady(t, other.Name)
	if n := oldLeft(); n == 0 {
		t.Errorf("the old instances were gone before the new Services were Ready: they waited for them (grace %ds)", grace)
	}
	newUID := e.kubectl(t, "", "get", "rev", rev, "-o", "jsonpath={.metadata.uid}")
	if newUID == oldUID {
		t.Fatalf("revision %s kept its UID %s", rev, oldUID)
	}
	e.mustGet(t, name, "/")
	e.mustGet(t, other.Name, "/")
	// The old Pods, still stopping, show Terminating.
	if out, _ := e.kubectlRun(t, "", "get", "pods", "-l", oldSel, "--no-headers"); oldLeft() > 0 && out != "" && !strings.Contains(out, "Terminating") {
		t.Errorf("pods of the deleted revision, still stopping:\n%s", out)
	}

	// Every old instance ends (at its grace period's SIGKILL), none is
	// replaced: runc runs nothing of the old Revision beyond the three.
	deadline := time.Now().Add(grace*time.Second + 4*time.Minute)
	for oldLeft() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instances of the deleted revision still in runc: %v", runcIDs())
		}
		time.Sleep(2 * time.Second)
	}
	if out, _ := e.kubectlRun(t, "", "get", "pods", "-l", oldSel, "--no-headers"); strings.TrimSpace(out) != "" {
		awaitOutput(t, "the old Pods gone", 2*time.Minute, func() string {
			out, _ := e.kubectlRun(t, "", "get", "pods", "-l", oldSel, "--no-headers")
			return out
		}, func(s string) bool { return strings.TrimSpace(s) == "" || strings.Contains(s, "No resources") })
	}
	logs := e.k.srv.logs()
	if n := strings.Count(logs, "instance deleted through the API"); n > 0 {
		t.Errorf("the garbage collector's deletes were replaced: %d \"instance deleted through the API\" lines", n)
	}
	e.mustGet(t, name, "/")
}
