package imagetest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/net/http2"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

const runtimeInfo = "../../../test/images/runtime-info"

// mountPulled pulls ref into a fresh Store and mounts it for one instance.
func mountPulled(t *testing.T, ref string) (*image.Image, string) {
	t.Helper()
	imagetest.Require(t, os.Geteuid() == 0, "mounting overlays needs root")
	s, err := image.Open(image.Options{Root: filepath.Join(t.TempDir(), "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := t.TempDir()
	rootfs, err := s.Mount(img, inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := image.Unmount(inst); err != nil {
			t.Error(err)
		}
	})
	return img, rootfs
}

// TestRuntimeInfoImageRuns builds runtime-info into an image, pushes it,
// pulls and mounts it, runs its entrypoint chrooted into the overlay and
// talks to it over HTTP/1.1 and h2c.
func TestRuntimeInfoImageRuns(t *testing.T) {
	host := imagetest.StartRegistry(t)
	ref := imagetest.PushGoImage(t, host, "runtime-info:test", runtimeInfo, image.Config{Env: []string{"GREETING=hi"}, ExposedPorts: []string{"8080/tcp"}})
	img, rootfs := mountPulled(t, ref)
	if len(img.Layers) != 1 || strings.Join(img.Config.Entrypoint, " ") != "/app" {
		t.Fatalf("image %+v, want one layer and entrypoint /app", img)
	}
	for _, p := range []string{"app", "etc/passwd", "etc/group", "tmp"} {
		if _, err := os.Stat(filepath.Join(rootfs, p)); err != nil {
			t.Errorf("image lacks /%s: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd")); !bytes.Contains(b, []byte("nobody:x:65532:65532")) {
		t.Errorf("/etc/passwd = %q, want a nobody user 65532", b)
	}

	cmd := exec.Command(img.Config.Entrypoint[0])
	cmd.Env = append(img.Config.Env, "PORT=0")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatal("runtime-info printed nothing")
	}
	_, addr, ok := strings.Cut(lines.Text(), "listening on ")
	if !ok {
		t.Fatalf("first line %q", lines.Text())
	}
	_, port, _ := net.SplitHostPort(addr)
	base := "http://127.0.0.1:" + port

	var info struct {
		Env      map[string]string
		UID      int
		Cwd      string
		StdinEOF bool
		Files    []struct {
			Path, Perm, Type string
			Exists           bool
		}
		Request struct{ Proto string }
	}
	getJSON := func(c *http.Client, url string, v any) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	getJSON(http.DefaultClient, base+"/?path=/app", &info)
	if info.Env["GREETING"] != "hi" || info.UID != 0 || info.Cwd != "/" || !info.StdinEOF || info.Request.Proto != "HTTP/1.1" {
		t.Errorf("info: env GREETING=%q uid %d cwd %q stdinEOF %v proto %s", info.Env["GREETING"], info.UID, info.Cwd, info.StdinEOF, info.Request.Proto)
	}
	files := map[string]string{}
	for _, f := range info.Files {
		if f.Exists {
			files[f.Path] = f.Type + " " + f.Perm
		}
	}
	if files["/tmp"] != "dir 1777" || files["/app"] != "file 0755" {
		t.Errorf("files %v, want /tmp dir 1777 and /app file 0755", files)
	}

	h2c := &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	getJSON(h2c, base+"/", &info)
	if info.Request.Proto != "HTTP/2.0" {
		t.Errorf("over h2c the server saw %s", info.Request.Proto)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
	if !strings.Contains(strings.Join(rest, "\n"), "SIGTERM received") {
		t.Errorf("stdout after SIGTERM: %q", rest)
	}
}

func TestBusyboxImageRuns(t *testing.T) {
	host := imagetest.StartRegistry(t)
	ref := imagetest.PushBusyboxImage(t, host, "busybox:test")
	img, rootfs := mountPulled(t, ref)
	if strings.Join(img.Config.Cmd, " ") != "sh" {
		t.Errorf("Cmd = %v, want [sh]", img.Config.Cmd)
	}
	for _, a := range imagetest.BusyboxApplets {
		if l, err := os.Readlink(filepath.Join(rootfs, "bin", a)); err != nil || l != "busybox" {
			t.Errorf("/bin/%s -> %q, %v", a, l, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "echo hello; id -u; head -c 3 /etc/passwd; echo; yes | head -n 2")
	cmd.Env = img.Config.Env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := string(out), "hello\n0\nroo\ny\ny\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestArchivesLoad(t *testing.T) {
	s, err := image.Open(image.Options{Root: filepath.Join(t.TempDir(), "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	layer := []imagetest.File{{Path: "hello", Body: []byte("world")}}
	for _, a := range [][]byte{
		imagetest.DockerArchive(t, "127.0.0.1:1/docker:v1", image.Config{}, layer),
		imagetest.OCIArchive(t, "127.0.0.1:1/oci:v1", image.Config{}, layer),
	} {
		refs, err := s.Load(context.Background(), bytes.NewReader(a))
		if err != nil || len(refs) != 1 {
			t.Fatalf("Load = %v, %v", refs, err)
		}
	}
}
