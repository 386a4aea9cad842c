package disk

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrepareDataDir: a data dir that exists with another mode (0755 let
// any local user read Secret volume files) is made 0700; a missing one is
// created 0700; one that is a file is refused.
func TestPrepareDataDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for i, mode := range []os.FileMode{0o755, 0o777, 0o750, 0o700, 0o700 | os.ModeSetgid | os.ModeSticky} {
		dir := filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := PrepareDataDir(dir); err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode() != os.ModeDir|0o700 {
			t.Errorf("a data dir of mode %v is now %v, %v; want 0700", mode, fi.Mode(), err)
		}
	}
	created := filepath.Join(root, "new", "data")
	if err := PrepareDataDir(created); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created data dir: %v, %v", fi.Mode(), err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrepareDataDir(file); err == nil {
		t.Error("a file accepted as data dir")
	}
}

func TestPrepareDataDirOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := PrepareDataDir(dir); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a data dir of another user: %v", err)
	}
}

func TestFreeAndBytes(t *testing.T) {
	t.Parallel()
	if n, err := Free(t.TempDir()); err != nil || n <= 0 {
		t.Errorf("Free = %d, %v", n, err)
	}
	if _, err := Free(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Free of a missing path")
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 29: "1.5 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
