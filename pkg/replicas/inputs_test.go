package replicas

import (
	"context"
	"encoding/json"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// TestVolumesFollowTheirSources: a running instance's Secret, ConfigMap
// and projected volumes change when their sources do, as on Kubernetes,
// without a restart: the informer's event rewrites them (nothing polls).
func TestVolumesFollowTheirSources(t *testing.T) {
	// Not under the process handler, which mounts no volumes.
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			e.synced()
			e.setSecret("ns1", "creds", map[string]string{"password": "one"})
			e.setConfigMap("ns1", "settings", map[string]string{"mode": "fast"})
			name := uniqueName("vol-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
				c := &r.Spec.Containers[0]
				c.VolumeMounts = []corev1.VolumeMount{
					{Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
					{Name: "proj", MountPath: "/etc/proj", ReadOnly: true},
				}
				r.Spec.Volumes = []corev1.Volume{
					{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
					{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Items: []corev1.KeyToPath{{Key: "password", Path: "pw/password"}}}},
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
					}}}},
				}
			})
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)
			eps := e.m.Endpoints("ns1", name)
			if len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
			started := getInfo(t, eps[0]).Started
			// Which of the volumes' names the container sees.
			seen := func() map[string]bool {
				var i info
				paths := []string{"/etc/creds/password", "/etc/creds/token", "/etc/proj/pw/password", "/etc/proj/mode"}
				if err := json.Unmarshal(get(t, eps[0], "/?path="+strings.Join(paths, "&path=")), &i); err != nil {
					t.Fatal(err)
				}
				out := map[string]bool{}
				for _, f := range i.Files {
					if slices.Contains(paths, f.Path) && f.Exists {
						out[f.Path] = true
					}
				}
				return out
			}
			if got := seen(); len(got) != 3 || got["/etc/creds/token"] {
				t.Fatalf("volumes at start: %v, want password (creds and proj) and mode", got)
			}
			if before := readThrough(t, e, name, "creds", "password"); before != "one" {
				t.Fatalf("creds/password = %q, want one", before)
			}
			changed := time.Now()
			e.setSecret("ns1", "creds", map[string]string{"password": "second-value", "token": "t"})
			// One event rewrites both volumes that read the Secret: wait for
			// the last one too. Generous: the machine is shared.
			eventually(t, 30*time.Second, "the container to see the new secret", func() bool {
				return seen()["/etc/creds/token"] && readThrough(t, e, name, "proj", "pw/password") == "second-value"
			})
			t.Logf("%s: the change reached the running instance %v after the update", h, time.Since(changed))
			if got := readThrough(t, e, name, "creds", "password"); got != "second-value" {
				t.Errorf("creds/password = %q after the update, want second-value", got)
			}
			e.setSecret("ns1", "creds", map[string]string{"password": "third"})
			eventually(t, 30*time.Second, "the container to see the token go", func() bool {
				return !seen()["/etc/creds/token"]
			})
			// A source deleted: the volume keeps what it had.
			if err := e.kube.CoreV1().ConfigMaps("ns1").Delete(context.Background(), "settings", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.setSecret("ns1", "creds", map[string]string{"password": "fourth"})
			eventually(t, 30*time.Second, "creds updated", func() bool { return readThrough(t, e, name, "creds", "password") == "fourth" })
			if got := seen(); !got["/etc/proj/mode"] {
				t.Errorf("the projected volume lost its ConfigMap's file when the ConfigMap went: %v", got)
			}
			if now := getInfo(t, eps[0]).Started; !now.Equal(started) {
				t.Errorf("the container restarted (%v, then %v): volumes must change in place", started, now)
			}
		})
	}
}

// TestTransientAPIFailure: the API fails the informers' first lists (as a
// restarting or overloaded API server does); Ensure meanwhile reports the
// revision deploying, never failed, and it becomes ready once the lists
// succeed.
func TestTransientAPIFailure(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	kube := fake.NewSimpleClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "process"}, Handler: "process"},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "creds"}, Data: map[string][]byte{"password": []byte("s3cret")}})
	var lists atomic.Int32
	for _, res := range []string{"runtimeclasses", "secrets"} {
		kube.PrependReactor("list", res, func(k8stesting.Action) (bool, k8sruntime.Object, error) {
			if lists.Add(1) <= 3 {
				return true, nil, apierrors.NewServerTimeout(corev1.Resource(res), "list", 1)
			}
			return false, nil, nil
		})
	}
	e := newEnvWith(t, kube, []string{"process"})
	name := uniqueName("transient")
	rev := newRev(t, "ns1", name, "process", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}
	})
	rev.Status.ContainerStatuses = []servingv1.ContainerStatus{{ImageDigest: ref}}
	deadline := time.Now().Add(2 * time.Minute)
	var sawWaiting bool
	for {
		st, err := e.m.Ensure(context.Background(), rev)
		if err != nil {
			t.Fatal(err)
		}
		if st.Failed {
			t.Fatalf("the revision failed while the API was failing: %+v", st)
		}
		sawWaiting = sawWaiting || strings.Contains(st.Message, "waiting for the API")
		if ready(st) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := lists.Load(); n <= 3 {
		t.Errorf("%d lists: the API never failed (the test would prove nothing)", n)
	}
	if !sawWaiting {
		t.Error("the state never said it waits for the API")
	}
	if i := getInfo(t, e.m.Endpoints("ns1", name)[0]); i.Env["PASSWORD"] != "s3cret" {
		t.Errorf("PASSWORD = %q", i.Env["PASSWORD"])
	}
}

// lookupEnv is a Manager whose informers hold a Secret s and a ConfigMap c
// in namespace ns.
func lookupEnv(t *testing.T) *env {
	kube := fake.NewSimpleClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
			Data: map[string][]byte{"user": []byte("admin"), "pw": []byte("hunter2")}, StringData: map[string]string{"extra": "e"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Data:       map[string]string{"a": "1", "b.c": "2", "bad=key": "x", "1digit": "y"},
			BinaryData: map[string][]byte{"bin": []byte("raw")}},
	)
	e := newEnvWith(t, kube, nil)
	e.synced()
	return e
}

func secretRef(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

func cmRef(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

func TestBuildEnv(t *testing.T) {
	m := lookupEnv(t).m
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r-1", UID: "uid-1",
		Labels:      map[string]string{"serving.knative.dev/service": "svc", "serving.knative.dev/configuration": "cfg", "team": "a"},
		Annotations: map[string]string{"note": "n"}}}
	meta := instanceMeta{name: "r-1-abc"}
	for _, tc := range []struct {
		name    string
		c       corev1.Container
		want    []string // NAME=value expected, in this order, after the contract's four
		wantErr string
	}{
		{name: "plain", c: corev1.Container{Env: []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B"}}}, want: []string{"A=x", "B="}},
		{name: "secret and configmap keys", c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "U", ValueFrom: secretRef("s", "user", false)},
			{Name: "E", ValueFrom: secretRef("s", "extra", false)},
			{Name: "A", ValueFrom: cmRef("c", "a", false)},
			{Name: "BIN", ValueFrom: cmRef("c", "bin", false)},
		}}, want: []string{"U=admin", "E=e", "A=1", "BIN=raw"}},
		{name: "optional missing", c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "X", ValueFrom: secretRef("nope", "k", true)},
			{Name: "Y", ValueFrom: secretRef("s", "nokey", true)},
			{Name: "Z", ValueFrom: cmRef("c", "nokey", true)},
		}}, want: nil},
		{name: "missing secret", c: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: secretRef("nope", "k", false)}}}, wantErr: `env[0] (X): secret "nope"`},
		{name: "missing key", c: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: cmRef("c", "k", false)}}}, wantErr: `configmap "c" has no key "k"`},
		{name: "envFrom with prefix, invalid names skipped, env wins", c: corev1.Container{
			EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}},
				{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}},
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptrBool(true)}},
			},
			Env: []corev1.EnvVar{{Name: "a", Value: "override"}},
		}, want: []string{"a=1", "b.c=2", "S_extra=e", "S_pw=hunter2", "S_user=admin", "a=override"}},
		{name: "envFrom missing", c: corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}}, wantErr: `envFrom[0]: secret "gone"`},
		{name: "downward API", c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "T", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['team']"}}},
			{Name: "AN", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}}},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		}}, want: []string{"N=r-1-abc", "NS=ns", "T=a", "AN=n", "IP=127.0.0.1"}},
		{name: "unknown field", c: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}}}}, wantErr: "not supported"},
		{name: "resources", c: corev1.Container{
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("1500m")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
			},
			Env: []corev1.EnvVar{
				{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
				{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
				{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
				{Name: "REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
				{Name: "REQ_MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory"}}},
			},
		}, want: []string{"MEM=134217728", "MEM_MI=128", "CPU=2", "REQ_M=250", "REQ_MEM=134217728"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars, err := m.buildEnv(rev, &tc.c, 9000, meta)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !pod.IsConfigError(err) {
					t.Fatalf("err %v, want a config error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var env []string
			for _, v := range vars {
				env = append(env, v.Name+"="+v.Value)
			}
			head := []string{"PORT=9000", "K_SERVICE=svc", "K_CONFIGURATION=cfg", "K_REVISION=r-1"}
			if strings.Join(env[:4], " ") != strings.Join(head, " ") {
				t.Errorf("env starts %q, want %q", env[:4], head)
			}
			if got := strings.Join(env[4:], " "); got != strings.Join(tc.want, " ") {
				t.Errorf("env %q, want %q", env[4:], tc.want)
			}
		})
	}
}

func TestVolumes(t *testing.T) {
	m := lookupEnv(t).m
	mode := int32(0o600)
	vols := []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: &mode}}},
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"},
			Items: []corev1.KeyToPath{{Key: "a", Path: "sub/a.txt"}}}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Items: []corev1.KeyToPath{{Key: "user", Path: "user"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "bin", Path: "bin"}}}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "opt", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: ptrBool(true)}}},
	}
	got, _, err := m.volumes("ns", "default", vols)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]pod.Volume{}
	for _, v := range got {
		byName[v.Name] = v
	}
	file := func(vol, p string) (string, os.FileMode) {
		t.Helper()
		f, ok := byName[vol].Files[p]
		if !ok {
			t.Fatalf("%s has no %s: %v", vol, p, byName[vol].Files)
		}
		return string(f.Data), f.Mode
	}
	if v, perm := file("sec", "pw"); v != "hunter2" || perm != 0o600 {
		t.Errorf("secret pw = %q %v", v, perm)
	}
	if v, perm := file("cm", "sub/a.txt"); v != "1" || perm != 0o644 {
		t.Errorf("configmap item = %q %v", v, perm)
	}
	if _, ok := byName["cm"].Files["b.c"]; ok {
		t.Error("configmap keys not in items were read")
	}
	if v, _ := file("proj", "user"); v != "admin" {
		t.Errorf("projected user = %q", v)
	}
	if v, _ := file("proj", "bin"); v != "raw" {
		t.Errorf("projected bin = %q", v)
	}
	if !byName["scratch"].EmptyDir || byName["sec"].EmptyDir {
		t.Errorf("emptyDir: %+v", byName)
	}
	if v, ok := byName["opt"]; !ok || len(v.Files) != 0 {
		t.Errorf("the optional volume: %+v %v", v, ok)
	}

	for _, tc := range []struct {
		name string
		v    corev1.Volume
		want string
	}{
		{"escape", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "../../etc/passwd"}}}}}, "stay in the volume"},
		{"absolute", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "/abs"}}}}}, "must be relative"},
		{"missing", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent"}}}, `secret "absent"`},
		{"file and directory", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "p"}, {Key: "a", Path: "p/q"}}}}}, "cannot be a file and a directory"},
		{"..data", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "..data"}}}}}, "must not start with '..'"},
		{"hostPath", corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}, "only secret, configMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := m.volumes("ns", "default", []corev1.Volume{tc.v})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !pod.IsConfigError(err) {
				t.Errorf("err %v, want a config error with %q", err, tc.want)
			}
		})
	}
}

// FuzzVolumeItems: whatever item paths and data a Secret or ConfigMap
// volume names (they come from the API), they are refused or become clean
// relative paths inside the volume that do not start with ".." (which the
// pod runtime then writes; see pod's FuzzWriteVolume).
func FuzzVolumeItems(f *testing.F) {
	f.Add("key", "a/b.txt", []byte("v"), int32(0o644))
	f.Add("key", "../escape", []byte("v"), int32(0o600))
	f.Add("key", "..data", []byte("v"), int32(0o600))
	f.Add("key", "/abs", []byte(""), int32(-1))
	f.Add("key", "a/../../b", []byte("x"), int32(0o7777))
	f.Add("key", "./a//b/", []byte("x"), int32(0))
	f.Fuzz(func(t *testing.T, key, itemPath string, data []byte, mode int32) {
		files := map[string]pod.File{}
		m := &mode
		err := keyFiles(files, "secret s", map[string][]byte{key: data}, []corev1.KeyToPath{{Key: key, Path: itemPath, Mode: m}}, nil, nil)
		if err != nil {
			return
		}
		for p, f := range files {
			if p != path.Clean(p) || path.IsAbs(p) || strings.HasPrefix(p, "..") || p == "." {
				t.Fatalf("item path %q became %q, which leaves the volume or names its own entries", itemPath, p)
			}
			if f.Mode&^0o777 != 0 {
				t.Fatalf("mode %o has bits beyond the permissions", f.Mode)
			}
		}
	})
}
