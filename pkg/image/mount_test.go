package image

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/knbox/knbox/pkg/disk"
)

// TestMountedLowerDirsSeesBothMountAPIs mounts overlays with the new mount
// API and with mount(2) and checks that Prune's view of mountinfo finds the
// lower dirs of both.
func TestMountedLowerDirsSeesBothMountAPIs(t *testing.T) {
	requireRoot(t)
	for name, mount := range map[string]func(lowers []string, upper, work, target string) error{
		"fsmount": fsmountOverlay,
		"mount2":  mount2Overlay,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"l1", "l2", "upper", "work", "rootfs"} {
				if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			lowers := []string{filepath.Join(dir, "l1"), filepath.Join(dir, "l2")}
			os.WriteFile(filepath.Join(lowers[1], "f"), []byte("x"), 0o644)
			err := mount(lowers, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "rootfs"))
			if err == errUseMount2 {
				t.Skip("this kernel has no lowerdir+")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer Unmount(dir)
			if b, _ := os.ReadFile(filepath.Join(dir, "rootfs", "f")); string(b) != "x" {
				t.Errorf("rootfs/f = %q", b)
			}
			got, err := mountedLowerDirs()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lowers {
				if !got[l] {
					t.Errorf("%s not seen as a mounted lower dir", l)
				}
			}
			if mounted, _ := disk.IsMountPoint(filepath.Join(dir, "rootfs")); !mounted {
				t.Error("disk.IsMountPoint(rootfs) = false")
			}
		})
	}
}
