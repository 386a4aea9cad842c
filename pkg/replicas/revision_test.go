package replicas

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// TestRunsARevision runs the runtime-info image as a revision through
// Resolve and Ensure, checks what the Manager resolved for it (the
// environment from Secrets and ConfigMaps, a Secret volume) through an
// endpoint's Dial, reads its logs, then removes it and checks that nothing
// is left. (The runtime contract per handler is pod's TestRunsAPod.)
func TestRunsARevision(t *testing.T) {
	for _, h := range []string{"process", "runc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			e.synced()
			e.setSecret("ns1", "creds", map[string]string{"password": "s3cret"})
			e.setConfigMap("ns1", "settings", map[string]string{"mode": "fast", "level": "3", "bad key": "skipped"})
			name := uniqueName("run-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
				c := &r.Spec.Containers[0]
				c.Env = []corev1.EnvVar{
					{Name: "PLAIN", Value: "value"},
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
					{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"}}},
					{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "x", Optional: ptrBool(true)}}},
				}
				c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")}
				c.VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds", ReadOnly: true}}
				r.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
			})
			mounts0, _, _ := e.leftovers(name)

			start := time.Now()
			st := e.resolveAndEnsure(rev)
			if st.Ready || st.Failed || st.Want != 1 {
				t.Errorf("first state %+v, want deploying, one instance wanted", st)
			}
			st = e.waitState(rev, time.Minute, "ready", ready)
			t.Logf("%s: ready %v after Ensure", h, time.Since(start))
			if st.Actual != 1 || st.Want != 1 || st.Failed {
				t.Errorf("state %+v, want 1 ready of 1", st)
			}
			eps := e.m.Endpoints("ns1", name)
			if len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
			if cfg, ok := e.m.Config("ns1", name); !ok || cfg.Timeout != 5*time.Second {
				t.Errorf("config %+v %v, want timeout 5s", cfg, ok)
			}

			var i info
			if err := json.Unmarshal(get(t, eps[0], "/?path=/etc/creds/password"), &i); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"PORT":            "8080",
				"K_SERVICE":       "svc-" + name,
				"K_CONFIGURATION": "cfg-" + name,
				"K_REVISION":      name,
				"PLAIN":           "value",
				"PASSWORD":        "s3cret",
				"MODE":            "fast",
				"CFG_mode":        "fast",
				"CFG_level":       "3",
			}
			for k, v := range want {
				if got, ok := i.Env[k]; !ok || got != v {
					t.Errorf("env %s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			for _, k := range []string{"MISSING", "CFG_bad key"} {
				if _, ok := i.Env[k]; ok {
					t.Errorf("env %s is set", k)
				}
			}
			if h != "process" {
				if ok, w, typ := i.file("/etc/creds/password"); !ok || w || typ != "symlink" {
					t.Errorf("secret volume file: exists %v writable %v type %s, want a read-only symlink", ok, w, typ)
				}
				if i.Hostname != eps[0].ID || !strings.HasPrefix(eps[0].ID, name+"-") {
					t.Errorf("hostname %q, instance %q: want the instance's name, <revision>-<suffix>", i.Hostname, eps[0].ID)
				}
			}

			// Logs: stdout, stderr and (where /dev/log exists) syslog.
			get(t, eps[0], "/log?msg=hello-logs")
			eventually(t, 10*time.Second, "log lines", func() bool {
				n := strings.Count(e.logsOf("ns1", name), "hello-logs")
				if h == "process" {
					return n >= 2
				}
				return n >= 3
			})

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go e.routerDrains(ctx, "ns1", name, eps[0].ID)
			if err := e.m.Remove(ctx, "ns1", name); err != nil {
				t.Fatal(err)
			}
			if _, ok := e.m.Config("ns1", name); ok {
				t.Error("the revision is still known after Remove")
			}
			mounts, nss, cs := e.leftovers(name)
			if mounts != mounts0 || nss != 0 || cs != 0 {
				t.Errorf("after Remove: %d mounts (before %d), %d namespaces, %d containers", mounts, mounts0, nss, cs)
			}
			if out := e.logsOf("ns1", name); out != "" {
				t.Errorf("logs after Remove: %q", out)
			}
		})
	}
}

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
	if st.Reason != pod.ReasonImagePullBackOff || st.ResourcesFailed || !strings.Contains(st.Message, missing) || !strings.Contains(st.Message, "MANIFEST_UNKNOWN") {
		t.Errorf("state %+v, want ImagePullBackOff naming the image and the registry's error", st)
	}
}

// TestUnknownHandler: a RuntimeClass whose handler this host lacks fails
// the revision's resources, naming the handler; an unknown RuntimeClass
// too, until it appears.
func TestUnknownHandler(t *testing.T) {
	for _, tc := range []struct {
		class, reason, want string
	}{
		{"kata", ReasonRuntimeHandlerNotFound, `runtime handler "kata-qemu"`},
		{"nope", ReasonRuntimeClassNotFound, `RuntimeClass "nope" does not exist`},
	} {
		t.Run(tc.class, func(t *testing.T) {
			e := newEnv(t, nil)
			rev := newRev(t, "ns1", "unknown", tc.class, "example.com/app@sha256:"+strings.Repeat("a", 64))
			st := e.waitState(rev, 30*time.Second, "failed", failed)
			if !st.ResourcesFailed || st.Reason != tc.reason || !strings.Contains(st.Message, tc.want) || st.Want != 0 {
				t.Errorf("state %+v, want resources failed %s with %q", st, tc.reason, tc.want)
			}
		})
	}
}

// TestCrashReportsExitCodeAndMessage: a container that exits before it was
// ever ready fails the revision with ExitCode<N> and its termination
// message, as Knative words it (the pod runtime's TestCrash checks every
// handler and the backoff).
func TestCrashReportsExitCodeAndMessage(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"runc"})
	rev := newRev(t, "ns1", uniqueName("crash"), "runc", ref, shell("echo starting; echo one last line; exit 3"))
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != "ExitCode3" || st.Message != "Container failed with: starting\none last line" || st.Ready {
		t.Errorf("state %+v, want ExitCode3 with the last log lines", st)
	}
	rev = newRev(t, "ns1", uniqueName("term"), "runc", ref, shell("echo noise; printf 'disk full' >/dev/termination-log; exit 4"))
	e.resolveAndEnsure(rev)
	st = e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != "ExitCode4" || st.Message != "Container failed with: disk full" {
		t.Errorf("state %+v, want ExitCode4 with the termination log", st)
	}
}

// TestEvictionOnTheRevision: an instance evicted for its local storage (an
// emptyDir over its sizeLimit) shows the kubelet's reason and message on
// the revision.
func TestEvictionOnTheRevision(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"runc"}, withPodOptions(func(o *pod.Options) {
		o.EphemeralStorage.Interval = 100 * time.Millisecond
	}))
	limit := resource.MustParse("5Mi")
	rev := newRev(t, "ns1", uniqueName("evict"), "runc", ref, shell("dd if=/dev/urandom of=/scratch/big bs=1M count=10; sleep 3600"),
		func(r *servingv1.Revision) {
			r.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
			r.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		})
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 60*time.Second, "failed", failed)
	if want := `Usage of EmptyDir volume "scratch" exceeds the limit "5Mi".`; st.Reason != pod.ReasonEvicted || st.Message != want {
		t.Errorf("state %+v, want reason Evicted, message %q", st, want)
	}
}

// TestMissingSecret: a Secret that env names and that does not exist keeps
// instances from being made, reported as CreateContainerConfigError naming
// it; once it is created, the informer's event makes the instance at once.
func TestMissingSecret(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	rev := newRev(t, "ns1", uniqueName("secret"), "process", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k"}}}}
	})
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != pod.ReasonCreateContainerConfig || !strings.Contains(st.Message, `secret "absent"`) {
		t.Errorf("state %+v, want CreateContainerConfigError naming the secret", st)
	}
	e.setSecret("ns1", "absent", map[string]string{"k": "here now"})
	e.waitState(rev, time.Minute, "ready once the secret exists", ready)
	if i := getInfo(t, e.m.Endpoints("ns1", rev.Name)[0]); i.Env["X"] != "here now" {
		t.Errorf("X = %q", i.Env["X"])
	}
}

// TestProgressDeadline: a revision that never becomes ready fails with
// ProgressDeadlineExceeded and its instances are stopped; a poke (a
// request) tries again.
func TestProgressDeadline(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"runc"}, withOptions(func(o *Options) { o.ProgressDeadline = 2 * time.Second }))
	name := uniqueName("deadline")
	rev := newRev(t, "ns1", name, "runc", ref, shell("sleep 3600"))
	e.resolveAndEnsure(rev)
	st := e.waitState(rev, 30*time.Second, "failed", failed)
	if st.Reason != ReasonProgressDeadlineExceeded || !strings.Contains(st.Message, "2s") {
		t.Errorf("state %+v, want ProgressDeadlineExceeded", st)
	}
	e.waitState(rev, 30*time.Second, "instances stopped", func(st State) bool { return st.Want == 0 && e.instances("ns1", name) == 0 })
	eventually(t, 30*time.Second, "nothing left", func() bool {
		m, n, c := e.leftovers(name)
		return m == 0 && n == 0 && c == 0
	})

	e.activate("ns1", name)
	st = e.waitState(rev, 30*time.Second, "activated", func(st State) bool { return st.Want == 1 })
	if st.Failed {
		t.Errorf("after the poke: %+v, want a new attempt", st)
	}
	st = e.waitState(rev, 30*time.Second, "failed again", failed)
	if st.Reason != ReasonProgressDeadlineExceeded {
		t.Errorf("state %+v", st)
	}
}

// TestReadinessHTTPProbe: an httpGet readiness probe that starts failing
// takes the instance out of Endpoints; the revision stays Ready.
func TestReadinessHTTPProbe(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"runc"})
	name := uniqueName("readyz")
	rev := newRev(t, "ns1", name, "runc", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 1, 2)
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name)
	get(t, eps[0], "/fail-health")
	st := e.waitState(rev, 20*time.Second, "not ready", func(st State) bool { return st.Actual == 0 })
	if !st.Ready || st.Failed || len(e.m.Endpoints("ns1", name)) != 0 {
		t.Errorf("state %+v, endpoints %v: want the revision Ready without endpoints", st, endpointIDs(e.m.Endpoints("ns1", name)))
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

// TestUnsupportedProbes: exec and grpc probes fail the revision, as the
// runtime contract wants.
func TestUnsupportedProbes(t *testing.T) {
	for _, p := range []*corev1.Probe{
		{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}},
	} {
		e := newEnv(t, nil)
		rev := newRev(t, "ns1", uniqueName("probe"), "process", "example.com/x@sha256:"+strings.Repeat("b", 64), func(r *servingv1.Revision) {
			r.Spec.Containers[0].LivenessProbe = p
		})
		st := e.waitState(rev, time.Second, "failed", failed)
		if st.Reason != ReasonUnsupportedProbe || !strings.Contains(st.Message, "livenessProbe") {
			t.Errorf("state %+v", st)
		}
	}
}

// TestH2CPort: a port named h2c is probed over HTTP/2 with prior knowledge
// and its endpoints say H2C.
func TestH2CPort(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	name := uniqueName("h2c")
	rev := newRev(t, "ns1", name, "process", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "h2c", ContainerPort: 9090}}
		r.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 0, 0)
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name)
	if len(eps) != 1 || !eps[0].H2C {
		t.Fatalf("endpoints %+v, want one with H2C", eps)
	}
	if i := getInfo(t, eps[0]); i.Env["PORT"] != "9090" {
		t.Errorf("PORT %q", i.Env["PORT"])
	}
}

// readThrough reads a volume's file as the instance has it: the
// runtime-info answer has no file contents, so this reads the instance's
// volume directory on the host, which the container's mount shows.
func readThrough(t *testing.T, e *env, rev, volume, p string) string {
	t.Helper()
	eps := e.m.Endpoints("ns1", rev)
	if len(eps) != 1 {
		t.Fatalf("%d instances, want 1", len(eps))
	}
	idx := map[string]string{"creds": "0", "proj": "1"}[volume]
	// A read that resolves ..data just before an update removes the
	// directory it named finds nothing for an instant (the kubelet's atomic
	// writer has the same window): it is tried again, a bounded few times.
	file := filepath.Join(e.dir, "pods", eps[0].ID, "volumes", idx, p)
	for try := 0; ; try++ {
		b, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) && try < 20 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}
