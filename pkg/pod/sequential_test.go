package pod

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/image"
)

// steps is a Sequential pod of busybox steps (name, script) sharing the
// emptyDir "workspace" at /workspace.
func (e *env) steps(id, handler, ref string, steps ...[2]string) Spec {
	s := e.spec(id, handler, ref)
	s.Sequential, s.Port = true, 0
	s.Containers, s.Images = nil, nil
	s.Volumes = []Volume{{Name: "workspace", EmptyDir: true}}
	for _, st := range steps {
		s.Containers = append(s.Containers, corev1.Container{Name: st[0], Image: ref,
			Command:      []string{"/bin/sh", "-c", st[1]},
			VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}})
		s.Images = append(s.Images, ref)
	}
	return s
}

func done(st Status) bool { return st.Done }

// TestSequential: the containers of a Sequential pod run one after another
// in one workspace; the first failure ends the pod with its termination
// message; nothing restarts; the pod is Done until Stop.
func TestSequential(t *testing.T) {
	const h = "runc"
	requireHandler(t, h)
	ref := busyboxImage(t)
	e := newEnv(t, []string{h})

	id := uniqueName("seq-ok")
	e.run(e.steps(id, h, ref,
		[2]string{"one", "echo first >/workspace/a; echo step one ran"},
		[2]string{"two", "test \"$(cat /workspace/a)\" = first && echo second >>/workspace/a"},
		[2]string{"three", "cat /workspace/a"}))
	st := e.waitStatus(id, 60*time.Second, "done", done)
	if !st.Succeeded || st.LastFailure != nil || st.Restarts != 0 || len(st.Containers) != 3 {
		t.Fatalf("status %+v (failure %+v), want succeeded", st, st.LastFailure)
	}
	for i, cs := range st.Containers {
		if cs.Terminated == nil || cs.Terminated.ExitCode != 0 || cs.Terminated.Reason != ReasonCompleted {
			t.Errorf("step %d: %+v, want Completed", i, cs)
		}
	}
	if l := e.logs(id); !strings.Contains(l, "[one] step one ran") || !strings.Contains(l, "[three] first\n") && !strings.Contains(l, "[three] first") {
		t.Errorf("logs:\n%s", l)
	}

	id = uniqueName("seq-fail")
	e.run(e.steps(id, h, ref,
		[2]string{"ok", "true"},
		[2]string{"bad", "printf 'tests failed' >/dev/termination-log; exit 7"},
		[2]string{"never", "echo never ran"}))
	st = e.waitStatus(id, 60*time.Second, "done", done)
	if st.Succeeded || st.LastFailure == nil || st.LastFailure.Container != "bad" || st.LastFailure.ExitCode != 7 || st.LastFailure.Message != "tests failed" {
		t.Fatalf("status %+v (failure %+v), want failed in step bad with its message", st, st.LastFailure)
	}
	if w := st.Containers[2].Waiting; w == nil {
		t.Errorf("step never: %+v, want still waiting", st.Containers[2])
	}
	if strings.Contains(e.logs(id), "never ran") {
		t.Errorf("a step after the failure ran:\n%s", e.logs(id))
	}

	// A seeded workspace: the archive's files are there for the first step.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "src/hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	archive := filepath.Join(t.TempDir(), "src.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	id = uniqueName("seq-seed")
	s := e.steps(id, h, ref, [2]string{"read", "test \"$(cat /workspace/src/hello.txt)\" = hello"})
	s.Volumes[0].Seed = &Seed{Path: archive, Limits: image.ArchiveLimits{What: "source", MaxBytes: 1 << 20, MaxFiles: 10}}
	e.run(s)
	if st := e.waitStatus(id, 60*time.Second, "done", done); !st.Succeeded {
		t.Errorf("seeded workspace: %+v (failure %+v)", st, st.LastFailure)
	}

	// Stop during a step that never ends: Done with ReasonStopped.
	id = uniqueName("seq-stop")
	e.run(e.steps(id, h, ref, [2]string{"forever", "echo sleeping; exec sleep 3600"}))
	e.waitStatus(id, 60*time.Second, "running", func(st Status) bool { return st.Containers[0].Running != nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.rt.Stop(ctx, id, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.rt.Status(id); ok {
		t.Errorf("the pod is still there after Stop")
	}
	if m, n, c := e.leftovers(id); m+n+c != 0 {
		t.Errorf("left behind: %d mounts, %d namespaces, %d containers", m, n, c)
	}
}
