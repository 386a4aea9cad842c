// Package disktest gives tests a small file system of their own to fill, so
// that "the disk is full" can be tested without touching the machine's
// disks. It is for tests only.
package disktest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/disk"
)

// SmallFS mounts a tmpfs of size bytes on a new temporary directory and
// returns the directory; the mount goes when the test ends. It needs root:
// without it the test is skipped, or fails when CI is set.
func SmallFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set, so not skipping: mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file in dir until the file system is full, and returns a
// function that removes it again.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := 0; ; i++ {
		_, err := f.Write(buf)
		if disk.IsNoSpace(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 1<<20 { // 64 GiB: not a small file system
			t.Fatal("the file system does not fill up")
		}
	}
	// Bytes smaller than a write may be left: take them too.
	for n := int64(32 << 10); n >= 1; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !disk.IsNoSpace(err) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	name := f.Name()
	return func() {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
	}
}
