package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/knbox/knbox/pkg/disk/disktest"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// hostileLimits are the image limits of the suite, scaled down so that it
// is quick; TestSparseLayerDefaults and the e2e suite use the defaults.
var hostileLimits = image.Limits{
	MaxLayerBytes: 16 << 20, MaxImageBytes: 24 << 20,
	MaxLayerFiles: 1000, MaxImageFiles: 1500,
	MaxLayers: 8, MaxConfigBytes: 64 << 10, MaxManifestBytes: 4 << 10,
	PullBackoff: time.Hour, MaxPullBackoff: time.Hour,
}

// outside is a directory outside the cache that hostile layers aim at.
func outside(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	dir := filepath.Join(os.TempDir(), "knbox-hostile-"+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// du is the disk blocks used under dir.
func du(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}

// TestHostileImages pulls images made to hurt the host: each either fails
// with a reason that names the problem (and the limit to raise), or is
// harmless and unpacks; in both cases nothing is written outside the cache,
// nothing is left in its tmp, the disk it takes stays bounded, and the
// store still pulls a good image afterwards.
func TestHostileImages(t *testing.T) {
	tp := &imagetest.BlobOverrides{}
	reg := imagetest.StartRegistryWith(t, tp.Wrap)
	root := filepath.Join(t.TempDir(), "images")
	s, err := image.Open(image.Options{Root: root, Keychain: nil, Limits: hostileLimits})
	if err != nil {
		t.Fatal(err)
	}
	out := outside(t)
	zeros := func(n int) []byte { return make([]byte, n) }
	many := func(prefix string, n int) []imagetest.File {
		var fs []imagetest.File
		for i := range n {
			fs = append(fs, file(fmt.Sprintf("%s%d", prefix, i), ""))
		}
		return fs
	}
	bomb := func() []byte { // a small tar, then zeros after its end
		return append(imagetest.Layer(t, file("x", "x")), zeros(48<<20)...)
	}

	type check func(t *testing.T, img *image.Image)
	cases := []struct {
		name string
		push func(t *testing.T) string
		want string // in the error; "" = the pull succeeds
		check
	}{
		{"sparse file over the layer limit", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/sparse:1", image.Config{}, []imagetest.File{{Path: "big", SparseSize: 4 << 30, Body: []byte("end")}})
		}, "more than 16.0 MiB unpacked in the layer (limits.images.maxLayerBytes; sparse files count their full length)", nil},
		{"sparse file under the limit stays sparse", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/sparse:2", image.Config{}, []imagetest.File{{Path: "big", SparseSize: 12 << 20, Body: []byte("end")}})
		}, "", func(t *testing.T, img *image.Image) {
			p := filepath.Join(img.Layers[0], "big")
			fi, err := os.Stat(p)
			if err != nil || fi.Size() != 12<<20 || du(t, p) > 64<<10 {
				t.Errorf("sparse file: %v, %d bytes on disk", err, du(t, p))
			}
		}},
		{"a file of zeros (gzip bomb)", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/zeros:1", image.Config{}, []imagetest.File{{Path: "z", Body: zeros(20 << 20)}})
		}, "more than 16.0 MiB unpacked in the layer", nil},
		{"zeros after the tar's end (gzip bomb)", func(t *testing.T) string {
			return imagetest.PushRaw(t, reg, "h/after:1", image.Config{}, bomb())
		}, "the uncompressed layer is larger than 16.0 MiB", nil},
		{"files over the layer limit", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/files:1", image.Config{}, many("f", 1001))
		}, "more than 1000 files in the layer (limits.images.maxLayerFiles)", nil},
		{"files over the image limit", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/files:2", image.Config{}, many("a", 600), many("b", 600), many("c", 600))
		}, "more than 1500 files in the image (limits.images.maxImageFiles)", nil},
		{"bytes over the image limit", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/bytes:1", image.Config{},
				[]imagetest.File{{Path: "a", SparseSize: 10 << 20}}, []imagetest.File{{Path: "b", SparseSize: 10 << 20}}, []imagetest.File{{Path: "c", SparseSize: 10 << 20}})
		}, "in the image (limits.images.maxImageBytes", nil},
		{"huge config", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/config:1", image.Config{Env: []string{"X=" + strings.Repeat("x", 100<<10)}}, []imagetest.File{file("a", "a")})
		}, "(limits.images.maxConfigBytes)", nil},
		{"too many layers", func(t *testing.T) string {
			var layers [][]imagetest.File
			for i := range 9 {
				layers = append(layers, []imagetest.File{file(fmt.Sprint(i), "x")})
			}
			return imagetest.PushImage(t, reg, "h/layers:1", image.Config{}, layers...)
		}, "9 layers, more than 8 (limits.images.maxLayers)", nil},
		{"huge manifest", func(t *testing.T) string {
			img := imagetest.Build(t, image.Config{}, []imagetest.File{file("a", "a")})
			ann := map[string]string{}
			for i := range 100 {
				ann[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 64)
			}
			return imagetest.Push(t, reg, "h/manifest:1", mutate.Annotations(img, ann).(v1.Image))
		}, "(limits.images.maxManifestBytes)", nil},
		{"bad digest", func(t *testing.T) string {
			ref := imagetest.PushImage(t, reg, "h/digest:1", image.Config{}, []imagetest.File{file("a", strings.Repeat("a", 4096))})
			d := imagetest.FirstLayer(t, ref)
			body := bytes.Repeat([]byte{0x1f}, int(d.Size)) // same length, other bytes
			tp.Serve(d.Digest.String(), body, false)
			return ref
		}, "failed verification", func(t *testing.T, _ *image.Image) {}},
		{"blob shorter than the manifest says", func(t *testing.T) string {
			ref := imagetest.PushImage(t, reg, "h/size:1", image.Config{}, []imagetest.File{file("a", strings.Repeat("b", 4096))})
			d := imagetest.FirstLayer(t, ref)
			tp.Serve(d.Digest.String(), make([]byte, d.Size/2), true)
			return ref
		}, "error verifying size", nil},
		{"path traversal", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/dotdot:1", image.Config{}, []imagetest.File{file("../../../../"+strings.TrimPrefix(out, "/")+"/dotdot", "x")})
		}, `path escapes the layer ("..")`, nil},
		{"absolute path lands inside", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/abs:1", image.Config{}, []imagetest.File{file(out+"/abs", "x")})
		}, "", func(t *testing.T, img *image.Image) {
			if _, err := os.Stat(filepath.Join(img.Layers[0], out, "abs")); err != nil {
				t.Errorf("the absolute path is not inside the layer: %v", err)
			}
		}},
		{"symlink escape", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/symlink:1", image.Config{}, []imagetest.File{
				{Path: "evil", Type: tar.TypeSymlink, Link: out}, file("evil/pwned", "x")})
		}, "parent directory is a symlink", nil},
		{"hard link escape", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/hardlink:1", image.Config{}, []imagetest.File{
				{Path: "hl", Type: tar.TypeLink, Link: "../../../../etc/passwd"}})
		}, `path escapes the layer ("..")`, nil},
		{"hard link to a host path", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/hardlink:2", image.Config{}, []imagetest.File{
				{Path: "hl", Type: tar.TypeLink, Link: "/etc/passwd"}})
		}, "hard link target is not in the layer", nil},
		{"device nodes are skipped", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/dev:1", image.Config{}, []imagetest.File{
				dir("dev"), {Path: "dev/kmsg", Type: tar.TypeChar, DevMajor: 1, DevMinor: 11}, {Path: "dev/sda", Type: tar.TypeBlock, DevMajor: 8}})
		}, "", func(t *testing.T, img *image.Image) {
			for _, n := range []string{"dev/kmsg", "dev/sda"} {
				if _, err := os.Lstat(filepath.Join(img.Layers[0], n)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("device %s unpacked: %v", n, err)
				}
			}
		}},
		{"setuid kept, out of reach", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/setuid:1", image.Config{}, []imagetest.File{{Path: "su", Mode: 0o4755, Body: []byte("x")}})
		}, "", func(t *testing.T, img *image.Image) {
			fi, err := os.Stat(filepath.Join(img.Layers[0], "su"))
			if err != nil || fi.Mode()&fs.ModeSetuid == 0 {
				t.Errorf("setuid bit: %v %v", fi, err)
			}
			if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the cache is %v, %v: other users could reach its setuid files", fi.Mode(), err)
			}
		}},
		{"whiteout above the root", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/whiteout:1", image.Config{}, []imagetest.File{file("../.wh.etc", "")})
		}, `path escapes the layer ("..")`, nil},
		{"whiteout of the root itself", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/whiteout:2", image.Config{}, []imagetest.File{file(".wh.", "")})
		}, "invalid entry name", nil},
		{"duplicate entries", func(t *testing.T) string {
			return imagetest.PushImage(t, reg, "h/dup:1", image.Config{}, []imagetest.File{
				file("a", "1"), dir("a"), file("a/b", "2"), file("a", "3"), file("a", "4")})
		}, "", func(t *testing.T, img *image.Image) {
			if b, err := os.ReadFile(filepath.Join(img.Layers[0], "a")); err != nil || string(b) != "4" {
				t.Errorf("the last entry does not win: %q %v", b, err)
			}
		}},
	}
	var peak int64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := c.push(t)
			img, err := s.Pull(ctx, ref, nil)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("pull: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("pull: %v; want an error with %q", err, c.want)
			}
			if c.check != nil && img != nil {
				c.check(t, img)
			}
			// Layers stopped by another's failure clean up as they end.
			deadline := time.Now().Add(10 * time.Second)
			for ents, _ := os.ReadDir(filepath.Join(root, "tmp")); len(ents) > 0; ents, _ = os.ReadDir(filepath.Join(root, "tmp")) {
				if time.Now().After(deadline) {
					t.Fatalf("left in tmp: %v", ents)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if ents, _ := os.ReadDir(out); len(ents) > 0 {
				t.Errorf("written outside the cache: %v", ents)
			}
			used := du(t, root)
			peak = max(peak, used)
			if used > 4<<20 {
				t.Errorf("the cache takes %d KiB", used>>10)
			}
		})
	}
	t.Logf("%d hostile images; the cache peaked at %d KiB", len(cases), peak>>10)

	// A blob that failed verification is not fetched again in a loop.
	t.Run("backoff", func(t *testing.T) {
		ref := imagetest.PushImage(t, reg, "h/digest:2", image.Config{}, []imagetest.File{file("b", strings.Repeat("b", 4096))})
		d := imagetest.FirstLayer(t, ref)
		tp.Serve(d.Digest.String(), bytes.Repeat([]byte{0x1f}, int(d.Size)), false)
		for i := range 3 {
			_, err := s.Pull(ctx, ref, nil)
			if err == nil || !strings.Contains(err.Error(), "failed verification") || (i > 0 && !strings.Contains(err.Error(), "not fetched again for")) {
				t.Fatalf("pull %d: %v", i, err)
			}
		}
		if n := tp.Gets(d.Digest.String()); n != 1 {
			t.Errorf("the bad blob was fetched %d times, want once", n)
		}
	})
	t.Run("still pulls", func(t *testing.T) {
		ref := imagetest.PushImage(t, reg, "h/good:1", image.Config{}, []imagetest.File{file("ok", "ok")})
		if _, err := s.Pull(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use at the end: %d MiB", ms.HeapInuse>>20)
}

// TestSkipTagResolving: tags of a registry listed in
// registries-skipping-tag-resolving are resolved from loaded images only;
// the registry is never asked.
func TestSkipTagResolving(t *testing.T) {
	var c counter
	reg := imagetest.StartRegistryWith(t, c.wrap)
	imagetest.PushImage(t, reg, "app:v1", image.Config{}, []imagetest.File{file("a", "a")})
	c.reset()
	s := newStore(t, func(o *image.Options) { o.SkipTagResolving = []string{reg} })
	_, err := s.Resolve(ctx, reg+"/app:v1", nil)
	if err == nil || !errors.Is(err, image.ErrNotFound) || !strings.Contains(err.Error(), "registries-skipping-tag-resolving") {
		t.Fatalf("resolve a tag of a skipped registry: %v", err)
	}
	if n := c.total(); n != 0 {
		t.Errorf("the registry was asked %d times", n)
	}
	archive := imagetest.DockerArchive(t, reg+"/app:v1", image.Config{}, []imagetest.File{file("b", "b")})
	if _, err := s.Load(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	if ref, err := s.Resolve(ctx, reg+"/app:v1", nil); err != nil || !strings.Contains(ref, "@sha256:") {
		t.Errorf("resolve a loaded tag: %q, %v", ref, err)
	}
	if n := c.total(); n != 0 {
		t.Errorf("the registry was asked %d times", n)
	}
}

// TestSparseLayerDefaults is the finding with the default limits: a layer
// of 4.5 KiB declaring a sparse file of 5 GiB (it became 4 GiB on disk) is
// refused before a byte of it is written.
func TestSparseLayerDefaults(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	root := filepath.Join(t.TempDir(), "images")
	s, err := image.Open(image.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	ref := imagetest.PushImage(t, reg, "sparse:5g", image.Config{}, []imagetest.File{{Path: "big", SparseSize: 5 << 30, Body: []byte("end")}})
	if _, err := s.Pull(ctx, ref, nil); err == nil || !strings.Contains(err.Error(), "more than 4.0 GiB unpacked in the layer") {
		t.Fatalf("pull: %v", err)
	}
	if used := du(t, root); used > 1<<20 {
		t.Errorf("the cache takes %d KiB", used>>10)
	}
}

// TestPullAndLoadKeepTheDiskFree: on a disk that has less than MinFreeBytes
// free, a pull fails before fetching a layer, and a loaded archive stops
// being spooled, each saying so; nothing is left in tmp.
func TestPullAndLoadKeepTheDiskFree(t *testing.T) {
	fsDir := disktest.SmallFS(t, 64<<20)
	root := filepath.Join(fsDir, "images")
	reg := imagetest.StartRegistry(t)
	s, err := image.Open(image.Options{Root: root, Limits: image.Limits{MinFreeBytes: 48 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	ref := imagetest.PushImage(t, reg, "fits:1", image.Config{}, []imagetest.File{file("a", "a")})
	if _, err := s.Pull(ctx, ref, nil); err != nil {
		t.Fatalf("pull with room: %v", err)
	}
	filler := filepath.Join(fsDir, "filler")
	if err := os.WriteFile(filler, make([]byte, 20<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ref = imagetest.PushImage(t, reg, "nofit:1", image.Config{}, []imagetest.File{file("b", "b")})
	if _, err := s.Pull(ctx, ref, nil); err == nil || !strings.Contains(err.Error(), "limits.disk.minFreeBytes") {
		t.Errorf("pull on a low disk: %v", err)
	}
	archive := imagetest.DockerArchive(t, "127.0.0.1:1/big:1", image.Config{}, []imagetest.File{{Path: "r", Body: randomBytes(t, 40<<20)}})
	if _, err := s.Load(ctx, bytes.NewReader(archive)); err == nil || !strings.Contains(err.Error(), "limits.disk.minFreeBytes") {
		t.Errorf("load on a low disk: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "tmp")); len(ents) > 0 {
		t.Errorf("left in tmp: %v", ents)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBadDigestIsNotUnpacked is the finding: a layer whose blob did not
// match its digest was unpacked first (2 GiB of it) and refused only at its
// end. The manifest here names a blob by the digest of one layer and the
// size of another, which the registry serves: a valid layer of more files
// than the limit. Verified first, it fails verification; unpacked first, it
// would fail on its file count.
func TestBadDigestIsNotUnpacked(t *testing.T) {
	tp := &imagetest.BlobOverrides{}
	reg := imagetest.StartRegistryWith(t, tp.Wrap)
	root := filepath.Join(t.TempDir(), "images")
	s, err := image.Open(image.Options{Root: root, Limits: hostileLimits})
	if err != nil {
		t.Fatal(err)
	}
	var many []imagetest.File
	for i := range 2000 {
		many = append(many, file(fmt.Sprintf("f%d", i), "x"))
	}
	real := imagetest.Build(t, image.Config{}, []imagetest.File{file("a", "a")})
	swapped := imagetest.Build(t, image.Config{}, many)
	realLayers, _ := real.Layers()
	swappedLayers, _ := swapped.Layers()
	realDigest, _ := realLayers[0].Digest()
	swappedBlob, err := swappedLayers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(swappedBlob)
	if err != nil {
		t.Fatal(err)
	}
	// The manifest gives the real layer's digest with the other's size.
	img := mutate.MediaType(real, "application/vnd.oci.image.manifest.v1+json")
	ref := imagetest.Push(t, reg, "swap:1", sizeOverride{Image: img, digest: realDigest, size: int64(len(body))})
	tp.Serve(realDigest.String(), body, false)
	_, err = s.Pull(ctx, ref, nil)
	if err == nil || !strings.Contains(err.Error(), "failed verification") {
		t.Fatalf("pull: %v; want it to fail verification before unpacking", err)
	}
}

// sizeOverride is an image whose manifest gives one layer another size.
type sizeOverride struct {
	v1.Image
	digest v1.Hash
	size   int64
}

func (o sizeOverride) Manifest() (*v1.Manifest, error) {
	m, err := o.Image.Manifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	for i := range m.Layers {
		if m.Layers[i].Digest == o.digest {
			m.Layers[i].Size = o.size
		}
	}
	return m, nil
}

func (o sizeOverride) RawManifest() ([]byte, error) {
	m, err := o.Manifest()
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func (o sizeOverride) Digest() (v1.Hash, error) {
	raw, err := o.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	return h, err
}
