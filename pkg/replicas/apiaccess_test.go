package replicas

import (
	"net/netip"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// TestAPIAccess: with Options.API, every container gets the kubelet's
// KUBERNETES_* variables (its own win) and the ServiceAccount volume
// (token of the revision's ServiceAccount for the API's audience, ca.crt
// from kube-root-ca.crt, namespace) mounted read-only at
// ServiceAccountMountPath, unless the revision or its ServiceAccount says
// automountServiceAccountToken: false or the container mounts its own
// there. Without Options.API nothing of it.
func TestAPIAccess(t *testing.T) {
	kube := fake.NewSimpleClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "CA PEM"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "robot"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "quiet"}, AutomountServiceAccountToken: ptr.Bool(false)},
	)
	iss := &fakeIssuer{lifetime: time.Hour}
	e := newEnvWith(t, kube, nil, withOptions(func(o *Options) {
		o.Tokens, o.ServiceAccounts, o.API = iss, true, netip.MustParseAddrPort("127.0.0.2:443")
	}))
	e.synced()
	spec := func(m *Manager, name string, mutate func(*servingv1.Revision)) (*revision, []corev1.Container, map[string]map[string]string) {
		t.Helper()
		rev := newRev(t, "ns", name, "", "img", func(r *servingv1.Revision) {
			r.Spec.ServiceAccountName = "robot"
			r.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_PORT", Value: "mine"}}
			if mutate != nil {
				mutate(r)
			}
		})
		r := newRevision(m, key{"ns", name}, rev)
		r.mu.Lock()
		s, _, err := r.podSpecLocked(name+"-abcde", "process")
		r.mu.Unlock()
		r.cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files := map[string]map[string]string{}
		for _, v := range s.Volumes {
			files[v.Name] = map[string]string{}
			for p, f := range v.Files {
				files[v.Name][p] = string(f.Data)
			}
		}
		return r, s.Containers, files
	}
	envOf := func(c corev1.Container) map[string]string {
		out := map[string]string{}
		for _, e := range c.Env {
			if _, dup := out[e.Name]; dup {
				t.Errorf("env %s twice", e.Name)
			}
			out[e.Name] = e.Value
		}
		return out
	}
	mounted := func(c corev1.Container) bool {
		return slices.Contains(c.VolumeMounts, corev1.VolumeMount{Name: APIAccessVolume, ReadOnly: true, MountPath: ServiceAccountMountPath})
	}

	r, ctrs, files := spec(e.m, "on", nil)
	env := envOf(ctrs[0])
	for name, want := range map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.2", "KUBERNETES_SERVICE_PORT": "mine",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": "tcp://127.0.0.2:443", "KUBERNETES_PORT_443_TCP": "tcp://127.0.0.2:443",
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp", "KUBERNETES_PORT_443_TCP_PORT": "443", "KUBERNETES_PORT_443_TCP_ADDR": "127.0.0.2"} {
		if env[name] != want {
			t.Errorf("%s=%q, want %q", name, env[name], want)
		}
	}
	if !mounted(ctrs[0]) {
		t.Errorf("no ServiceAccount mount: %+v", ctrs[0].VolumeMounts)
	}
	if f := files[APIAccessVolume]; f["token"] != "token-1-robot-" || f["ca.crt"] != "CA PEM" || f["namespace"] != "ns" || len(f) != 3 {
		t.Errorf("ServiceAccount volume files %v", f)
	}
	if got := iss.asked[0]; got != "ns/robot  3607" {
		t.Errorf("token asked as %q, want ns/robot for the API's audience, 3607 s", got)
	}
	if !r.srcs["ConfigMap/kube-root-ca.crt"] || !r.srcs["ServiceAccount/robot"] {
		t.Errorf("the volume's sources are not watched: %v", r.srcs)
	}
	// The Pod shows the volume and its mount, as on a cluster.
	if p := r.podOf(&instance{id: "on-abcde", born: time.Now()}); !mounted(p.Spec.Containers[0]) ||
		!slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == APIAccessVolume }) {
		t.Errorf("the Pod lacks the ServiceAccount volume: %+v", p.Spec)
	}

	for name, mutate := range map[string]func(*servingv1.Revision){
		"revision-off": func(r *servingv1.Revision) { r.Spec.AutomountServiceAccountToken = ptr.Bool(false) },
		"sa-off":       func(r *servingv1.Revision) { r.Spec.ServiceAccountName = "quiet" },
	} {
		_, ctrs, files := spec(e.m, name, mutate)
		if mounted(ctrs[0]) || files[APIAccessVolume] != nil {
			t.Errorf("%s: the ServiceAccount volume is mounted", name)
		}
		if envOf(ctrs[0])["KUBERNETES_SERVICE_HOST"] != "127.0.0.2" {
			t.Errorf("%s: no KUBERNETES_SERVICE_HOST (the kubelet sets it regardless)", name)
		}
	}
	_, ctrs, _ = spec(e.m, "own-mount", func(r *servingv1.Revision) {
		r.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		r.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mine", MountPath: ServiceAccountMountPath + "/"}}
	})
	if mounted(ctrs[0]) {
		t.Errorf("a container's own mount at %s is shadowed", ServiceAccountMountPath)
	}

	plain := newEnvWith(t, kube, nil, withOptions(func(o *Options) { o.Tokens, o.ServiceAccounts = iss, true }))
	plain.synced()
	_, ctrs, files = spec(plain.m, "off", nil)
	if mounted(ctrs[0]) || files[APIAccessVolume] != nil || envOf(ctrs[0])["KUBERNETES_SERVICE_HOST"] != "" {
		t.Errorf("without Options.API: %+v", ctrs[0])
	}
}

// TestDownwardAPIProjection: a projected downwardAPI source gives
// metadata.namespace at its path; other fields and bad paths are refused
// by name.
func TestDownwardAPIProjection(t *testing.T) {
	item := func(p, field string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: p, FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}
	}
	files := map[string]pod.File{}
	if err := downwardFiles(files, "ns", &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{item("a/ns", "metadata.namespace")}}, ptr.Int32(0o400)); err != nil ||
		string(files["a/ns"].Data) != "ns" || files["a/ns"].Mode != 0o400 {
		t.Errorf("namespace: %v %+v", err, files)
	}
	for _, it := range []corev1.DownwardAPIVolumeFile{item("x", "metadata.labels"), item("../x", "metadata.namespace"), item("/x", "metadata.namespace"),
		item("", "metadata.namespace"), item("..data", "metadata.namespace"), {Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}} {
		if err := downwardFiles(map[string]pod.File{}, "ns", &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{it}}, nil); err == nil {
			t.Errorf("%+v: accepted", it)
		}
	}
}

// FuzzDownwardAPIProjection: whatever a downwardAPI item says, the files
// it gives stay inside the volume and hold the namespace only.
func FuzzDownwardAPIProjection(f *testing.F) {
	for _, s := range [][2]string{{"namespace", "metadata.namespace"}, {"a/../../b", "metadata.namespace"}, {"..x", "metadata.namespace"},
		{"/etc/passwd", "metadata.namespace"}, {"x", "metadata.labels['a']"}, {"", ""}, {"a//b/", "metadata.namespace"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, field string) {
		files := map[string]pod.File{}
		err := downwardFiles(files, "ns", &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: p, FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}}}, nil)
		if err != nil {
			if len(files) != 0 {
				t.Fatalf("files %v with error %v", files, err)
			}
			return
		}
		for name, file := range files {
			if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.HasPrefix(name, "..") || string(file.Data) != "ns" {
				t.Fatalf("item %q %q gave %q = %q", p, field, name, file.Data)
			}
		}
	})
}
