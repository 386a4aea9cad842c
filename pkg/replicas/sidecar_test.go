package replicas

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// sidecarScript is the busybox sidecar of the multi-container tests: it
// writes /shared/x, answers "hello-sidecar" to every connection on port
// 9000, and exits 3 once /shared/crash exists (the test writes it from the
// host). It ends on SIGTERM (sh as pid 1 would ignore it otherwise); nc
// runs in the background so that the trap runs at once.
const sidecarScript = `echo from-sidecar > /shared/x
echo "sidecar env PORT=${PORT:-unset} K_REVISION=$K_REVISION"
trap 'exit 0' TERM
(while true; do echo hello-sidecar | nc -l -p 9000; done) &
while [ ! -e /shared/crash ]; do sleep 1 & wait $!; done
echo sidecar crashing >&2
exit 3`

// withSidecar makes rev's container the serving one (with its port) and
// adds the busybox sidecar; both mount the emptyDir "shared".
func withSidecar(sidecarRef string) func(*servingv1.Revision) {
	return func(r *servingv1.Revision) {
		c := &r.Spec.Containers[0]
		c.Name = "app"
		c.Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		mount := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
		// A subPath of the emptyDir that does not exist yet: knbox makes
		// it (as the kubelet does) and pins it.
		c.VolumeMounts = append(mount, corev1.VolumeMount{Name: "shared", MountPath: "/sub", SubPath: "made/by-knbox"})
		r.Spec.Containers = append([]corev1.Container{{
			Name:         "sidecar",
			Image:        sidecarRef,
			Command:      []string{"/bin/sh", "-c", sidecarScript},
			VolumeMounts: mount,
		}}, r.Spec.Containers...) // listed first: the port, not the order, picks the serving one
		r.Spec.Volumes = append(r.Spec.Volumes, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
}

// TestSidecar: a revision with a sidecar runs both containers in one
// instance: the serving container reaches the sidecar on 127.0.0.1 and
// sees what it wrote into a shared emptyDir; the sidecar has no PORT; both
// containers' output is in the log, tagged; the revision is ready when the
// serving container is; a sidecar crash is reported naming it and the
// instance restarts; Remove leaves nothing.
func TestSidecar(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref, bb := runtimeInfoImage(t), busyboxImage(t)
			e := newEnv(t, []string{h})
			name := uniqueName("sidecar-" + h)
			mounts0, _, _ := e.leftovers(name)
			rev := newRev(t, "ns1", name, h, ref, withSidecar(bb))
			e.resolveAndEnsure(rev)
			if sts := rev.Status.ContainerStatuses; len(sts) != 2 || sts[0].Name != "sidecar" || sts[1].Name != "app" || !strings.Contains(sts[0].ImageDigest, "@sha256:") {
				t.Fatalf("container statuses %+v, want one per container", sts)
			}
			e.waitState(rev, time.Minute, "ready", ready)
			eps := e.m.Endpoints("ns1", name)
			if len(eps) != 1 {
				t.Fatalf("endpoints %v", eps)
			}

			// The sidecar may still be starting its listener when the
			// serving container is ready: that is the contract.
			var dial struct {
				OK    bool   `json:"ok"`
				Line  string `json:"line"`
				Error string `json:"error"`
			}
			eventually(t, 30*time.Second, "the sidecar answers on 127.0.0.1:9000", func() bool {
				if err := json.Unmarshal(get(t, eps[0], "/dial?addr=127.0.0.1:9000&ms=2000"), &dial); err != nil {
					t.Fatal(err)
				}
				return dial.OK && dial.Line == "hello-sidecar"
			})
			var i info
			if err := json.Unmarshal(get(t, eps[0], "/?path=/shared/x&path=/sub&path=/shared/made/by-knbox"), &i); err != nil {
				t.Fatal(err)
			}
			if ok, _, _ := i.file("/shared/x"); !ok {
				t.Errorf("/shared/x, written by the sidecar, is not in the serving container's emptyDir")
			}
			for _, p := range []string{"/sub", "/shared/made/by-knbox"} {
				if ok, w, typ := i.file(p); !ok || !w || typ != "dir" {
					t.Errorf("%s: exists %v, writable %v, type %q; want the subPath directory knbox made", p, ok, w, typ)
				}
			}
			if i.Env["PORT"] != "8080" || i.Env["K_REVISION"] != name {
				t.Errorf("serving container env PORT=%q K_REVISION=%q", i.Env["PORT"], i.Env["K_REVISION"])
			}
			logs := func() string { return e.logsOf("ns1", name) }
			eventually(t, 10*time.Second, "the sidecar's output in the log", func() bool {
				return strings.Contains(logs(), "[sidecar] sidecar env PORT=unset K_REVISION="+name)
			})
			get(t, eps[0], "/log?msg=hello-from-app")
			eventually(t, 10*time.Second, "the serving container's output in the log, tagged", func() bool {
				return strings.Contains(logs(), "[app] hello-from-app")
			})

			// The sidecar crashes: the revision says which container.
			id := eps[0].ID
			crash := filepath.Join(e.dir, "pods", id, "volumes", "0", "crash")
			if err := os.WriteFile(crash, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			st := e.waitState(rev, time.Minute, "the sidecar's crash reported", func(st State) bool {
				return st.Failed && st.Reason == "ExitCode3"
			})
			if !strings.Contains(st.Message, "container sidecar:") || !strings.Contains(st.Message, "sidecar crashing") {
				t.Errorf("state %+v, want the message to name the sidecar and carry its last output", st)
			}
			if !strings.Contains(logs(), "knbox: container sidecar exited (exit code 3)") {
				t.Errorf("the log does not say that the sidecar exited")
			}
			// Once the cause is gone, the restarted instance is ready again.
			if err := os.Remove(crash); err != nil {
				t.Fatal(err)
			}
			e.waitState(rev, time.Minute, "ready again", func(st State) bool { return ready(st) && !st.Failed })

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go e.drainAll(ctx)
			if err := e.m.Remove(ctx, "ns1", name); err != nil {
				t.Fatal(err)
			}
			mounts, nss, cs := e.leftovers(name)
			if mounts != mounts0 || nss != 0 || cs != 0 {
				t.Errorf("after Remove: %d mounts (before %d), %d namespaces, %d containers", mounts, mounts0, nss, cs)
			}
			var left []string
			for _, cid := range []string{id, "sidecar_" + id} {
				d, _ := filepath.Glob("/sys/fs/cgroup/*/knbox/" + cid)
				left = append(left, d...)
			}
			if len(left) != 0 {
				t.Errorf("cgroups after Remove: %v", left)
			}
		})
	}
}

// TestSidecarRefusedByProcess: the process handler runs one container per
// instance, so a revision with a sidecar fails its resources, saying why.
func TestSidecarRefusedByProcess(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	rev := newRev(t, "ns1", uniqueName("sidecar-process"), "process", ref, withSidecar(ref))
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != ReasonMultiContainerUnsupported || !st.ResourcesFailed || !strings.Contains(st.Message, `"process"`) {
		t.Errorf("state %+v, want MultiContainerUnsupported naming the handler", st)
	}
}
