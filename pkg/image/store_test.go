package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

var ctx = context.Background()

// newStore opens a Store in a temporary directory with no credentials of the
// machine's user, so tests are hermetic.
func newStore(t *testing.T, opts ...func(*image.Options)) *image.Store {
	t.Helper()
	o := image.Options{Root: filepath.Join(t.TempDir(), "images"), Keychain: authn.NewMultiKeychain()}
	for _, f := range opts {
		f(&o)
	}
	s, err := image.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// requireOverlay skips (fails in CI) unless this process can mount overlays.
func requireOverlay(t *testing.T) {
	t.Helper()
	imagetest.Require(t, os.Geteuid() == 0, "mounting overlays needs root")
	fsys, _ := os.ReadFile("/proc/filesystems")
	imagetest.Require(t, bytes.Contains(fsys, []byte("\toverlay\n")), "the kernel has no overlay file system")
}

// counter counts the registry's requests by "METHOD kind" (kind: manifests, blobs, ...).
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := "other"
		for _, k := range []string{"/manifests/", "/blobs/uploads", "/blobs/"} {
			if strings.Contains(r.URL.Path, k) {
				kind = strings.Trim(k, "/")
				break
			}
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[r.Method+" "+kind]++
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

func (c *counter) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

func file(p, body string) imagetest.File { return imagetest.File{Path: p, Body: []byte(body)} }

func dir(p string) imagetest.File { return imagetest.File{Path: p, Type: tar.TypeDir} }

func TestResolveTagToDigest(t *testing.T) {
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	v1ref := imagetest.PushImage(t, host, "app:v1", image.Config{}, []imagetest.File{file("version", "1")})

	got, err := s.Resolve(ctx, host+"/app:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got != v1ref {
		t.Fatalf("Resolve = %s, want %s", got, v1ref)
	}
	// A digest reference resolves to itself, without the registry.
	if again, err := s.Resolve(ctx, v1ref, nil); err != nil || again != v1ref {
		t.Fatalf("Resolve(digest) = %s, %v", again, err)
	}

	// The tag moves; what was resolved still names the old image.
	v2ref := imagetest.PushImage(t, host, "app:v1", image.Config{}, []imagetest.File{file("version", "2")})
	if v2ref == v1ref {
		t.Fatal("the second push has the same digest")
	}
	if now, err := s.Resolve(ctx, host+"/app:v1", nil); err != nil || now != v2ref {
		t.Fatalf("Resolve after the move = %s, %v; want %s", now, err, v2ref)
	}
	img, err := s.Pull(ctx, got, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Ref != v1ref {
		t.Errorf("Pull(%s).Ref = %s", got, img.Ref)
	}
	if b, err := os.ReadFile(filepath.Join(img.Layers[0], "version")); err != nil || string(b) != "1" {
		t.Errorf("the resolved digest pulls version %q (%v), want 1", b, err)
	}

	if _, err := s.Resolve(ctx, host+"/app:missing", nil); err == nil {
		t.Error("Resolve of a missing tag succeeded")
	}
}

func TestResolveIndexPicksThisPlatform(t *testing.T) {
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	mine := imagetest.Build(t, image.Config{}, []imagetest.File{file("arch", "mine")})
	cf, _ := mine.ConfigFile()
	otherArch := "s390x"
	if cf.Architecture == otherArch {
		otherArch = "arm64"
	}
	other := withArch(t, imagetest.Build(t, image.Config{}, []imagetest.File{file("arch", "other")}), otherArch)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}}},
	)
	tag, _ := name.NewTag(host + "/multi:latest")
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatal(err)
	}
	want, _ := mine.Digest()
	got, err := s.Resolve(ctx, tag.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got != tag.Context().Name()+"@"+want.String() {
		t.Fatalf("Resolve(index) = %s, want the %s/%s manifest %s", got, cf.OS, cf.Architecture, want)
	}
	// Pulling the index's digest also yields this platform's image.
	idxDigest, _ := idx.Digest()
	img, err := s.Pull(ctx, tag.Context().Name()+"@"+idxDigest.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != want.String() {
		t.Errorf("Pull(index digest).Digest = %s, want %s", img.Digest, want)
	}
}

// withArch returns img claiming to be for another architecture.
func withArch(t *testing.T, img v1.Image, arch string) v1.Image {
	t.Helper()
	c, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c = c.DeepCopy()
	c.Architecture = arch
	out, err := mutate.ConfigFile(img, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPullTwiceIsACacheHit(t *testing.T) {
	var c counter
	host := imagetest.StartRegistryWith(t, c.wrap)
	root := filepath.Join(t.TempDir(), "images")
	var pulls []int64 // bytes of each fetch ObservePull was told of
	s := newStore(t, func(o *image.Options) {
		o.Root = root
		o.ObservePull = func(d time.Duration, n int64) {
			if d <= 0 {
				t.Errorf("pull duration %v", d)
			}
			pulls = append(pulls, n)
		}
	})
	cfg := image.Config{
		Entrypoint:   []string{"/bin/app", "serve"},
		Cmd:          []string{"--port=8080"},
		Env:          []string{"PATH=/bin", "MODE=test"},
		WorkingDir:   "/srv",
		User:         "65532:65532",
		ExposedPorts: []string{"9090/tcp", "8080/tcp"},
	}
	ref := imagetest.PushImage(t, host, "cached:v1", cfg,
		[]imagetest.File{dir("srv"), file("srv/a", "a")},
		[]imagetest.File{file("srv/b", "b")})
	c.reset()

	img, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.get("GET blobs") != 3 { // config and two layers
		t.Errorf("first Pull fetched %d blobs, want 3", c.get("GET blobs"))
	}
	wantCfg := cfg
	wantCfg.ExposedPorts = []string{"8080/tcp", "9090/tcp"}
	if got, _ := json.Marshal(img.Config); string(got) != string(must(json.Marshal(wantCfg))) {
		t.Errorf("Config = %s, want %s", got, must(json.Marshal(wantCfg)))
	}
	if len(img.Layers) != 2 || img.Ref != ref || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Errorf("image = %+v", img)
	}

	c.reset()
	again, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.total(); n != 0 {
		t.Errorf("second Pull sent %d requests to the registry, want 0", n)
	}
	if !slices.Equal(again.Layers, img.Layers) || again.Digest != img.Digest {
		t.Errorf("second Pull = %+v, want %+v", again, img)
	}
	// One fetch observed, of the manifest's compressed bytes.
	if len(pulls) != 1 || pulls[0] < 3 {
		t.Errorf("ObservePull calls %v, want one with the image's size", pulls)
	}

	// A second Store on the same Root (a restart) has it cached too.
	s2 := newStore(t, func(o *image.Options) { o.Root = root })
	if _, err := s2.Pull(ctx, ref, nil); err != nil || c.total() != 0 {
		t.Errorf("Pull after reopening: %v, %d requests", err, c.total())
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestConcurrentPullsFetchOnce(t *testing.T) {
	var c counter
	gate := make(chan struct{})
	var gated atomic.Bool
	host := imagetest.StartRegistryWith(t, func(h http.Handler) http.Handler {
		return c.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Hold the first blob download until every Pull has
			// started, so they overlap for sure.
			if r.Method == "GET" && strings.Contains(r.URL.Path, "/blobs/") && gated.CompareAndSwap(false, true) {
				<-gate
			}
			h.ServeHTTP(w, r)
		}))
	})
	s := newStore(t)
	ref := imagetest.PushImage(t, host, "dedup:v1", image.Config{},
		[]imagetest.File{file("a", strings.Repeat("a", 1<<20))},
		[]imagetest.File{file("b", "b")})
	c.reset()

	const n = 8
	var wg sync.WaitGroup
	imgs := make([]*image.Image, n)
	errs := make([]error, n)
	var started sync.WaitGroup
	started.Add(n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			imgs[i], errs[i] = s.Pull(ctx, ref, nil)
		}()
	}
	started.Wait()
	close(gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !slices.Equal(imgs[i].Layers, imgs[0].Layers) {
			t.Errorf("Pull %d: layers %v, want %v", i, imgs[i].Layers, imgs[0].Layers)
		}
	}
	if got := c.get("GET blobs"); got != 3 {
		t.Errorf("%d concurrent Pulls fetched %d blobs, want 3 (config and two layers, once)", n, got)
	}
}

// TestMountWhiteoutsAndOpaqueDirs stacks a layer with OCI whiteouts and an
// opaque directory on another and checks what the overlay shows.
func TestMountWhiteoutsAndOpaqueDirs(t *testing.T) {
	requireOverlay(t)
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	ref := imagetest.PushImage(t, host, "wh:v1", image.Config{},
		[]imagetest.File{
			dir("a"), file("a/keep", "k"), file("a/gone", "g"),
			dir("b"), file("b/old1", "o"), dir("b/olddir"), file("b/olddir/x", "x"),
			dir("c"), file("c/file", "c"),
			file("top", "t"),
			dir("d"), file("d/replaced", "old"),
		},
		[]imagetest.File{
			dir("a"), file("a/.wh.gone", ""),
			dir("b"), file("b/.wh..wh..opq", ""), file("b/new", "n"),
			file(".wh.c", ""),
			dir("d"), file("d/replaced", "new"), file("d/added", "+"),
		},
		[]imagetest.File{
			dir("c"), file("c/reborn", "r"), // c comes back, empty but for this
		},
	)
	img, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := t.TempDir()
	rootfs, err := s.Mount(img, inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { image.Unmount(inst) })

	want := map[string]string{ // path -> content, "" for absent
		"a/keep": "k", "a/gone": "",
		"b/old1": "", "b/olddir/x": "", "b/olddir": "", "b/new": "n",
		"c/file": "", "c/reborn": "r",
		"top":        "t",
		"d/replaced": "new", "d/added": "+",
	}
	for p, content := range want {
		b, err := os.ReadFile(filepath.Join(rootfs, p))
		switch {
		case content == "" && !errors.Is(err, os.ErrNotExist):
			t.Errorf("%s: %q, %v; want it hidden", p, b, err)
		case content != "" && string(b) != content:
			t.Errorf("%s = %q, %v; want %q", p, b, err, content)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(rootfs, "b"))
	if len(entries) != 1 || entries[0].Name() != "new" {
		t.Errorf("b lists %v, want only new (opaque)", entries)
	}
}

func TestMountGivesEachInstanceAPrivateUpper(t *testing.T) {
	requireOverlay(t)
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	ref := imagetest.PushImage(t, host, "priv:v1", image.Config{}, []imagetest.File{dir("etc"), file("etc/conf", "original")})
	img, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, two := t.TempDir(), t.TempDir()
	r1, err := s.Mount(img, one)
	if err != nil {
		t.Fatal(err)
	}
	defer image.Unmount(one)
	r2, err := s.Mount(img, two)
	if err != nil {
		t.Fatal(err)
	}
	defer image.Unmount(two)

	if err := os.WriteFile(filepath.Join(r1, "etc/conf"), []byte("changed in one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r1, "new"), []byte("only in one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(r2, "etc/conf")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(r1, "etc/conf")); string(b) != "changed in one" {
		t.Errorf("one sees etc/conf = %q", b)
	}
	if _, err := os.Stat(filepath.Join(r2, "new")); err == nil {
		t.Error("two sees a file written in one")
	}
	if b, _ := os.ReadFile(filepath.Join(img.Layers[0], "etc/conf")); string(b) != "original" {
		t.Errorf("the cached layer changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(one, "upper", "new")); string(b) != "only in one" {
		t.Errorf("one's upper has new = %q", b)
	}
	// A third instance starts from the image, not from what others did.
	three := t.TempDir()
	r3, err := s.Mount(img, three)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(r3, "etc/conf")); string(b) != "original" {
		t.Errorf("three sees etc/conf = %q, want original", b)
	}
	if err := image.Unmount(three); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"rootfs", "upper", "work"} {
		if _, err := os.Stat(filepath.Join(three, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Unmount %s: %v, want it gone", d, err)
		}
	}
	if err := image.Unmount(three); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
}

func TestMountImageWithALayerTwice(t *testing.T) {
	requireOverlay(t)
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	same := []imagetest.File{file("same", "s"), file("shadowed", "from same")}
	img, err := s.Pull(ctx, imagetest.PushImage(t, host, "twice:v1", image.Config{},
		same, []imagetest.File{file("shadowed", "from middle"), file("middle", "m")}, same), nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Layers[0] != img.Layers[2] {
		t.Fatalf("identical layers unpacked apart: %v", img.Layers)
	}
	inst := t.TempDir()
	rootfs, err := s.Mount(img, inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { image.Unmount(inst) })
	for p, want := range map[string]string{"same": "s", "middle": "m", "shadowed": "from same"} {
		if b, _ := os.ReadFile(filepath.Join(rootfs, p)); string(b) != want {
			t.Errorf("%s = %q, want %q", p, b, want)
		}
	}
	if _, err := s.Mount(img, inst); err == nil || !strings.Contains(err.Error(), "already mounted") {
		t.Errorf("second Mount on one dir: %v, want already mounted", err)
	}
}

func TestMountImageWithoutLayers(t *testing.T) {
	requireOverlay(t)
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	img, err := s.Pull(ctx, imagetest.PushImage(t, host, "nolayers:v1", image.Config{Cmd: []string{"x"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := t.TempDir()
	rootfs, err := s.Mount(img, inst)
	if err != nil {
		t.Fatal(err)
	}
	defer image.Unmount(inst)
	if err := os.WriteFile(filepath.Join(rootfs, "f"), nil, 0o644); err != nil {
		t.Error(err)
	}
}

// dockerSaveUncompressed writes a docker save tarball the way docker does:
// uncompressed layer tars.
func dockerSaveUncompressed(t *testing.T, repoTag string, img v1.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	rawCfg, _ := img.RawConfigFile()
	cfgName, _ := img.ConfigName()
	add(cfgName.Hex+".json", rawCfg)
	layers, _ := img.Layers()
	var names []string
	seen := map[v1.Hash]string{}
	for i, l := range layers {
		// As older docker does, a layer stored twice is a symlink.
		diffID, _ := l.DiffID()
		if first, ok := seen[diffID]; ok {
			n := fmt.Sprintf("%d/layer.tar", i)
			if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: "../" + first}); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
			continue
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(rc)
		rc.Close()
		n := fmt.Sprintf("%d/layer.tar", i)
		add(n, b.Bytes())
		names = append(names, n)
		seen[diffID] = n
	}
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName.Hex + ".json", "RepoTags": []string{repoTag}, "Layers": names}})
	add("manifest.json", m)
	tw.Close()
	return buf.Bytes()
}

func TestLoad(t *testing.T) {
	// Tags on a loopback port where nothing listens: if Resolve asked a
	// registry instead of the local tag index, it would fail.
	const nowhere = "127.0.0.1:1"
	layer := []imagetest.File{dir("srv"), file("srv/index.html", "loaded")}
	cfg := image.Config{Entrypoint: []string{"/srv/app"}, Env: []string{"PATH=/bin"}}
	tests := []struct {
		name     string
		archive  []byte
		wantRefs []string
	}{
		{"docker save with gzip layers", imagetest.DockerArchive(t, nowhere+"/team/app:v1", cfg, layer), []string{nowhere + "/team/app:v1"}},
		{"docker save (uncompressed layers)", dockerSaveUncompressed(t, nowhere+"/team/app:v2", imagetest.Build(t, cfg, layer)), []string{nowhere + "/team/app:v2"}},
		{"docker save with a linked layer", dockerSaveUncompressed(t, nowhere+"/team/app:v5", imagetest.Build(t, cfg, layer, layer)), []string{nowhere + "/team/app:v5"}},
		{"docker hub name", imagetest.DockerArchive(t, "busybox:offline", cfg, layer), []string{"index.docker.io/library/busybox:offline"}},
		{"OCI layout", imagetest.OCIArchive(t, nowhere+"/oci/app:v3", cfg, layer), []string{nowhere + "/oci/app:v3"}},
		{"OCI layout unnamed", imagetest.OCIArchive(t, "", cfg, layer), []string{"sha256:"}},
		{"OCI layout with a bare tag", imagetest.OCIArchive(t, "v4", cfg, layer), []string{"sha256:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			refs, err := s.Load(ctx, bytes.NewReader(tt.archive))
			if err != nil {
				t.Fatal(err)
			}
			if len(refs) != len(tt.wantRefs) {
				t.Fatalf("Load = %v, want %v", refs, tt.wantRefs)
			}
			for i, r := range refs {
				if !strings.HasPrefix(r, tt.wantRefs[i]) || (tt.wantRefs[i] == "sha256:" && len(r) != 71) {
					t.Fatalf("Load = %v, want %v", refs, tt.wantRefs)
				}
			}
			resolved, err := s.Resolve(ctx, refs[0], nil)
			if err != nil {
				t.Fatalf("Resolve(%s) offline: %v", refs[0], err)
			}
			img, err := s.Pull(ctx, resolved, nil)
			if err != nil {
				t.Fatalf("Pull(%s) offline: %v", resolved, err)
			}
			if !slices.Equal(img.Config.Entrypoint, cfg.Entrypoint) {
				t.Errorf("Entrypoint = %v, want %v", img.Config.Entrypoint, cfg.Entrypoint)
			}
			if b, err := os.ReadFile(filepath.Join(img.Layers[0], "srv/index.html")); err != nil || string(b) != "loaded" {
				t.Errorf("layer content %q, %v", b, err)
			}
			if strings.HasPrefix(tt.name, "OCI layout") {
				// An OCI layout keeps the digest a registry would have.
				want, _ := imagetest.Build(t, cfg, layer).Digest()
				if img.Digest != want.String() {
					t.Errorf("Digest = %s, want %s", img.Digest, want)
				}
			}
			infos, err := s.List()
			if err != nil || len(infos) != 1 {
				t.Fatalf("List = %v, %v", infos, err)
			}
			if !slices.Contains(infos[0].References, refs[0]) && refs[0] != infos[0].Digest {
				t.Errorf("List references %v, want %s among them", infos[0].References, refs[0])
			}
		})
	}

	t.Run("not an image archive", func(t *testing.T) {
		s := newStore(t)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "hello.txt", Size: 2, Mode: 0o644})
		tw.Write([]byte("hi"))
		tw.Close()
		if _, err := s.Load(ctx, &buf); err == nil {
			t.Error("Load of a plain tar succeeded")
		}
	})
}

func TestListAndPrune(t *testing.T) {
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	base := []imagetest.File{dir("base"), file("base/shared", strings.Repeat("s", 10000))}
	refA := imagetest.PushImage(t, host, "a:v1", image.Config{}, base, []imagetest.File{file("only-a", strings.Repeat("a", 20000))})
	refB := imagetest.PushImage(t, host, "b:v1", image.Config{}, base, []imagetest.File{file("only-b", strings.Repeat("b", 30000))})
	a, err := s.Pull(ctx, refA, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Pull(ctx, refB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Layers[0] != b.Layers[0] {
		t.Fatalf("the shared base layer is unpacked twice: %s, %s", a.Layers[0], b.Layers[0])
	}
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 {
		t.Fatalf("List = %+v, want 2 images", infos)
	}
	for _, info := range infos {
		if info.Size < 10000 || len(info.References) != 1 || info.Created.IsZero() {
			t.Errorf("info %+v", info)
		}
	}

	freed, err := s.Prune([]string{refB})
	if err != nil {
		t.Fatal(err)
	}
	if freed < 20000 {
		t.Errorf("Prune freed %d bytes, want at least the 20000 of only-a", freed)
	}
	infos, _ = s.List()
	if len(infos) != 1 || infos[0].Digest != b.Digest {
		t.Fatalf("after Prune(keep b) List = %+v", infos)
	}
	for _, l := range b.Layers {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("a kept layer was removed: %v", err)
		}
	}
	if _, err := os.Stat(a.Layers[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a's own layer survived: %v", err)
	}
	// Pruned means gone: pulling again fetches again.
	if _, err := s.Pull(ctx, refA, nil); err != nil {
		t.Fatal(err)
	}

	freed, err = s.Prune(nil)
	if err != nil || freed <= 0 {
		t.Fatalf("Prune(nil) = %d, %v", freed, err)
	}
	if infos, _ := s.List(); len(infos) != 0 {
		t.Errorf("after Prune(nil) List = %+v", infos)
	}
	if _, err := s.Prune([]string{"not a reference@"}); err == nil {
		t.Error("Prune with a malformed keep entry succeeded")
	}
}

func TestPruneKeepsLayersOfMountedImages(t *testing.T) {
	requireOverlay(t)
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	img, err := s.Pull(ctx, imagetest.PushImage(t, host, "mounted:v1", image.Config{}, []imagetest.File{file("f", "in use")}), nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := t.TempDir()
	rootfs, err := s.Mount(img, inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { image.Unmount(inst) })
	if _, err := s.Prune(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img.Layers[0]); err != nil {
		t.Fatalf("Prune removed a layer a mounted instance uses: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(rootfs, "f")); string(b) != "in use" {
		t.Errorf("the instance sees f = %q", b)
	}
	if err := image.Unmount(inst); err != nil {
		t.Fatal(err)
	}
	freed, err := s.Prune(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img.Layers[0]); !errors.Is(err, os.ErrNotExist) || freed <= 0 {
		t.Errorf("after Unmount, Prune freed %d and the layer: %v", freed, err)
	}
}

func TestPrivateRegistryWithImagePullSecret(t *testing.T) {
	const user, pass = "knbox", "s3cret"
	host := imagetest.StartRegistryWith(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="imagetest"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img := imagetest.Build(t, image.Config{}, []imagetest.File{file("secret", "data")})
	tag, _ := name.NewTag(host + "/private/app:v1")
	if err := remote.Write(tag, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass})); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	if _, err := s.Resolve(ctx, tag.String(), nil); err == nil {
		t.Fatal("Resolve without credentials succeeded")
	}

	raw, _ := json.Marshal(map[string]any{"auths": map[string]any{
		host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))},
	}})
	kc, err := image.SecretsKeychain([]corev1.Secret{{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: raw},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.Resolve(ctx, tag.String(), kc)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := s.Pull(ctx, ref, kc)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(pulled.Layers[0], "secret")); string(b) != "data" {
		t.Errorf("secret = %q", b)
	}
}

func TestPullRejectsWhatIsNotARunnableImage(t *testing.T) {
	host := imagetest.StartRegistry(t)
	s := newStore(t)
	arch := "s390x"
	if runtime.GOARCH == arch {
		arch = "arm64"
	}
	foreign := withArch(t, imagetest.Build(t, image.Config{}), arch)
	tag, _ := name.NewTag(host + "/foreign:v1")
	if err := remote.Write(tag, foreign); err != nil {
		t.Fatal(err)
	}
	d, _ := foreign.Digest()
	if _, err := s.Pull(ctx, tag.Context().Name()+"@"+d.String(), nil); err == nil || !strings.Contains(err.Error(), "this machine is") {
		t.Errorf("Pull of a %s image: %v", arch, err)
	}
	if _, err := s.Pull(ctx, "sha256:"+strings.Repeat("0", 64), nil); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("Pull of an unknown bare digest: %v, want ErrNotFound", err)
	}
}

func TestOpenRejectsRootsOverlayCannotName(t *testing.T) {
	for _, root := range []string{"", "/tmp/a:b", "/tmp/a,b"} {
		if _, err := image.Open(image.Options{Root: root}); err == nil {
			t.Errorf("Open(%q) succeeded", root)
		}
	}
}

// FuzzLoad feeds arbitrary bytes to Load as an archive: errors are fine,
// panics are not, and every reference Load returns must resolve offline.
func FuzzLoad(f *testing.F) {
	layer := []imagetest.File{dir("d"), file("d/f", "x")}
	f.Add(imagetest.DockerArchive(f, "127.0.0.1:1/fuzz:v1", image.Config{}, layer))
	f.Add(imagetest.OCIArchive(f, "127.0.0.1:1/fuzz:v2", image.Config{}, layer))
	f.Add([]byte("not a tar"))
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := os.MkdirTemp(base, "")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(root)
		s, err := image.Open(image.Options{Root: root, Keychain: authn.NewMultiKeychain()})
		if err != nil {
			t.Fatal(err)
		}
		refs, err := s.Load(ctx, bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range refs {
			if _, err := s.Resolve(ctx, r, nil); err != nil {
				t.Fatalf("Resolve(%s) of a loaded reference: %v", r, err)
			}
		}
	})
}
