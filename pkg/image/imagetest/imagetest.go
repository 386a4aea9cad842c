// Package imagetest helps tests in any package with container images: it
// starts an in-process registry (go-containerregistry's pkg/registry on
// loopback), builds images from Go main packages, from the host's static
// busybox or from listed files, pushes them, and writes them as `docker save`
// and OCI layout archives. It is for tests only; it sends traffic to
// loopback addresses only.
package imagetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/knbox/knbox/pkg/image"
)

// DefaultPath is the PATH of images built here unless their Config sets one.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// NobodyUID is the uid (and gid) of the "nobody" user in built images.
const NobodyUID = 65532

// BusyboxApplets are the applets linked to /bin/busybox in PushBusyboxImage.
var BusyboxApplets = []string{"sh", "sleep", "echo", "cat", "id", "ls", "env", "dd", "head", "yes", "nc"}

// modTime is the time of every file in built layers, so digests are stable.
var modTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// File is an entry of a layer built by Layer.
type File struct {
	Path string // relative to the image root, "etc/passwd"
	// Type is a tar type flag; zero means a regular file (tar.TypeReg).
	// OCI whiteouts are regular files named ".wh.<name>" and ".wh..wh..opq".
	Type byte
	// Mode is the permission bits, setuid/setgid/sticky included; zero
	// means 0644 for files, 0755 for directories, 0777 for symlinks.
	Mode     int64
	Body     []byte
	Link     string // target of a symlink or hard link
	UID, GID int
}

// Require skips the test with reason, or fails it when the CI environment
// variable is set, since CI installs everything tests need.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so not skipping: %s", reason)
	}
	t.Skip(reason)
}

// StartRegistry starts an in-process registry on 127.0.0.1:0 (plain HTTP),
// stopped when the test ends, and returns its host:port.
func StartRegistry(t testing.TB) string {
	return StartRegistryWith(t, nil)
}

// StartRegistryWith is StartRegistry with the registry's handler wrapped, to
// count requests, demand credentials, inject faults, ...
func StartRegistryWith(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Layer returns an uncompressed layer tar of files, in order. Parent
// directories are not added implicitly.
func Layer(t testing.TB, files ...File) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:     f.Path,
			Typeflag: f.Type,
			Mode:     f.Mode,
			Linkname: f.Link,
			Uid:      f.UID,
			Gid:      f.GID,
			ModTime:  modTime,
			Format:   tar.FormatPAX,
		}
		switch hdr.Typeflag {
		case 0, tar.TypeReg:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.Body))
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
		case tar.TypeDir:
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
			if !strings.HasSuffix(hdr.Name, "/") {
				hdr.Name += "/"
			}
		case tar.TypeSymlink:
			if hdr.Mode == 0 {
				hdr.Mode = 0o777
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("layer: %s: %v", f.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Body); err != nil {
				t.Fatalf("layer: %s: %v", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("layer: %v", err)
	}
	return buf.Bytes()
}

// BaseFiles are the files every image built by PushGoImage and
// PushBusyboxImage has: /etc/passwd and /etc/group with root and nobody
// (uid and gid 65532), and a world-writable sticky /tmp.
func BaseFiles() []File {
	return []File{
		{Path: "etc", Type: tar.TypeDir},
		{Path: "etc/passwd", Body: []byte(fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nnobody:x:%d:%d:nobody:/nonexistent:/sbin/nologin\n", NobodyUID, NobodyUID))},
		{Path: "etc/group", Body: []byte(fmt.Sprintf("root:x:0:\nnobody:x:%d:\n", NobodyUID))},
		{Path: "tmp", Type: tar.TypeDir, Mode: 0o1777},
	}
}

// PushImage builds an image of the given layers (bottom first, each a list
// of files) with cfg as its config, pushes it to the registry at host as
// repoTag ("app:v1", "team/app:v1") and returns its digest reference,
// host/repo@sha256:....
func PushImage(t testing.TB, host, repoTag string, cfg image.Config, layers ...[]File) string {
	t.Helper()
	img := Build(t, cfg, layers...)
	tag, err := name.NewTag(host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatalf("push %s: %v", repoTag, err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("push %s: %v", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("push %s: %v", tag, err)
	}
	return tag.Context().Name() + "@" + d.String()
}

// Build returns an image of the given layers with cfg as its config, for
// tests that write it somewhere themselves. Its platform is this machine's.
func Build(t testing.TB, cfg image.Config, layers ...[]File) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, files := range layers {
		data := Layer(t, files...)
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatalf("build image: %v", err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatalf("build image: %v", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("build image: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = runtime.GOOS, runtime.GOARCH
	cf.Created = v1.Time{Time: modTime}
	cf.Config.Entrypoint = slices.Clone(cfg.Entrypoint)
	cf.Config.Cmd = slices.Clone(cfg.Cmd)
	cf.Config.Env = slices.Clone(cfg.Env)
	if !slices.ContainsFunc(cf.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		cf.Config.Env = append([]string{DefaultPath}, cf.Config.Env...)
	}
	cf.Config.WorkingDir = cfg.WorkingDir
	cf.Config.User = cfg.User
	if len(cfg.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range cfg.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatalf("build image: %v", err)
	}
	return img
}

// PushGoImage builds the Go main package mainPkg (a directory or an import
// path) with CGO_ENABLED=0 into a static binary (built once per test binary
// run), makes a one-layer image with it at /app plus BaseFiles, with
// Entrypoint ["/app"] unless cfg sets one, pushes it to the registry at host
// as repoTag and returns its digest reference.
func PushGoImage(t testing.TB, host, repoTag, mainPkg string, cfg image.Config) string {
	t.Helper()
	bin := BuildGo(t, mainPkg)
	if len(cfg.Entrypoint) == 0 {
		cfg.Entrypoint = []string{"/app"}
	}
	files := append(BaseFiles(), File{Path: "app", Mode: 0o755, Body: bin})
	return PushImage(t, host, repoTag, cfg, files)
}

// PushBusyboxImage makes a one-layer image of the host's static busybox
// (Debian's busybox-static) at /bin/busybox with applet symlinks
// (BusyboxApplets) in /bin, plus BaseFiles, with Cmd ["sh"], pushes it to
// the registry at host as repoTag and returns its digest reference.
func PushBusyboxImage(t testing.TB, host, repoTag string) string {
	t.Helper()
	return PushImage(t, host, repoTag, image.Config{Cmd: []string{"sh"}}, BusyboxFiles(t))
}

// BusyboxFiles are the files of PushBusyboxImage's layer. It skips the test
// (fails it in CI) when /bin/busybox is missing.
func BusyboxFiles(t testing.TB) []File {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	Require(t, err == nil, "no /bin/busybox: apt-get install busybox-static")
	files := append(BaseFiles(),
		File{Path: "bin", Type: tar.TypeDir},
		File{Path: "bin/busybox", Mode: 0o755, Body: bb},
	)
	for _, a := range BusyboxApplets {
		files = append(files, File{Path: "bin/" + a, Type: tar.TypeSymlink, Link: "busybox"})
	}
	return files
}

// builds caches Go builds per test binary run.
var builds struct {
	sync.Mutex
	m map[string]*goBuild
}

type goBuild struct {
	once sync.Once
	bin  []byte
	err  error
}

// BuildGo builds the Go main package mainPkg (a directory, relative to the
// test's working directory, or an import path) as a static linux binary and
// returns it. Each package is built once per test binary run.
func BuildGo(t testing.TB, mainPkg string) []byte {
	t.Helper()
	key := mainPkg
	if fi, err := os.Stat(mainPkg); err == nil && fi.IsDir() {
		if abs, err := filepath.Abs(mainPkg); err == nil {
			key = abs
		}
	}
	builds.Lock()
	if builds.m == nil {
		builds.m = map[string]*goBuild{}
	}
	b, ok := builds.m[key]
	if !ok {
		b = &goBuild{}
		builds.m[key] = b
	}
	builds.Unlock()
	b.once.Do(func() { b.bin, b.err = buildGo(key) })
	if b.err != nil {
		t.Fatalf("build %s: %v", mainPkg, b.err)
	}
	return b.bin
}

func buildGo(pkg string) ([]byte, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	dir, err := os.MkdirTemp("", "imagetest-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "app")
	cmd := exec.Command(gobin, "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, msg)
	}
	return os.ReadFile(out)
}

// DockerArchive returns a `docker save` tarball (written by
// go-containerregistry's tarball.Write) of an image built from layers and
// cfg, tagged repoTag.
func DockerArchive(t testing.TB, repoTag string, cfg image.Config, layers ...[]File) []byte {
	t.Helper()
	tag, err := name.NewTag(repoTag)
	if err != nil {
		t.Fatalf("docker archive: %v", err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, Build(t, cfg, layers...), &buf); err != nil {
		t.Fatalf("docker archive: %v", err)
	}
	return buf.Bytes()
}

// OCIArchive returns a tar of an OCI image layout holding an image built from
// layers and cfg, whose descriptor in index.json is annotated with refName
// (org.opencontainers.image.ref.name) unless it is empty.
func OCIArchive(t testing.TB, refName string, cfg image.Config, layers ...[]File) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatalf("oci archive: %v", err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	if err := p.AppendImage(Build(t, cfg, layers...), opts...); err != nil {
		t.Fatalf("oci archive: %v", err)
	}
	return TarDir(t, dir)
}

// TarDir returns a tar of the regular files and directories under dir, with
// names relative to it.
func TarDir(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatalf("tar %s: %v", dir, err)
	}
	return buf.Bytes()
}
