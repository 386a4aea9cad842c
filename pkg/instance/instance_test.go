package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestRunsARevision runs the runtime-info image as a revision through
// Resolve and Ensure with every handler, checks what the container sees
// against the runtime contract through an endpoint's Dial, reads its logs,
// then removes it and checks that nothing is left.
func TestRunsARevision(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			e.lookup.secrets["ns1/creds"] = &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cret")}}
			e.lookup.cms["ns1/settings"] = &corev1.ConfigMap{Data: map[string]string{"mode": "fast", "level": "3", "bad key": "skipped"}}
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
			if st.Ready || st.Failed || st.Desired != 1 || !st.Active {
				t.Errorf("first state %+v, want deploying, desired 1, active", st)
			}
			st = e.waitState(rev, time.Minute, "ready", ready)
			t.Logf("%s: ready %v after Ensure", h, time.Since(start))
			if st.Actual != 1 || st.Desired != 1 || st.Failed {
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
			if !i.StdinEOF {
				t.Errorf("stdin: %s, want EOF", i.StdinDetail)
			}
			if ok, w, typ := i.file("/tmp"); !ok || !w || typ != "dir" {
				t.Errorf("/tmp exists %v writable %v type %s", ok, w, typ)
			}
			if h != "process" {
				// The limit is enforced on the host: the instance's memory
				// cgroup has it.
				hostLimit, err := os.ReadFile("/sys/fs/cgroup/memory/knbox/" + eps[0].ID + "/memory.limit_in_bytes")
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
					t.Errorf("secret volume file: exists %v writable %v type %s, want a read-only symlink", ok, w, typ)
				}
				if ok, w, _ := i.file("/var/log"); !ok || !w {
					t.Errorf("/var/log exists %v writable %v", ok, w)
				}
			}

			// Logs: stdout, stderr and (where /dev/log exists) syslog.
			get(t, eps[0], "/log?msg=hello-logs")
			eventually(t, 10*time.Second, "log lines", func() bool {
				var b bytes.Buffer
				if err := e.m.Logs("ns1", name, false, time.Time{}, &b); err != nil {
					t.Fatal(err)
				}
				n := strings.Count(b.String(), "hello-logs")
				if h == "process" {
					return n >= 2
				}
				return n >= 3
			})
			var b bytes.Buffer
			if err := e.m.Logs("ns1", name, false, time.Now().Add(time.Hour), &b); err != nil || b.Len() != 0 {
				t.Errorf("logs since the future: %q, %v", b.String(), err)
			}

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
		})
	}
}

func ptrBool(b bool) *bool { return &b }

// TestRunAsNonRootAndPolicy: a container run as a non-root user can still
// write what the contract says is writable; an operator policy that refuses
// root fails a container that would run as root, naming the field.
func TestRunAsNonRootAndPolicy(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h}, func(o *Options) { o.Policy.RefuseRoot = true })
			name := uniqueName("nonroot-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
				r.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptrInt64(65532)}
			})
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)
			eps := e.m.Endpoints("ns1", name)
			var i info
			if err := json.Unmarshal(get(t, eps[0], "/?path=/dev/termination-log"), &i); err != nil {
				t.Fatal(err)
			}
			if i.UID != 65532 {
				t.Errorf("uid %d, want 65532", i.UID)
			}
			for _, p := range []string{"/tmp", "/var/log", "/dev/log", "/dev/termination-log"} {
				if ok, w, _ := i.file(p); !ok || !w {
					t.Errorf("%s: exists %v writable %v, want writable by uid 65532", p, ok, w)
				}
			}

			root := newRev(t, "ns1", uniqueName("root-"+h), h, ref)
			e.resolveAndEnsure(root)
			st := e.waitState(root, 30*time.Second, "failed", failed)
			if st.Reason != ReasonCreateContainerConfig || !strings.Contains(st.Message, "image.user") {
				t.Errorf("state %+v, want CreateContainerConfigError naming image.user", st)
			}
		})
	}
}

func ptrInt64(v int64) *int64 { return &v }
