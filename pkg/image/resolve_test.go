package image

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
)

func TestPlainHTTPAllowed(t *testing.T) {
	insecure := []string{"registry.lan:5000", "10.0.0.7", "Build.Example.COM"}
	tests := []struct {
		registry string
		want     bool
	}{
		{"127.0.0.1:5000", true},
		{"127.1.2.3", true},
		{"localhost", true},
		{"localhost:5000", true},
		{"[::1]:5000", true},
		{"::1", true},
		{"registry.lan:5000", true},
		{"registry.lan:5001", false}, // the entry has a port: only that one
		{"registry.lan", false},
		{"10.0.0.7:5000", true}, // the entry has no port: any port
		{"build.example.com", true},
		// go-containerregistry alone would allow plain HTTP for these:
		{"10.1.2.3:5000", false},
		{"192.168.1.10", false},
		{"172.16.0.1:443", false},
		{"printer.local", false},
		{"index.docker.io", false},
		{"gcr.io", false},
		{"localhost.evil.com", false},
		{"128.0.0.1", false},
	}
	for _, tt := range tests {
		if got := plainHTTPAllowed(tt.registry, insecure); got != tt.want {
			t.Errorf("plainHTTPAllowed(%q) = %v, want %v", tt.registry, got, tt.want)
		}
	}
}

// recordingTransport stands in for the network: it records and fails every
// request, so nothing is ever sent.
type recordingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.Scheme+"://"+req.URL.Host)
	r.mu.Unlock()
	return nil, errors.New("no network in this test")
}

func (r *recordingTransport) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

func TestGuardTransport(t *testing.T) {
	tests := []struct {
		url      string
		reachesT bool
	}{
		{"http://10.1.2.3:5000/v2/", false},
		{"http://registry.example.com/v2/", false},
		{"https://10.1.2.3:5000/v2/", true},
		{"http://127.0.0.1:5000/v2/", true},
		{"http://insecure.example:5000/v2/", true},
	}
	for _, tt := range tests {
		base := &recordingTransport{}
		g := &guardTransport{base: base, allow: func(h string) bool { return plainHTTPAllowed(h, []string{"insecure.example:5000"}) }}
		req, _ := http.NewRequest("GET", tt.url, nil)
		_, err := g.RoundTrip(req)
		if got := len(base.sent()) == 1; got != tt.reachesT {
			t.Errorf("%s: reached the transport = %v, want %v (err %v)", tt.url, got, tt.reachesT, err)
		}
		if !tt.reachesT && (err == nil || !strings.Contains(err.Error(), "refusing plain HTTP")) {
			t.Errorf("%s: err %v, want a refusal", tt.url, err)
		}
	}
}

// TestResolveNeverPlainHTTPToPrivateRegistry runs Resolve against a private
// address with the network replaced: go-containerregistry would fall back to
// plain HTTP for an RFC 1918 registry; knbox must not even try.
func TestResolveNeverPlainHTTPToPrivateRegistry(t *testing.T) {
	for _, tt := range []struct {
		insecure  []string
		wantPlain bool
	}{
		{nil, false},
		{[]string{"10.1.2.3:5000"}, true},
	} {
		s, err := Open(Options{Root: t.TempDir(), Insecure: tt.insecure, Keychain: authn.NewMultiKeychain()})
		if err != nil {
			t.Fatal(err)
		}
		base := &recordingTransport{}
		s.transport = &guardTransport{base: base, allow: s.plainHTTPAllowed}
		if _, err := s.Resolve(context.Background(), "10.1.2.3:5000/app:v1", nil); err == nil {
			t.Fatal("Resolve succeeded without a network")
		}
		t.Logf("insecure %v: requests %v", tt.insecure, base.sent())
		plain := false
		for _, u := range base.sent() {
			if strings.HasPrefix(u, "http://") {
				plain = true
			}
		}
		if plain != tt.wantPlain {
			t.Errorf("insecure %v: requests %v, plain HTTP tried = %v, want %v", tt.insecure, base.sent(), plain, tt.wantPlain)
		}
	}
}

func TestPickPlatform(t *testing.T) {
	other := "s390x"
	if platform.Architecture == other {
		other = "arm64"
	}
	d := func(i int) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(string(rune('a'+i)), 64)} }
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{
		{MediaType: types.OCIManifestSchema1, Digest: d(0), Platform: &v1.Platform{OS: "linux", Architecture: other}},
		{MediaType: types.OCIManifestSchema1, Digest: d(1), Platform: &v1.Platform{OS: "windows", Architecture: platform.Architecture}},
		{MediaType: types.OCIManifestSchema1, Digest: d(2), Platform: &v1.Platform{OS: "linux", Architecture: platform.Architecture, Variant: "v3"}},
		{MediaType: types.OCIManifestSchema1, Digest: d(3), Platform: &v1.Platform{OS: "linux", Architecture: platform.Architecture}},
		{MediaType: types.OCIManifestSchema1, Digest: d(4), Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}},
	}}
	raw, _ := json.Marshal(idx)
	got, err := pickPlatform(raw)
	if err != nil || got.Digest != d(3) {
		t.Errorf("pickPlatform = %v, %v; want the manifest without a variant", got.Digest, err)
	}
	idx.Manifests = idx.Manifests[:2]
	raw, _ = json.Marshal(idx)
	if _, err := pickPlatform(raw); err == nil || !strings.Contains(err.Error(), "no image for") {
		t.Errorf("pickPlatform without a match: %v", err)
	}
}

func dockerConfigSecret(t *testing.T, name string, auths map[string]any) corev1.Secret {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	return corev1.Secret{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: raw},
	}
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

func TestSecretsKeychain(t *testing.T) {
	cfgjson := dockerConfigSecret(t, "a", map[string]any{
		"https://index.docker.io/v1/":    map[string]string{"auth": basicAuth("hub", "p1")},
		"registry.example.com":           map[string]string{"username": "whole", "password": "p2"},
		"registry.example.com/team":      map[string]string{"username": "team", "password": "p3"},
		"*.corp.example":                 map[string]string{"auth": basicAuth("corp", "p4")},
		"http://ports.example.com:5000/": map[string]string{"username": "port", "password": "p5"},
	})
	legacy, _ := json.Marshal(map[string]any{"old.example.com": map[string]string{"auth": basicAuth("old", "p6")}})
	dockercfg := corev1.Secret{Type: corev1.SecretTypeDockercfg, Data: map[string][]byte{corev1.DockerConfigKey: legacy}}
	opaque := corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("not docker")}}
	later := dockerConfigSecret(t, "b", map[string]any{"registry.example.com": map[string]string{"username": "later", "password": "x"}})

	kc, err := SecretsKeychain([]corev1.Secret{opaque, cfgjson, dockercfg, later})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		repo string
		want string // username, "" for anonymous
	}{
		{"busybox", "hub"},
		{"docker.io/library/busybox", "hub"},
		{"registry.example.com/app", "whole"},
		{"registry.example.com/team/app", "team"},
		{"registry.example.com/teamster/app", "whole"},
		{"a.corp.example/app", "corp"},
		{"a.b.corp.example/app", ""}, // a glob matches one label
		{"ports.example.com:5000/app", "port"},
		{"ports.example.com/app", ""},
		{"old.example.com/app", "old"},
		{"elsewhere.example.com/app", ""},
	}
	for _, tt := range tests {
		ref, err := name.ParseReference(tt.repo)
		if err != nil {
			t.Fatal(err)
		}
		a, err := kc.Resolve(ref.Context())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Username != tt.want {
			t.Errorf("%s: user %q, want %q", tt.repo, cfg.Username, tt.want)
		}
	}

	bad := corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("{")}}
	if _, err := SecretsKeychain([]corev1.Secret{bad}); err == nil {
		t.Error("a malformed dockerconfigjson was accepted")
	}
	empty := corev1.Secret{Type: corev1.SecretTypeDockerConfigJson}
	if _, err := SecretsKeychain([]corev1.Secret{empty}); err == nil {
		t.Error("a dockerconfigjson Secret without data was accepted")
	}
}

func TestOverlayLowerDirs(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"72 27 0:45 / /r rw,relatime - overlay overlay rw,lowerdir+=/l/a,lowerdir+=/l/b,upperdir=/u,workdir=/w", []string{"/l/a", "/l/b"}},
		{"72 27 0:45 / /r rw - overlay overlay rw,lowerdir=/l/a:/l/b\\:c,upperdir=/u,workdir=/w", []string{"/l/a", "/l/b:c"}},
		{"72 27 0:45 / /r rw - overlay overlay rw,lowerdir=/with\\040space,upperdir=/u", []string{"/with space"}},
		{"72 27 0:45 / /r rw - overlay overlay rw,lowerdir=/l/a,datadir+=/d", []string{"/l/a", "/d"}},
		{"22 27 0:21 / /proc rw - proc proc rw", nil},
		{"garbage", nil},
	}
	for _, tt := range tests {
		got := overlayLowerDirs(tt.line)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("overlayLowerDirs(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestFlightSharesAndSurvivesOneCancel(t *testing.T) {
	var f flight[int]
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	fn := func(ctx context.Context) (int, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		select {
		case <-release:
			return 42, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	impatient, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.do(impatient, "k", fn)
		errc <- err
	}()
	<-started
	res := make(chan int, 1)
	go func() {
		v, _ := f.do(context.Background(), "k", fn)
		res <- v
	}()
	// Wait for the second caller to join before the first gives up.
	for {
		f.mu.Lock()
		n := f.calls["k"].waiters
		f.mu.Unlock()
		if n == 2 {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v", err)
	}
	close(release)
	if v := <-res; v != 42 {
		t.Fatalf("patient caller got %d, want 42 (the work must go on for it)", v)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
}

// FuzzSecretsKeychain feeds arbitrary docker configs through SecretsKeychain
// and a lookup: errors are fine, panics are not.
func FuzzSecretsKeychain(f *testing.F) {
	f.Add([]byte(`{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"}}}`), "busybox")
	f.Add([]byte(`{"auths":{"*.example.com:5000/team":{"username":"u","password":"p"}}}`), "a.example.com:5000/team/app")
	f.Add([]byte(`{"auths":{"[::1]:5000":{"auth":"!!"}}}`), "[::1]:5000/x")
	f.Fuzz(func(t *testing.T, cfg []byte, repo string) {
		for _, typ := range []corev1.SecretType{corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg} {
			key := corev1.DockerConfigJsonKey
			if typ == corev1.SecretTypeDockercfg {
				key = corev1.DockerConfigKey
			}
			kc, err := SecretsKeychain([]corev1.Secret{{Type: typ, Data: map[string][]byte{key: cfg}}})
			if err != nil {
				continue
			}
			ref, err := name.ParseReference(repo)
			if err != nil {
				continue
			}
			if _, err := kc.Resolve(ref.Context()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzOverlayLowerDirs feeds arbitrary mountinfo lines to the parser.
func FuzzOverlayLowerDirs(f *testing.F) {
	f.Add("72 27 0:45 / /r rw - overlay overlay rw,lowerdir=/a\\:b:/c\\040d,upperdir=/u")
	f.Add("72 27 0:45 / /r rw - overlay overlay rw,lowerdir+=/a,datadir+=/d\\")
	f.Fuzz(func(t *testing.T, line string) {
		overlayLowerDirs(line)
	})
}
