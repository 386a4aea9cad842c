package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRunsAPod runs the runtime-info image as a pod with every handler,
// checks what the container sees against the runtime contract through
// Dial, reads its log, replaces a files volume in place, then stops it and
// checks that nothing is left but its log.
func TestRunsAPod(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			id := uniqueName("run-" + h)
			s := e.spec(id, h, ref, func(s *Spec) {
				c := &s.Containers[0]
				c.Env = append(c.Env, corev1.EnvVar{Name: "PLAIN", Value: "value"})
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")}
				c.VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds", ReadOnly: true}}
				s.Volumes = []Volume{{Name: "creds", Files: map[string]File{"password": {Data: []byte("s3cret"), Mode: 0o644}}}}
			})
			start := time.Now()
			e.run(s)
			st := e.waitStatus(id, time.Minute, "ready", ready)
			t.Logf("%s: ready %v after Run", h, time.Since(start))
			if !st.Running || st.Pulling || st.Failures != 0 || st.Labels["test"] != t.Name() {
				t.Errorf("status %+v", st)
			}

			i := e.info(id, "?path=/etc/creds/password&path=/etc/creds/token")
			for k, v := range map[string]string{"PORT": "8080", "K_SERVICE": "svc", "K_CONFIGURATION": "cfg", "K_REVISION": id, "PLAIN": "value"} {
				if got, ok := i.Env[k]; !ok || got != v {
					t.Errorf("env %s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			if !i.StdinEOF {
				t.Errorf("stdin: %s, want EOF", i.StdinDetail)
			}
			if ok, w, typ := i.file("/tmp"); !ok || !w || typ != "dir" {
				t.Errorf("/tmp exists %v writable %v type %s", ok, w, typ)
			}
			if h != "process" {
				if i.Hostname != id {
					t.Errorf("hostname %q, want %q", i.Hostname, id)
				}
				// The limit is enforced on the host: the pod's memory
				// cgroup has it.
				hostLimit, err := os.ReadFile("/sys/fs/cgroup/memory/knbox/" + id + "/memory.limit_in_bytes")
				if _, v1 := os.Stat("/sys/fs/cgroup/memory"); v1 == nil && (err != nil || strings.TrimSpace(string(hostLimit)) != "67108864") {
					t.Errorf("host memory cgroup limit %q (%v), want 67108864", hostLimit, err)
				}
				// Inside too (runsc: the handler's read-only bind mounts of
				// the sandbox's cgroups).
				if i.Cgroup.MemoryLimit == nil || *i.Cgroup.MemoryLimit != 64<<20 {
					t.Errorf("memory limit %v, want %d", i.Cgroup.MemoryLimit, 64<<20)
				}
				if i.Cgroup.CPUQuota == nil || *i.Cgroup.CPUQuota != 50000 || i.Cgroup.CPUPeriod != 100000 {
					t.Errorf("cpu quota %v period %d, want 50000/100000", i.Cgroup.CPUQuota, i.Cgroup.CPUPeriod)
				}
				for _, p := range []string{"/var/log", "/dev/log", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} {
					if ok, _, _ := i.file(p); !ok {
						t.Errorf("%s missing", p)
					}
				}
				// A symlink through ..data, as the kubelet lays volumes out.
				if ok, w, typ := i.file("/etc/creds/password"); !ok || w || typ != "symlink" {
					t.Errorf("volume file: exists %v writable %v type %s, want a read-only symlink", ok, w, typ)
				}
				if ok, w, _ := i.file("/var/log"); !ok || !w {
					t.Errorf("/var/log exists %v writable %v", ok, w)
				}

				// A files volume changes in place: the container sees the
				// new files without a restart.
				if err := e.rt.UpdateVolume(context.Background(), id, "creds", map[string]File{
					"password": {Data: []byte("second"), Mode: 0o644}, "token": {Data: []byte("t"), Mode: 0o600}}); err != nil {
					t.Fatal(err)
				}
				now := e.info(id, "?path=/etc/creds/token")
				if ok, _, _ := now.file("/etc/creds/token"); !ok {
					t.Error("the updated volume's new file is not in the container")
				}
				if !now.Started.Equal(i.Started) {
					t.Errorf("the container restarted (%v, then %v): volumes change in place", i.Started, now.Started)
				}
			}
			if err := e.rt.UpdateVolume(context.Background(), id, "nope", nil); err == nil {
				t.Error("UpdateVolume of a volume the pod does not have: no error")
			}

			// Logs: stdout, stderr and (where /dev/log exists) syslog.
			e.get(id, "/log?msg=hello-logs")
			eventually(t, 10*time.Second, "log lines", func() bool {
				n := strings.Count(e.logs(id), "hello-logs")
				if h == "process" {
					return n >= 2
				}
				return n >= 3
			})

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.rt.Stop(ctx, id, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.rt.Status(id); ok {
				t.Error("the pod is still known after Stop")
			}
			if m, n, c := e.leftovers(id); m != 0 || n != 0 || c != 0 {
				t.Errorf("after Stop: %d mounts, %d namespaces, %d containers", m, n, c)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "pods", id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the pod's directory is left: %v", err)
			}
			if !strings.Contains(e.logs(id), "hello-logs") {
				t.Error("the log is gone with the pod")
			}
		})
	}
}

// TestRunRefuses: what cannot run here is refused by Run, saying why.
func TestRunRefuses(t *testing.T) {
	requireHandler(t, "process")
	e := newEnv(t, []string{"process"})
	ref := "example.com/x@sha256:" + strings.Repeat("b", 64)
	for name, tc := range map[string]struct {
		mutate func(*Spec)
		want   string
	}{
		"bad id":         {func(s *Spec) { s.ID = "Not_A_Label" }, "DNS label"},
		"no log":         {func(s *Spec) { s.LogPath = "" }, "no log path"},
		"unknown":        {func(s *Spec) { s.Handler = "kata" }, `handler "kata" is not available`},
		"unresolved env": {func(s *Spec) { s.Containers[0].Env[0].ValueFrom = &corev1.EnvVarSource{} }, "valueFrom is not resolved"},
		"exec probe": {func(s *Spec) {
			s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, "exec probes are not supported"},
		"two on process": {func(s *Spec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "side", Image: ref})
			s.Images = append(s.Images, ref)
		}, "runs one container per pod"},
		"escaping file": {func(s *Spec) {
			s.Volumes = []Volume{{Name: "v", Files: map[string]File{"../x": {Data: []byte("x")}}}}
		}, "clean relative path"},
	} {
		t.Run(name, func(t *testing.T) {
			err := e.rt.Run(context.Background(), e.spec(uniqueName("refused"), "process", ref, tc.mutate))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error with %q", err, tc.want)
			}
		})
	}
	id := uniqueName("twice")
	e.run(e.spec(id, "process", ref))
	if err := e.rt.Run(context.Background(), e.spec(id, "process", ref)); err == nil {
		t.Error("a second pod with the same id was accepted")
	}
}

func shell(script string) func(*Spec) {
	return func(s *Spec) {
		s.Containers[0].Command = []string{"/bin/sh", "-c", script}
	}
}

// TestCrash: a container that exits is a failure with its exit code and
// termination message (the termination log where the runtime provides it,
// else the last lines of its output), and the pod restarts it with
// backoff.
func TestCrash(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})

			id := uniqueName("crash-" + h)
			e.run(e.spec(id, h, ref, shell("echo starting; echo one last line; exit 3")))
			st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonError))
			if f := st.LastFailure; f.ExitCode != 3 || f.Message != "starting\none last line" || f.Container != "app" || st.Ready {
				t.Errorf("failure %+v, want exit code 3 with the last log lines", f)
			}

			if h != "process" { // the process handler provides no /dev/termination-log
				id := uniqueName("term-" + h)
				e.run(e.spec(id, h, ref, shell("echo noise; printf 'disk full' >/dev/termination-log; exit 4")))
				st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonError))
				if f := st.LastFailure; f.ExitCode != 4 || f.Message != "disk full" {
					t.Errorf("failure %+v, want exit code 4 with the termination log", f)
				}
				if !strings.Contains(e.logs(id), "knbox: the container exited (exit code 4): disk full") {
					t.Errorf("the log does not say that the container exited:\n%s", e.logs(id))
				}
			}

			// Backoff: 200ms, 400ms, 800ms, 1.6s, ... between starts, so
			// in 2.5s after the first failure at most 5 starts.
			time.Sleep(2500 * time.Millisecond)
			if n := strings.Count(e.logs(id), "starting"); n < 2 || n > 5 {
				t.Errorf("%d starts in 2.5s, want 2 to 5 (exponential backoff from 200ms):\n%s", n, e.logs(id))
			}
			if st, _ := e.rt.Status(id); st.Restarts < 1 || st.Failures < st.Restarts {
				t.Errorf("status %+v, want restarts counted", st)
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

// TestStartFailures: an entrypoint the runtime cannot run is a
// RunContainerError that names the handler and says why, and is retried
// (no leftover container in the way); under runsc the sandbox starts and
// the container exits.
func TestStartFailures(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})
			id := uniqueName("noexec-" + h)
			e.run(e.spec(id, h, ref, func(s *Spec) { s.Containers[0].Command = []string{"/no/such/binary"} }))
			if h == "runsc" {
				st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonError))
				if !strings.Contains(st.LastFailure.Message, "/no/such/binary") {
					t.Errorf("failure %+v, want an exit naming the binary", st.LastFailure)
				}
				return
			}
			st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonRunContainer))
			if f := st.LastFailure; !strings.HasPrefix(f.Message, h+": ") || !strings.Contains(f.Message, "/no/such/binary") {
				t.Errorf("failure %+v, want RunContainerError naming %s and the binary", f, h)
			}
			// It is retried: a second failure reports the same.
			n := st.Failures
			st = e.waitStatus(id, 30*time.Second, "failed again", func(st Status) bool { return st.Failures > n })
			if f := st.LastFailure; f.Reason != ReasonRunContainer || strings.Contains(f.Message, "exists") {
				t.Errorf("retry: %+v", f)
			}
		})
	}
}

// TestRunAsNonRootAndPolicy: a container run as a non-root user can still
// write what the contract says is writable; an operator policy that refuses
// root fails a container that would run as root, naming the field.
func TestRunAsNonRootAndPolicy(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h}, func(o *Options) { o.Policy.RefuseRoot = true })
			id := uniqueName("nonroot-" + h)
			e.run(e.spec(id, h, ref, func(s *Spec) {
				s.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptrInt64(65532)}
			}))
			e.waitStatus(id, time.Minute, "ready", ready)
			i := e.info(id, "?path=/dev/termination-log")
			if i.UID != 65532 {
				t.Errorf("uid %d, want 65532", i.UID)
			}
			for _, p := range []string{"/tmp", "/var/log", "/dev/log", "/dev/termination-log"} {
				if ok, w, _ := i.file(p); !ok || !w {
					t.Errorf("%s: exists %v writable %v, want writable by uid 65532", p, ok, w)
				}
			}

			root := uniqueName("root-" + h)
			e.run(e.spec(root, h, ref))
			st := e.waitStatus(root, 30*time.Second, "failed", failedWith(ReasonCreateContainerConfig))
			if !strings.Contains(st.LastFailure.Message, "image.user") {
				t.Errorf("failure %+v, want CreateContainerConfigError naming image.user", st.LastFailure)
			}
		})
	}
}

func ptrInt64(v int64) *int64 { return &v }

// TestOOMKilled: a container over its memory limit is killed, and the
// failure says so. Under runsc the limit (64Mi, which leaves room for the
// sandbox itself) confines the whole sandbox, which is what gets killed.
func TestOOMKilled(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e := newEnv(t, []string{h})
			id := uniqueName("oom")
			e.run(e.spec(id, h, ref, shell("dd if=/dev/zero of=/dev/null bs=200M count=1"), func(s *Spec) {
				s.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
			}))
			st := e.waitStatus(id, 30*time.Second, "failed", failedWith(ReasonError))
			if f := st.LastFailure; f.ExitCode != 137 || !f.OOMKilled || !strings.Contains(f.Message, "OOMKilled") {
				t.Errorf("failure %+v, want exit code 137, OOMKilled", f)
			}
		})
	}
}

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(0)}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   1,
	}
}

// TestLivenessRestarts: a failing liveness probe restarts the container
// (SIGTERM, then a fresh container in the same pod), which then is ready
// again; a failing readiness probe makes the pod not ready, without a
// restart.
func TestLivenessRestarts(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			id := uniqueName("live-" + h)
			e.run(e.spec(id, h, ref, func(s *Spec) { s.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 2) }))
			e.waitStatus(id, time.Minute, "ready", ready)
			first := e.info(id, "")
			e.get(id, "/fail-health")

			st := e.waitStatus(id, 20*time.Second, "restarted", func(st Status) bool { return st.Restarts > 0 })
			if f := st.LastFailure; f == nil || f.Reason != ReasonUnhealthy || !strings.Contains(f.Message, "liveness probe failed") {
				t.Errorf("failure %+v, want Unhealthy", f)
			}
			eventually(t, 20*time.Second, "SIGTERM in the log", func() bool { return strings.Contains(e.logs(id), "SIGTERM received") })
			e.waitStatus(id, 20*time.Second, "ready again", ready)
			if second := e.info(id, ""); !second.Started.After(first.Started) {
				t.Errorf("the container was not restarted: started %v, then %v", first.Started, second.Started)
			}
		})
	}
}

// TestReadinessFails: an httpGet readiness probe that starts failing makes
// the pod not ready; the container keeps running.
func TestReadinessFails(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"runc"})
	id := uniqueName("readyz")
	e.run(e.spec(id, "runc", ref, func(s *Spec) { s.Containers[0].ReadinessProbe = httpProbe("/healthz", 1, 2) }))
	e.waitStatus(id, time.Minute, "ready", ready)
	e.get(id, "/fail-health")
	st := e.waitStatus(id, 20*time.Second, "not ready", func(st Status) bool { return !st.Ready })
	if !st.Running || st.Restarts != 0 {
		t.Errorf("status %+v, want running, not restarted", st)
	}
}

// TestStopGrace: a container that ignores SIGTERM for longer than the
// grace period is killed once it is over.
func TestStopGrace(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"runc"})
	id := uniqueName("grace")
	e.run(e.spec(id, "runc", ref))
	e.waitStatus(id, time.Minute, "ready", ready)
	// runtime-info waits for requests in flight after SIGTERM (up to 10s),
	// longer than the grace period; the request asks for 20s. So the only
	// way it ends before its answer is the SIGKILL after the grace period.
	answered := make(chan int, 1)
	go func() {
		resp, err := e.client(id).Get("http://pod/sleep?ms=20000")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.rt.Stop(ctx, id, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Never less than the grace period; how much more depends on the
	// machine's load, so no upper bound.
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("Stop took %v, want at least the grace period (2s)", took)
	}
	select {
	case code := <-answered:
		if code != 0 {
			t.Errorf("the 20s request was answered (%d): the pod was not killed at the end of its grace period", code)
		}
	case <-time.After(time.Minute):
		t.Error("the 20s request still hangs a minute after Stop")
	}
	if m, n, c := e.leftovers(id); m != 0 || n != 0 || c != 0 {
		t.Errorf("left: %d mounts, %d namespaces, %d containers", m, n, c)
	}
}
