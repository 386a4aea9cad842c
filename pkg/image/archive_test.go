package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func archiveOf(t *testing.T, gz bool, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !gz {
		return buf.Bytes()
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(buf.Bytes())
	_ = zw.Close()
	return z.Bytes()
}

// TestUnpackArchive: plain and gzip archives unpack; escapes and archives
// over their limits are refused with the limit's key.
func TestUnpackArchive(t *testing.T) {
	l := ArchiveLimits{What: "source archive", MaxBytes: 100, MaxFiles: 3, BytesKey: "builds.maxSourceBytes", FilesKey: "builds.maxSourceFiles"}
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
	}
	for _, gz := range []bool{false, true} {
		dir := t.TempDir()
		if err := UnpackArchive(context.Background(), dir, bytes.NewReader(archiveOf(t, gz, &tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("src/main.go", 10))), l); err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "src", "main.go")); err != nil || len(b) != 10 {
			t.Errorf("gzip %v: %q %v", gz, b, err)
		}
	}
	for name, tc := range map[string]struct {
		archive []byte
		want    string
	}{
		"traversal":         {archiveOf(t, false, reg("../evil", 1)), "escapes"},
		"through a symlink": {archiveOf(t, false, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, reg("l/passwd", 1)), "symlink"},
		"too big":           {archiveOf(t, true, reg("a", 101)), "builds.maxSourceBytes"},
		"too many":          {archiveOf(t, false, reg("a", 1), reg("b", 1), reg("c", 1), reg("d", 1)), "builds.maxSourceFiles"},
		"not a tar":         {[]byte("hello, this is not an archive at all, not even close to one........................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................"), "source archive"},
	} {
		dir := t.TempDir()
		err := UnpackArchive(context.Background(), dir, bytes.NewReader(tc.archive), l)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// FuzzUnpackArchive: any archive unpacks or is refused, inside its
// directory, without a panic.
func FuzzUnpackArchive(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		_ = UnpackArchive(context.Background(), dir, bytes.NewReader(data), ArchiveLimits{What: "archive", MaxBytes: 1 << 20, MaxFiles: 100})
	})
}
