package e2e

// Multi-container Revisions end to end: a Service whose serving container
// is runtime-info and whose sidecar is the busybox toolbox, under runc and
// runsc, through kubectl and the router.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// e2eSidecarScript writes /shared/x, answers "hello-sidecar" on port 9000,
// and exits 3 once /shared/crash exists (the test writes it from the
// host, into the emptyDir's directory).
const e2eSidecarScript = `echo from-sidecar > /shared/x
echo "sidecar started, PORT=${PORT:-unset}"
trap 'exit 0' TERM
(while true; do echo hello-sidecar | nc -l -p 9000; done) &
while [ ! -e /shared/crash ]; do sleep 1 & wait $!; done
echo sidecar crashing >&2
exit 3`

// TestSidecarService: a Service with a sidecar (listed first) becomes
// ready; its Revision has one containerStatus per container, by name, with
// its digest; the serving container reaches the sidecar on 127.0.0.1 and
// reads what it wrote into a shared emptyDir; `knbox logs` shows both
// containers' lines, tagged; a sidecar crash is reported on the Revision
// naming the sidecar, and the Service is ready again once it stops
// crashing.
func TestSidecarService(t *testing.T) {
	e := newContractEnv(t)
	mount := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	for _, rc := range contractRuntimeClasses {
		svc := contractService("sidecar", rc, corev1.Container{
			Name:         "sidecar",
			Image:        e.toolRef,
			Command:      []string{"/bin/sh", "-c", e2eSidecarScript},
			VolumeMounts: mount,
		}, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		svc.Spec.Template.Spec.Containers = append(svc.Spec.Template.Spec.Containers, corev1.Container{
			Name:         "app",
			Image:        e.infoRef,
			Ports:        []corev1.ContainerPort{{ContainerPort: 8080}},
			VolumeMounts: mount,
		})
		e.apply(t, svc)
	}
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			svc := "sidecar-" + rc
			rev := svc + "-00001"
			e.waitReady(t, svc)

			out := e.kubectl(t, "", "get", "rev", rev, "-o", "jsonpath={.status.containerStatuses}")
			var sts []struct {
				Name        string `json:"name"`
				ImageDigest string `json:"imageDigest"`
			}
			if err := json.Unmarshal([]byte(out), &sts); err != nil {
				t.Fatalf("containerStatuses %q: %v", out, err)
			}
			if len(sts) != 2 || sts[0].Name != "sidecar" || sts[1].Name != "app" ||
				!strings.Contains(sts[0].ImageDigest, "@sha256:") || !strings.Contains(sts[1].ImageDigest, "@sha256:") || sts[0].ImageDigest == sts[1].ImageDigest {
				t.Errorf("containerStatuses %s, want sidecar's and app's digests, in order", out)
			}

			var d egressDial
			for i := 0; ; i++ { // the sidecar's listener may come after the app is ready
				if err := json.Unmarshal(e.mustGet(t, svc, "/dial?addr=127.0.0.1:9000&ms=2000"), &d); err != nil {
					t.Fatal(err)
				}
				if d.OK && d.Line == "hello-sidecar" {
					break
				}
				if i == 30 {
					t.Fatalf("/dial 127.0.0.1:9000 from the serving container: %+v, want the sidecar's line", d)
				}
				time.Sleep(time.Second)
			}
			if f := e.info(t, svc, "/shared/x").file(t, "/shared/x"); !f.Exists {
				t.Errorf("/shared/x, written by the sidecar, is not in the serving container's emptyDir: %+v", f)
			}
			e.waitLogs(t, 1, "[sidecar] sidecar started, PORT=unset", svc)
			e.waitLogs(t, 1, "[app] runtime-info listening", svc)

			// The sidecar crashes; the Revision names it.
			// The Revision's prepared sandbox (its pod directory holds the
			// "prepared" marker) has an emptyDir too: leave it out.
			var dirs []string
			all, _ := filepath.Glob(filepath.Join(e.k.srv.dir, "instances", "instances", rev+"-*", "volumes", "0"))
			for _, d := range all {
				if _, err := os.Lstat(filepath.Join(d, "..", "..", "prepared")); os.IsNotExist(err) {
					dirs = append(dirs, d)
				}
			}
			if len(dirs) != 1 {
				t.Fatalf("the instance's emptyDir: %v", dirs)
			}
			crash := filepath.Join(dirs[0], "crash")
			if err := os.WriteFile(crash, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for found := false; !found; {
				for _, c := range e.conditions(t, "rev/"+rev) {
					if c.Type == "ContainerHealthy" && c.Status == "False" && c.Reason == "ExitCode3" {
						found = true
						if !strings.Contains(c.Message, "container sidecar:") || !strings.Contains(c.Message, "sidecar crashing") {
							t.Errorf("ContainerHealthy: %s, want the sidecar named with its last output", c)
						}
					}
				}
				if !found && time.Now().After(deadline) {
					t.Fatalf("no ExitCode3 on rev/%s after 2m: %s", rev, ctConditionsString(e.conditions(t, "rev/"+rev)))
				}
				if !found {
					time.Sleep(200 * time.Millisecond)
				}
			}
			e.waitLogs(t, 1, "knbox: container sidecar exited (exit code 3)", svc)
			if err := os.Remove(crash); err != nil {
				t.Fatal(err)
			}
			e.waitFor(t, "rev/"+rev, "condition=ContainerHealthy", 2*time.Minute)
			e.waitReady(t, svc)
		})
	}
}
