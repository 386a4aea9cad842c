package build

import (
	"bytes"
	"context"
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
	"k8s.io/apimachinery/pkg/types"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
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
