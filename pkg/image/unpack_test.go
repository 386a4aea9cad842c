package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// entry is a tar entry for tests; Type 0 is a regular file.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
	pax              map[string]string
	mtime            time.Time
}

func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, PAXRecords: e.pax, ModTime: e.mtime, Format: tar.FormatPAX,
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.ModTime.IsZero() {
			hdr.ModTime = time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set, so not skipping: needs root")
	}
	t.Skip("needs root (ownership, whiteout devices, trusted xattrs)")
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func TestUnpackKeepsWhatALayerSays(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	mtime := time.Date(2019, 5, 6, 7, 8, 9, 0, time.UTC)
	layer := tarOf(t,
		entry{name: "./", typ: tar.TypeDir, mode: 0o755},
		entry{name: "bin/", typ: tar.TypeDir, mode: 0o755, mtime: mtime},
		entry{name: "bin/su", body: "#!su", mode: 0o4755, uid: 0, gid: 0},
		entry{name: "bin/tool", body: "tool", mode: 0o2750, uid: 1000, gid: 2000, mtime: mtime},
		entry{name: "bin/link", typ: tar.TypeLink, link: "bin/tool"},
		entry{name: "etc/abs", typ: tar.TypeSymlink, link: "/etc/passwd", uid: 7, gid: 8},
		entry{name: "/rooted/file", body: "leading slash is relative"},
		entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
		entry{name: "caps", body: "x", pax: map[string]string{
			"SCHILY.xattr.user.note":              "kept",
			"SCHILY.xattr.trusted.overlay.opaque": "y",
		}},
		entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "replace", body: "first"},
		entry{name: "replace", body: "second"},
		entry{name: "dirthenfile/", typ: tar.TypeDir},
		entry{name: "dirthenfile/child", body: "c"},
		entry{name: "dirthenfile", body: "now a file"},
	)
	if err := unpack(context.Background(), dir, bytes.NewReader(layer), nil); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "bin/su")); fi.Mode()&fs.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/su mode %v, want setuid 0755", fi.Mode())
	}
	st := lstat(t, filepath.Join(dir, "bin/tool"))
	if st.Uid != 1000 || st.Gid != 2000 || st.Mode&0o7777 != 0o2750 {
		t.Errorf("bin/tool: uid %d gid %d mode %o, want 1000 2000 2750", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
		t.Errorf("bin/tool mtime %v, want %v", got, mtime)
	}
	if lst := lstat(t, filepath.Join(dir, "bin/link")); lst.Ino != st.Ino {
		t.Error("bin/link is not a hard link of bin/tool")
	}
	if got := time.Unix(lstat(t, filepath.Join(dir, "bin")).Mtim.Unix()); !got.Equal(mtime) {
		t.Errorf("bin mtime %v, want %v (set after its entries)", got, mtime)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "etc/abs")); l != "/etc/passwd" {
		t.Errorf("etc/abs -> %q, want /etc/passwd", l)
	}
	if st := lstat(t, filepath.Join(dir, "etc/abs")); st.Uid != 7 || st.Gid != 8 {
		t.Errorf("etc/abs owner %d:%d, want 7:8 (the symlink's, not its target's)", st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "rooted/file")); string(b) != "leading slash is relative" {
		t.Errorf("rooted/file = %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "run/fifo")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("run/fifo: %v %v, want a FIFO", fi, err)
	}
	for _, dev := range []string{"dev/null", "dev/sda"} {
		if _, err := os.Lstat(filepath.Join(dir, dev)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: device nodes must be skipped, got %v", dev, err)
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "caps"), "user.note", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("user.note xattr: %q %v, want kept", buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(dir, "caps"), opaqueXattr, buf); err == nil {
		t.Error("a trusted.* xattr from the layer was applied")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "tmp")); fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmp mode %v, want sticky 0777", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "replace")); string(b) != "second" {
		t.Errorf("replace = %q, want the later entry", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dirthenfile")); string(b) != "now a file" {
		t.Errorf("dirthenfile = %q, want the later file", b)
	}
}

func TestUnpackWhiteouts(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	layer := tarOf(t,
		entry{name: ".wh.gone"},
		entry{name: "d/", typ: tar.TypeDir, mode: 0o750},
		entry{name: "d/.wh..wh..opq"},
		entry{name: "d/mine", body: "same layer stays"},
		entry{name: "implicit/.wh..wh..opq"},
		entry{name: "kept", body: "k"},
		entry{name: ".wh.kept"}, // a whiteout hides only lower layers
		entry{name: ".wh..wh.plnk"},
	)
	if err := unpack(context.Background(), dir, bytes.NewReader(layer), nil); err != nil {
		t.Fatal(err)
	}
	st := lstat(t, filepath.Join(dir, "gone"))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone: mode %o rdev %d, want a 0/0 character device", st.Mode, st.Rdev)
	}
	buf := make([]byte, 4)
	for _, d := range []string{"d", "implicit"} {
		if n, err := unix.Lgetxattr(filepath.Join(dir, d), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
			t.Errorf("%s: %s = %q %v, want y", d, opaqueXattr, buf[:n], err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "d")); fi.Mode().Perm() != 0o750 {
		t.Errorf("d mode %v, want 0750", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kept")); string(b) != "k" {
		t.Errorf("kept = %q, want the file of this layer", b)
	}
	for _, n := range []string{".wh.gone", "d/.wh..wh..opq", ".wh..wh.plnk", "plnk"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s exists: whiteout entries must not be unpacked as they are", n)
		}
	}
}

func TestUnpackRefuses(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		want    error
	}{
		{"dotdot", []entry{{name: "../evil", body: "x"}}, errTraversal},
		{"inner dotdot", []entry{{name: "a/../../evil", body: "x"}}, errTraversal},
		{"dotdot whiteout", []entry{{name: "../.wh.evil"}}, errTraversal},
		{"write through absolute symlink", []entry{
			{name: "esc", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "esc/evil", body: "x"},
		}, errSymlinkParent},
		{"write through relative symlink", []entry{
			{name: "real/", typ: tar.TypeDir},
			{name: "alias", typ: tar.TypeSymlink, link: "real"},
			{name: "alias/evil", body: "x"},
		}, errSymlinkParent},
		{"whiteout through symlink", []entry{
			{name: "esc", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "esc/.wh.victim"},
		}, errSymlinkParent},
		{"opaque through symlink", []entry{
			{name: "esc", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "esc/.wh..wh..opq"},
		}, errSymlinkParent},
		{"hard link out", []entry{{name: "hl", typ: tar.TypeLink, link: "../victim"}}, errTraversal},
		{"hard link to absolute path is inside the layer", []entry{{name: "hl", typ: tar.TypeLink, link: "OUTSIDE/victim"}}, errBadLinkTarget},
		{"hard link through symlink", []entry{
			{name: "esc", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "hl", typ: tar.TypeLink, link: "esc/victim"},
		}, errBadLinkTarget},
		{"file as parent", []entry{
			{name: "f", body: "x"},
			{name: "f/child", body: "x"},
		}, errNotDirParent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outside := t.TempDir()
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			for i := range tt.entries {
				tt.entries[i].link = strings.ReplaceAll(tt.entries[i].link, "OUTSIDE", outside)
			}
			dir := t.TempDir()
			err := unpack(context.Background(), dir, bytes.NewReader(tarOf(t, tt.entries...)), nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("unpack: %v, want %v", err, tt.want)
			}
			entries, _ := os.ReadDir(outside)
			if b, _ := os.ReadFile(victim); len(entries) != 1 || string(b) != "original" {
				t.Errorf("outside the layer changed: %d entries, victim %q", len(entries), b)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "evil")); err == nil {
				t.Error("evil written beside the layer")
			}
		})
	}
}

func TestUnpackCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := unpack(ctx, t.TempDir(), bytes.NewReader(tarOf(t, entry{name: "f", body: "x"})), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("unpack: %v, want context.Canceled", err)
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"a/b", "a/b", nil},
		{"./a/./b/", "a/b", nil},
		{"/abs/x", "abs/x", nil},
		{"//a//b", "a/b", nil},
		{".", "", nil},
		{"", "", nil},
		{"..", "", errTraversal},
		{"a/..", "", errTraversal},
		{"a/\x00b", "", errInvalidEntry},
	}
	for _, tt := range tests {
		got, err := cleanPath(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("cleanPath(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// FuzzUnpack feeds arbitrary bytes to the unpacker as a layer: it must never
// panic, and never create or change anything outside the layer directory
// (nor more than its limits inside).
func FuzzUnpack(f *testing.F) {
	f.Add(tarOf(f, entry{name: "a/b/c", body: "x"}, entry{name: "l", typ: tar.TypeSymlink, link: "/"}))
	f.Add(tarOf(f, entry{name: "l", typ: tar.TypeSymlink, link: "../.."}, entry{name: "l/x", body: "x"}))
	f.Add(tarOf(f, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/.wh..wh..opq"}, entry{name: ".wh.d"}))
	f.Add(tarOf(f, entry{name: "f", body: "x"}, entry{name: "h", typ: tar.TypeLink, link: "f"}, entry{name: "f/", typ: tar.TypeDir}))
	f.Add(tarOf(f, entry{name: "../../x", body: "x"}))
	f.Add(tarOf(f, entry{name: "p", typ: tar.TypeFifo}, entry{name: "c", typ: tar.TypeChar}))
	f.Add([]byte("not a tar"))
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		sandbox, err := os.MkdirTemp(base, "")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sandbox)
		outside := filepath.Join(sandbox, "outside")
		layer := filepath.Join(sandbox, "layer")
		for _, d := range []string{outside, layer} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("v"), 0o644); err != nil {
			t.Fatal(err)
		}
		// The result does not matter, only what it did, within the limits.
		_ = unpack(context.Background(), layer, bytes.NewReader(data), &layerBudget{maxBytes: 1 << 20, maxFiles: 1000})

		top, err := os.ReadDir(sandbox)
		if err != nil {
			t.Fatal(err)
		}
		if len(top) != 2 {
			t.Fatalf("sandbox has %d entries, want layer and outside only", len(top))
		}
		in, err := os.ReadDir(outside)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "victim")); len(in) != 1 || string(b) != "v" {
			t.Fatalf("outside changed: %d entries, victim %q", len(in), b)
		}
		// Let RemoveAll remove whatever modes the layer set, even as
		// non-root.
		filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}
