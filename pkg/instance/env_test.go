package instance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func lookupManager() *Manager {
	return &Manager{opts: Options{Lookup: &fakeLookup{
		secrets: map[string]*corev1.Secret{
			"ns/s": {Data: map[string][]byte{"user": []byte("admin"), "pw": []byte("hunter2")}, StringData: map[string]string{"extra": "e"}},
		},
		cms: map[string]*corev1.ConfigMap{
			"ns/c": {Data: map[string]string{"a": "1", "b.c": "2", "bad=key": "x", "1digit": "y"}, BinaryData: map[string][]byte{"bin": []byte("raw")}},
		},
	}}}
}

func secretRef(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

func cmRef(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
}

func TestBuildEnv(t *testing.T) {
	m := lookupManager()
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r-1", UID: "uid-1",
		Labels:      map[string]string{"serving.knative.dev/service": "svc", "serving.knative.dev/configuration": "cfg", "team": "a"},
		Annotations: map[string]string{"note": "n"}}}
	meta := instanceMeta{name: "r-1-abc", hostname: "r-1-abc"}
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
			env, err := m.buildEnv(rev, &tc.c, 9000, meta)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !isConfigError(err) {
					t.Fatalf("err %v, want a config error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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

func TestPrepareVolumes(t *testing.T) {
	m := lookupManager()
	mode := int32(0o600)
	rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
	rev.Spec.Volumes = []corev1.Volume{
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
	dir := t.TempDir()
	vols, err := m.prepareVolumes(rev, dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func(vol, p string) (string, os.FileMode) {
		t.Helper()
		f := filepath.Join(vols[vol].Path, p)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(f)
		return string(b), fi.Mode().Perm()
	}
	if v, perm := read("sec", "pw"); v != "hunter2" || perm != 0o600 {
		t.Errorf("secret pw = %q %v", v, perm)
	}
	if v, perm := read("cm", "sub/a.txt"); v != "1" || perm != 0o644 {
		t.Errorf("configmap item = %q %v", v, perm)
	}
	if _, err := os.Stat(filepath.Join(vols["cm"].Path, "b.c")); err == nil {
		t.Error("configmap keys not in items were written")
	}
	if v, _ := read("proj", "user"); v != "admin" {
		t.Errorf("projected user = %q", v)
	}
	if v, _ := read("proj", "bin"); v != "raw" {
		t.Errorf("projected bin = %q", v)
	}
	if !vols["scratch"].Writable || vols["sec"].Writable || vols["cm"].Writable {
		t.Errorf("writable: %+v", vols)
	}
	if _, ok := vols["opt"]; !ok {
		t.Error("the optional volume is missing")
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
			r := rev.DeepCopy()
			r.Spec.Volumes = []corev1.Volume{tc.v}
			_, err := m.prepareVolumes(r, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !isConfigError(err) {
				t.Errorf("err %v, want a config error with %q", err, tc.want)
			}
		})
	}
}

func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	etc, resolved := filepath.Join(dir, "etc"), filepath.Join(dir, "resolved")
	orig := resolvConfFiles
	resolvConfFiles = []string{etc, resolved}
	t.Cleanup(func() { resolvConfFiles = orig })
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write(etc, "# comment\nnameserver 192.0.2.1\nnameserver 127.0.0.1\nsearch example.test\noptions ndots:2\n")
	if got, want := resolvConf(nil), "nameserver 192.0.2.1\nsearch example.test\noptions ndots:2\n"; got != want {
		t.Errorf("host servers:\n%s\nwant\n%s", got, want)
	}
	if got, want := resolvConf([]string{"192.0.2.9", "2001:db8::9"}), "nameserver 192.0.2.9\nnameserver 2001:db8::9\nsearch example.test\noptions ndots:2\n"; got != want {
		t.Errorf("configured servers:\n%s\nwant\n%s", got, want)
	}
	// systemd-resolved: only its stub on loopback in /etc/resolv.conf.
	write(etc, "nameserver 127.0.0.53\nsearch lan.test\n")
	write(resolved, "nameserver 192.0.2.2\nsearch other.test\n")
	if got, want := resolvConf(nil), "nameserver 192.0.2.2\nsearch lan.test\n"; got != want {
		t.Errorf("behind systemd-resolved:\n%s\nwant\n%s", got, want)
	}
	os.Remove(resolved)
	if got := resolvConf(nil); !strings.HasPrefix(got, "# knbox: no name server") {
		t.Errorf("no reachable server: %q", got)
	}
}
