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
	"path"
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
	// SparseSize, on a regular file, writes it as a PAX 1.0 sparse file
	// (as GNU tar does) of that length, all of it a hole but Body at its
	// end: a few hundred bytes of layer that unpack to SparseSize bytes.
	SparseSize int64
	// Dev is the major and minor number of a character or block device.
	DevMajor, DevMinor int64
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

// BlobOverrides makes a registry serve other bytes for some blobs (a bad
// digest, a wrong size), with or without a Content-Length, and counts the
// GETs of every blob. Use its Wrap with StartRegistryWith.
type BlobOverrides struct {
	mu      sync.Mutex
	bodies  map[string][]byte // by digest
	chunked map[string]bool
	gets    map[string]int
}

// Serve makes the registry answer GETs of the blob digest with body,
// without a Content-Length if chunked.
func (o *BlobOverrides) Serve(digest string, body []byte, chunked bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bodies == nil {
		o.bodies, o.chunked = map[string][]byte{}, map[string]bool{}
	}
	o.bodies[digest], o.chunked[digest] = body, chunked
}

// Gets is how many times the blob digest was fetched.
func (o *BlobOverrides) Gets(digest string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gets[digest]
}

// Wrap is the registry handler wrapper.
func (o *BlobOverrides) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := strings.LastIndex(r.URL.Path, "/blobs/")
		if r.Method != http.MethodGet || i < 0 {
			h.ServeHTTP(w, r)
			return
		}
		d := r.URL.Path[i+len("/blobs/"):]
		o.mu.Lock()
		if o.gets == nil {
			o.gets = map[string]int{}
		}
		o.gets[d]++
		body, ok := o.bodies[d]
		chunked := o.chunked[d]
		o.mu.Unlock()
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		if !chunked {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		}
		w.WriteHeader(http.StatusOK)
		if f, ok := w.(http.Flusher); ok && chunked {
			f.Flush()
		}
		_, _ = w.Write(body)
	})
}

// FirstLayer is the descriptor of the first layer of the image that the
// digest reference ref names, in a registry on loopback.
func FirstLayer(t testing.TB, ref string) v1.Descriptor {
	t.Helper()
	d, err := name.NewDigest(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) == 0 {
		t.Fatalf("%s has no layer", ref)
	}
	return m.Layers[0]
}

// Layer returns an uncompressed layer tar of files, in order. Parent
// directories are not added implicitly.
func Layer(t testing.TB, files ...File) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if f.SparseSize > 0 {
			writeSparse(t, tw, &buf, f)
			continue
		}
		hdr := &tar.Header{
			Name:     f.Path,
			Typeflag: f.Type,
			Mode:     f.Mode,
			Linkname: f.Link,
			Uid:      f.UID,
			Gid:      f.GID,
			Devmajor: f.DevMajor,
			Devminor: f.DevMinor,
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

// writeSparse writes f as a PAX 1.0 sparse file: a PAX header with the
// GNU.sparse records (which tar.Writer will not write itself), then an
// entry whose data is the sparse map and the data of its one region, Body,
// at the end of the file.
func writeSparse(t testing.TB, tw *tar.Writer, buf *bytes.Buffer, f File) {
	t.Helper()
	if err := tw.Flush(); err != nil {
		t.Fatalf("layer: %s: %v", f.Path, err)
	}
	if int64(len(f.Body)) > f.SparseSize {
		t.Fatalf("layer: %s: body longer than SparseSize", f.Path)
	}
	record := func(k, v string) string {
		line := " " + k + "=" + v + "\n"
		n := len(line)
		for len(fmt.Sprint(n))+len(line) != n {
			n = len(fmt.Sprint(n)) + len(line)
		}
		return fmt.Sprint(n) + line
	}
	pax := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") +
		record("GNU.sparse.name", f.Path) + record("GNU.sparse.realsize", fmt.Sprint(f.SparseSize))
	buf.Write(rawHeader(t, "PaxHeaders/"+path.Base(f.Path), 'x', int64(len(pax))))
	buf.WriteString(pax)
	buf.Write(make([]byte, (512-len(pax)%512)%512))
	// The map: one region, at the end, then the region's data.
	sparseMap := fmt.Sprintf("1\n%d\n%d\n", f.SparseSize-int64(len(f.Body)), len(f.Body))
	sparseMap += strings.Repeat("\x00", (512-len(sparseMap)%512)%512)
	data := append([]byte(sparseMap), f.Body...)
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	hdr := &tar.Header{Name: "GNUSparseFile.0/" + path.Base(f.Path), Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: modTime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatalf("layer: %s: %v", f.Path, err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatalf("layer: %s: %v", f.Path, err)
	}
}

// rawHeader is a ustar header block of the given name, type and size.
func rawHeader(t testing.TB, name string, typ byte, size int64) []byte {
	t.Helper()
	var b [512]byte
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", modTime.Unix()))
	b[156] = typ
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b[:]
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
	return Push(t, host, repoTag, Build(t, cfg, layers...))
}

// Build returns an image of the given layers with cfg as its config, for
// tests that write it somewhere themselves. Its platform is this machine's.
func Build(t testing.TB, cfg image.Config, layers ...[]File) v1.Image {
	t.Helper()
	raw := make([][]byte, len(layers))
	for i, files := range layers {
		raw[i] = Layer(t, files...)
	}
	return BuildRaw(t, cfg, raw...)
}

// PushRaw is PushImage of layers given as uncompressed tars (gzipped when
// pushed), for layers Layer cannot make: anything after the tar's end,
// broken tars.
func PushRaw(t testing.TB, host, repoTag string, cfg image.Config, layers ...[]byte) string {
	t.Helper()
	return Push(t, host, repoTag, BuildRaw(t, cfg, layers...))
}

// Push pushes img to the registry at host as repoTag and returns its
// digest reference.
func Push(t testing.TB, host, repoTag string, img v1.Image) string {
	t.Helper()
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

// BuildRaw is Build of layers given as uncompressed tars.
func BuildRaw(t testing.TB, cfg image.Config, layers ...[]byte) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, data := range layers {
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
