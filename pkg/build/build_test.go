package build

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

func TestSources(t *testing.T) {
	s, err := NewSources(filepath.Join(t.TempDir(), "sources"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.put("UID-A", strings.NewReader("archive a")); err != nil {
		t.Fatal(err)
	}
	if err := s.put("uid-b", strings.NewReader("archive b")); err != nil {
		t.Fatal(err)
	}
	if !s.has("UID-A") || !s.has("uid-b") || s.has("uid-c") {
		t.Fatal("has")
	}
	if b, _ := os.ReadFile(s.path("uid-a")); string(b) != "archive a" {
		t.Errorf("content %q", b)
	}
	// A partial upload and an archive of a Build gone while knbox was down.
	_ = os.WriteFile(filepath.Join(s.dir, ".upload-123"), []byte("x"), 0o600)
	s.keep(map[types.UID]bool{"uid-a": true})
	ents, _ := os.ReadDir(s.dir)
	if len(ents) != 1 || ents[0].Name() != "uid-a.tar" {
		t.Errorf("after keep: %v", ents)
	}
	s.remove("uid-a")
	if s.has("uid-a") {
		t.Error("removed archive still there")
	}
}

func TestFailureMessage(t *testing.T) {
	b := &buildv1alpha1.Build{}
	for _, tc := range []struct {
		f    *pod.Failure
		want string
	}{
		{&pod.Failure{Reason: pod.ReasonError, Container: "compile", ExitCode: 2, Message: "undefined: x"}, `step "compile" failed (exit code 2): undefined: x`},
		{&pod.Failure{Reason: pod.ReasonError, Container: "big", OOMKilled: true, ExitCode: 137, Message: "OOMKilled"}, `step "big" failed (OOMKilled): OOMKilled`},
		{&pod.Failure{Reason: pod.ReasonImagePullBackOff, Message: `Back-off pulling image "x"`}, `ImagePullBackOff: Back-off pulling image "x"`},
		{nil, "the build failed"},
	} {
		if got := failureMessage(b, pod.Status{LastFailure: tc.f}); got != tc.want {
			t.Errorf("failureMessage(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	files, err := keyFiles(data, nil, nil)
	if err != nil || len(files) != 2 || files["a"].Mode != 0o644 {
		t.Errorf("all keys: %v %v", files, err)
	}
	mode := int32(0o400)
	files, err = keyFiles(data, []corev1.KeyToPath{{Key: "b", Path: "dir/b", Mode: &mode}}, nil)
	if err != nil || len(files) != 1 || files["dir/b"].Mode != 0o400 {
		t.Errorf("items: %v %v", files, err)
	}
	if _, err := keyFiles(data, []corev1.KeyToPath{{Key: "c", Path: "c"}}, nil); err == nil {
		t.Error("a missing key accepted")
	}
}

// TestForward: a registry on the host's loopback is reached at the same
// address from inside a build's network namespace, and nothing is once
// Close returned.
func TestForward(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CAP_SYS_ADMIN); CI runs as root")
		}
		t.Skip("needs root (CAP_SYS_ADMIN)")
	}
	root := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	ns, err := network.CreateIn(root, "build-forward-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	addr := netip.MustParseAddrPort(l.Addr().String())
	f, err := Forward(ns, []netip.AddrPort{addr}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("GET /v2/ HTTP/1.1\r\n\r\n")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through the forward: %q %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// The relayed connection ends with Close, and no new one is accepted.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(got); err == nil {
		t.Error("a relayed connection outlived Close")
	}
	c.Close()
	if c, err := ns.Dial(ctx, "tcp", addr.String()); err == nil {
		c.Close()
		t.Error("the forward still listens after Close")
	}
}

type fakeTokens struct{ fail bool }

func (f fakeTokens) Issue(_ context.Context, ns, sa string, _ []string, exp int64, _ *serviceaccount.BoundObject) (string, time.Time, error) {
	if f.fail {
		return "", time.Time{}, errors.New("serviceaccount not found")
	}
	return "token-of-" + ns + "-" + sa, time.Now().Add(time.Duration(exp) * time.Second), nil
}

// TestRegistryCredentials: every step gets the docker config of the
// Build's ServiceAccount (DOCKER_CONFIG unless it sets its own); a
// ServiceAccount without a token gets none.
func TestRegistryCredentials(t *testing.T) {
	c := &Controller{opts: Options{Registry: &RegistryAccess{Hosts: []string{"127.0.0.1:5000"}, Tokens: fakeTokens{}}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b := &buildv1alpha1.Build{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "team-a"}, Spec: buildv1alpha1.BuildSpec{ServiceAccountName: "builder"}}
	spec := pod.Spec{Containers: []corev1.Container{{Name: "a"}, {Name: "b", Env: []corev1.EnvVar{{Name: "DOCKER_CONFIG", Value: "/mine"}}}}}
	c.registryCredentials(context.Background(), b, time.Minute, &spec)
	if len(spec.Volumes) != 1 || spec.Volumes[0].Name != RegistryVolume {
		t.Fatalf("volumes %+v", spec.Volumes)
	}
	var cfg struct {
		Auths map[string]struct{ Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(spec.Volumes[0].Files["config.json"].Data, &cfg); err != nil {
		t.Fatal(err)
	}
	auth, _ := base64.StdEncoding.DecodeString(cfg.Auths["127.0.0.1:5000"].Auth)
	if string(auth) != "builder:token-of-team-a-builder" {
		t.Errorf("auth %q", auth)
	}
	if e := spec.Containers[0].Env; len(e) != 2 || e[0] != (corev1.EnvVar{Name: RegistryEnv, Value: "127.0.0.1:5000"}) ||
		e[1].Value != RegistryConfigDir || len(spec.Containers[0].VolumeMounts) != 1 {
		t.Errorf("step a: %+v", spec.Containers[0])
	}
	if e := spec.Containers[1].Env; len(e) != 2 || e[0].Name != RegistryEnv || e[1].Value != "/mine" {
		t.Errorf("a step's own DOCKER_CONFIG was replaced: %+v", e)
	}
	c.opts.Registry.Tokens = fakeTokens{fail: true}
	spec = pod.Spec{Containers: []corev1.Container{{Name: "a"}}}
	c.registryCredentials(context.Background(), b, time.Minute, &spec)
	if len(spec.Volumes) != 0 || len(spec.Containers[0].Env) != 1 || spec.Containers[0].Env[0].Name != RegistryEnv {
		t.Errorf("credentials without a token: %+v", spec)
	}
}
