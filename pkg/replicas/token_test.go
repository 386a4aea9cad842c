package replicas

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// fakeIssuer stands in for the API server's token issuer: its tokens name
// what they were asked for and live for lifetime, whatever was asked, so
// that a test sees refreshes without waiting for minutes.
type fakeIssuer struct {
	lifetime time.Duration

	mu       sync.Mutex
	n        int // tokens issued
	attempts int
	asked    []string // "ns/sa aud secs"
	gone     map[string]bool
}

func (f *fakeIssuer) Issue(_ context.Context, ns, sa string, aud []string, secs int64, _ *serviceaccount.BoundObject) (string, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.gone[ns+"/"+sa] {
		return "", time.Time{}, fmt.Errorf("serviceaccounts %q not found", sa)
	}
	f.n++
	f.asked = append(f.asked, fmt.Sprintf("%s/%s %s %d", ns, sa, strings.Join(aud, ","), secs))
	return fmt.Sprintf("token-%d-%s-%s", f.n, sa, strings.Join(aud, ",")), time.Now().Add(f.lifetime), nil
}

func (f *fakeIssuer) setGone(ns, sa string, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[ns+"/"+sa] = gone
}

func (f *fakeIssuer) issued() (tokens, attempts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.attempts
}

var _ serviceaccount.TokenIssuer = (*fakeIssuer)(nil)

func tokenVolume(path, aud string, secs *int64) corev1.Volume {
	return corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.Int32(0o440),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: aud, ExpirationSeconds: secs, Path: path}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}}},
		}}}}
}

// TestTokenVolumeFiles: a projected serviceAccountToken source is issued
// for the revision's ServiceAccount ("default" when it names none), with
// its audience and lifetime, at its path, beside the volume's other
// sources; bad paths and a missing issuer are config errors.
func TestTokenVolumeFiles(t *testing.T) {
	iss := &fakeIssuer{lifetime: time.Hour}
	e := newEnvWith(t, lookupEnv(t).kube, nil, withOptions(func(o *Options) { o.Tokens = iss }))
	e.synced()
	before := time.Now()
	vols, refresh, err := e.m.volumes("ns", serviceAccountName(&corev1.PodSpec{}), []corev1.Volume{tokenVolume("sub/token", "vault", ptr.Int64(7200))})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := vols[0].Files["sub/token"]
	if !ok || string(f.Data) != "token-1-default-vault" || f.Mode != 0o440 {
		t.Fatalf("token file %+v %v, want token-1-default-vault mode 0440; files %v", f, ok, vols[0].Files)
	}
	if string(vols[0].Files["a"].Data) != "1" {
		t.Errorf("the configMap source beside the token: %v", vols[0].Files)
	}
	if got := iss.asked[0]; got != "ns/default vault 7200" {
		t.Errorf("asked %q, want ns/default vault 7200", got)
	}
	// 80% of the token's hour.
	if lo, hi := before.Add(47*time.Minute), time.Now().Add(49*time.Minute); refresh.Before(lo) || refresh.After(hi) {
		t.Errorf("refresh at %v, want 48 minutes from now", refresh)
	}
	// No audience: the API's (the issuer's default); no lifetime: the default.
	if _, _, err := e.m.volumes("ns", "robot", []corev1.Volume{tokenVolume("token", "", nil)}); err != nil {
		t.Fatal(err)
	}
	if got := iss.asked[1]; got != "ns/robot  0" {
		t.Errorf("asked %q, want the API audience and default lifetime", got)
	}
	for _, p := range []string{"", "/abs", "../up", "..data", "."} {
		if _, _, err := e.m.volumes("ns", "default", []corev1.Volume{tokenVolume(p, "", nil)}); err == nil || !strings.Contains(err.Error(), "serviceAccountToken: path") {
			t.Errorf("path %q: err %v, want a path error", p, err)
		}
	}
	iss.setGone("ns", "ghost", true)
	if _, _, err := e.m.volumes("ns", "ghost", []corev1.Volume{tokenVolume("token", "", nil)}); err == nil || !strings.Contains(err.Error(), `"ghost" not found`) {
		t.Errorf("a missing ServiceAccount: %v", err)
	}
	plain := lookupEnv(t)
	if _, _, err := plain.m.volumes("ns", "default", []corev1.Volume{tokenVolume("token", "", nil)}); err == nil || !strings.Contains(err.Error(), "issues no ServiceAccount tokens") {
		t.Errorf("without an issuer: %v", err)
	}
	if src := sources(&corev1.PodSpec{Volumes: []corev1.Volume{tokenVolume("t", "", nil)}}); !src["ServiceAccount/default"] || !src["ConfigMap/c"] {
		t.Errorf("sources %v: want the ServiceAccount whose token the volume holds", src)
	}
}

// TestTokenRefreshedInRunningInstance: a running instance's token file is
// there (also through a subPath mount, as Knative's conformance test mounts
// it; as on Kubernetes, such a mount keeps the file it had at the start) and
// replaced with a new token after 80% of the old one's lifetime, in place
// (the container is not restarted); when the ServiceAccount is gone the
// volume keeps its last token, and it is refreshed again once it is back.
func TestTokenRefreshedInRunningInstance(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	iss := &fakeIssuer{lifetime: 3 * time.Second}
	e := newEnv(t, []string{"runc"}, withOptions(func(o *Options) { o.Tokens = iss }))
	e.synced()
	e.setConfigMap("ns1", "c", map[string]string{"a": "1"})
	name := uniqueName("tok")
	rev := newRev(t, "ns1", name, "runc", ref, func(r *servingv1.Revision) {
		r.Spec.ServiceAccountName = "robot"
		r.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
			{Name: "tok", MountPath: "/var/run/secrets/tokens", ReadOnly: true},
			// As Knative's conformance test TestProjectedServiceAccountToken
			// mounts it: the one file, by subPath.
			{Name: "tok", MountPath: "/data/token", SubPath: "token", ReadOnly: true},
		}
		r.Spec.Volumes = []corev1.Volume{tokenVolume("token", "api", ptr.Int64(600))}
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name)
	if len(eps) != 1 {
		t.Fatalf("%d endpoints, want 1", len(eps))
	}
	started := getInfo(t, eps[0]).Started
	host := filepath.Join(e.dir, "pods", eps[0].ID, "volumes", "0", "token")
	read := func() string {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	inside := func() string {
		return string(get(t, eps[0], "/file?path=/var/run/secrets/tokens/token"))
	}
	first := read()
	if !strings.HasSuffix(first, "-robot-api") {
		t.Fatalf("token %q, want one for robot with audience api", first)
	}
	if got := string(get(t, eps[0], "/file?path=/data/token")); got != first {
		t.Errorf("the subPath mount holds %q, want the token %q", got, first)
	}
	eventually(t, 30*time.Second, "the token to be refreshed", func() bool { return read() != first })
	if got := inside(); got == first || !strings.HasSuffix(got, "-robot-api") {
		t.Errorf("the container reads %q after the refresh (first %q)", got, first)
	}
	// The ServiceAccount goes: the token stays as it was.
	iss.setGone("ns1", "robot", true)
	_, tried := iss.issued()
	kept := read()
	eventually(t, 30*time.Second, "a refresh attempt that fails", func() bool { _, a := iss.issued(); return a > tried })
	if got := read(); got != kept {
		t.Errorf("the token changed to %q while its ServiceAccount was gone", got)
	}
	n, _ := iss.issued()
	iss.setGone("ns1", "robot", false)
	eventually(t, 30*time.Second, "a refresh once the ServiceAccount is back", func() bool { i, _ := iss.issued(); return i > n && read() != kept })
	if now := getInfo(t, eps[0]).Started; !now.Equal(started) {
		t.Errorf("the container restarted (%v, then %v): tokens must change in place", started, now)
	}
}

// FuzzTokenPath: whatever path and lifetime a projected serviceAccountToken
// source names (they come from the API), the token is refused or lands at a
// clean relative path inside the volume that does not start with "..".
func FuzzTokenPath(f *testing.F) {
	f.Add("token", int64(3600), int32(0o644))
	f.Add("../escape", int64(600), int32(0o600))
	f.Add("..data", int64(0), int32(0o444))
	f.Add("/abs", int64(-1), int32(-1))
	f.Add("a/../../b", int64(1<<40), int32(0o7777))
	f.Add("./a//b/", int64(601), int32(0))
	m := &Manager{opts: Options{Tokens: &fakeIssuer{lifetime: time.Hour}}, ctx: context.Background()}
	f.Fuzz(func(t *testing.T, p string, secs int64, mode int32) {
		files := map[string]pod.File{}
		_, err := m.tokenFile(files, "ns", "default", &corev1.ServiceAccountTokenProjection{Path: p, ExpirationSeconds: &secs}, &mode)
		if err != nil {
			return
		}
		for fp, file := range files {
			if fp != path.Clean(fp) || path.IsAbs(fp) || strings.HasPrefix(fp, "..") || fp == "." {
				t.Fatalf("token path %q became %q, which leaves the volume or names its own entries", p, fp)
			}
			if file.Mode&^0o777 != 0 {
				t.Fatalf("mode %o has bits beyond the permissions", file.Mode)
			}
		}
	})
}
