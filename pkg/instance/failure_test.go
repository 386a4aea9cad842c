package instance

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
	"github.com/knbox/knbox/pkg/runtime"
)

// busyboxImage returns the digest reference of a busybox image in the
// shared registry.
func busyboxImage(t testing.TB) string {
	t.Helper()
	runtimeInfoImage(t) // starts the registry
	busybox.once.Do(func() {
		busybox.ref = imagetest.PushBusyboxImage(t, images.host, "busybox:test")
	})
	if busybox.ref == "" {
		t.Fatal("no busybox image (an earlier test failed to build it)")
	}
	return busybox.ref
}

var busybox struct {
	once sync.Once
	ref  string
}

func failed(st controller.RevisionState) bool { return st.Failed }

func shell(script string) func(*servingv1.Revision) {
	return func(r *servingv1.Revision) {
		r.Spec.Containers[0].Command = []string{"/bin/sh", "-c", script}
	}
}

// TestImagePullFailure: a digest the registry does not have fails the
// revision with ImagePullBackOff and the registry's message, and is retried.
func TestImagePullFailure(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	repo, _, _ := strings.Cut(ref, "@")
	missing := repo + "@sha256:" + strings.Repeat("0", 64)
	rev := newRev(t, "ns1", uniqueName("pull"), "process", missing)
	rev.Status.ContainerStatuses = []servingv1.ContainerStatus{{ImageDigest: missing}}
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != ReasonImagePullBackOff || st.ResourcesFailed || !strings.Contains(st.Message, missing) || !strings.Contains(st.Message, "MANIFEST_UNKNOWN") {
		t.Errorf("state %+v, want ImagePullBackOff naming the image and the registry's error", st)
	}
}

// TestUnknownHandler: a RuntimeClass whose handler this host lacks fails
// the revision's resources, naming the handler; an unknown RuntimeClass
// too.
func TestUnknownHandler(t *testing.T) {
	for _, tc := range []struct {
		class, reason, want string
	}{
		{"kata", ReasonRuntimeHandlerNotFound, `runtime handler "kata-qemu"`},
		{"nope", ReasonRuntimeClassNotFound, `RuntimeClass "nope" does not exist`},
	} {
		t.Run(tc.class, func(t *testing.T) {
			m, err := New(Options{
				Images:   mustStore(t),
				Handlers: map[string]runtime.Handler{"process": runtime.NewProcess(t.TempDir())},
				StateDir: t.TempDir(),
				RuntimeClassHandler: func(name string) (string, bool) {
					if name == "kata" {
						return "kata-qemu", true
					}
					return "", false
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			rev := newRev(t, "ns1", "unknown", tc.class, "example.com/app@sha256:"+strings.Repeat("a", 64))
			st, err := m.Ensure(context.Background(), rev)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Failed || !st.ResourcesFailed || st.Reason != tc.reason || !strings.Contains(st.Message, tc.want) || st.Desired != 0 {
				t.Errorf("state %+v, want resources failed %s with %q", st, tc.reason, tc.want)
			}
		})
	}
}

// TestCrashReportsExitCodeAndMessage: a container that exits before it was
// ever ready fails the revision with ExitCode<N> and its termination
// message (the termination log where the runtime provides it, else the
// last lines of its output), and is restarted with backoff.
func TestCrashReportsExitCodeAndMessage(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})

			name := uniqueName("crash-" + h)
			rev := newRev(t, "ns1", name, h, ref, shell("echo starting; echo one last line; exit 3"))
			e.resolveAndEnsure(rev)
			st := e.waitState(rev, 30*time.Second, "failed", failed)
			if st.Reason != "ExitCode3" || st.Message != "Container failed with: starting\none last line" || st.Ready {
				t.Errorf("state %+v, want ExitCode3 with the last log lines", st)
			}

			if h != "process" { // the process handler provides no /dev/termination-log
				name := uniqueName("term-" + h)
				rev := newRev(t, "ns1", name, h, ref, shell("echo noise; printf 'disk full' >/dev/termination-log; exit 4"))
				e.resolveAndEnsure(rev)
				st := e.waitState(rev, 30*time.Second, "failed", failed)
				if st.Reason != "ExitCode4" || st.Message != "Container failed with: disk full" {
					t.Errorf("state %+v, want ExitCode4 with the termination log", st)
				}
			}

			// Backoff: 200ms, 400ms, 800ms, 1.6s, ... between starts, so
			// in 2.5s after the first failure at most 5 starts.
			var b bytes.Buffer
			time.Sleep(2500 * time.Millisecond)
			if err := e.m.Logs("ns1", name, false, time.Time{}, &b); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(b.String(), "starting"); n < 2 || n > 5 {
				t.Errorf("%d starts in 2.5s, want 2 to 5 (exponential backoff from 200ms):\n%s", n, b.String())
			}
		})
	}
}

// TestBackoff doubles from 200ms up to 10s.
func TestBackoff(t *testing.T) {
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := backoff(1000); got != backoffCap {
		t.Errorf("backoff(1000) = %v", got)
	}
}

// TestStartFailures: what keeps a container from being created fails the
// revision with the kubelet's reasons: a missing Secret is a
// CreateContainerConfigError, an entrypoint the runtime cannot run a
// RunContainerError that names the handler and says why.
func TestStartFailures(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})

			rev := newRev(t, "ns1", uniqueName("secret-"+h), h, ref, func(r *servingv1.Revision) {
				r.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k"}}}}
			})
			e.resolveAndEnsure(rev)
			st := e.waitState(rev, 30*time.Second, "failed", failed)
			if st.Reason != ReasonCreateContainerConfig || !strings.Contains(st.Message, `secret "absent"`) {
				t.Errorf("state %+v, want CreateContainerConfigError naming the secret", st)
			}

			rev = newRev(t, "ns1", uniqueName("noexec-"+h), h, ref, func(r *servingv1.Revision) {
				r.Spec.Containers[0].Command = []string{"/no/such/binary"}
			})
			e.resolveAndEnsure(rev)
			st = e.waitState(rev, 30*time.Second, "failed", failed)
			if h == "runsc" {
				// runsc starts its sandbox and fails inside it: the
				// container exits.
				if !strings.HasPrefix(st.Reason, "ExitCode") || !strings.Contains(st.Message, "/no/such/binary") {
					t.Errorf("state %+v, want an exit naming the binary", st)
				}
				return
			}
			if st.Reason != ReasonRunContainer || !strings.HasPrefix(st.Message, h+": ") || !strings.Contains(st.Message, "/no/such/binary") {
				t.Errorf("state %+v, want RunContainerError naming %s and the binary", st, h)
			}
			// It is retried: a second failure reports the same (no
			// leftover container in the way).
			time.Sleep(700 * time.Millisecond)
			st = e.waitState(rev, 30*time.Second, "failed", failed)
			if strings.Contains(st.Message, "exists") {
				t.Errorf("retry: %+v", st)
			}
		})
	}
}

// TestProgressDeadline: a revision that never becomes ready fails with
// ProgressDeadlineExceeded and its instances are stopped; Activate tries
// again.
func TestProgressDeadline(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"runc"}, func(o *Options) { o.ProgressDeadline = 2 * time.Second })
	name := uniqueName("deadline")
	rev := newRev(t, "ns1", name, "runc", ref, shell("sleep 3600"))
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != ReasonProgressDeadlineExceeded || !strings.Contains(st.Message, "2s") {
		t.Errorf("state %+v, want ProgressDeadlineExceeded", st)
	}
	e.waitState(rev, 30*time.Second, "instances stopped", func(st controller.RevisionState) bool { return !st.Active && st.Desired == 0 })
	eventually(t, 30*time.Second, "nothing left", func() bool {
		m, n, c := e.leftovers(name)
		return m == 0 && n == 0 && c == 0
	})

	e.m.Activate("ns1", name)
	st = e.waitState(rev, 30*time.Second, "activated", func(st controller.RevisionState) bool { return st.Active })
	if st.Failed || st.Desired != 1 {
		t.Errorf("after Activate: %+v, want a new attempt", st)
	}
	st = e.waitState(rev, 30*time.Second, "failed again", failed)
	if st.Reason != ReasonProgressDeadlineExceeded {
		t.Errorf("state %+v", st)
	}
}

func mustStore(t testing.TB) *image.Store {
	t.Helper()
	s, err := image.Open(image.Options{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOOMKilled: a container over its memory limit is killed, and the
// revision says so. Under runsc the limit (64Mi, which leaves room for the
// sandbox itself) confines the whole sandbox, which is what gets killed.
func TestOOMKilled(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})
			rev := newRev(t, "ns1", uniqueName("oom"), h, ref, shell("dd if=/dev/zero of=/dev/null bs=200M count=1"), func(r *servingv1.Revision) {
				r.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
			})
			e.resolveAndEnsure(rev)
			st := e.waitState(rev, 30*time.Second, "failed", failed)
			if st.Reason != "ExitCode137" || !strings.Contains(st.Message, "OOMKilled") {
				t.Errorf("state %+v, want ExitCode137 saying OOMKilled", st)
			}
		})
	}
}
