package image

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/disk"
)

// maxMountData is the size limit of mount(2)'s option string (one page).
const maxMountData = 4096 - 1

// Mount creates dir/upper, dir/work and dir/rootfs and mounts at dir/rootfs
// an overlay of the image's layers with dir/upper as its private writable
// layer, and returns dir/rootfs. Starting an instance this way copies
// nothing; its writes land in dir/upper only. It needs root (CAP_SYS_ADMIN).
//
// Layers are passed one by one with the "lowerdir+" option of the new mount
// API where the kernel has it (Linux 6.8), which has no limit on their
// number; older kernels get the classic mount(2) option string, which must
// fit in a page (about 38 layers with a short Root).
func (s *Store) Mount(img *Image, dir string) (string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if img == nil {
		return "", errors.New("mount: no image")
	}
	lowers := make([]string, 0, len(img.Layers))
	for _, l := range slices.Backward(img.Layers) { // overlay wants the top first
		if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("mount %s: layer %s is not in the cache (pruned?)", img.Ref, l)
		}
		// overlayfs refuses a lower dir twice. An image may have one
		// layer twice (identical content); the topmost occurrence
		// provides all its files, so the lower ones change nothing.
		if !slices.Contains(lowers, l) {
			lowers = append(lowers, l)
		}
	}
	if len(lowers) == 0 {
		lowers = []string{s.emptyDir()}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("mount %s: %w", img.Ref, err)
	}
	upper, work, rootfs := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "rootfs")
	for _, d := range []string{upper, work, rootfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("mount %s: %w", img.Ref, err)
		}
	}
	if mounted, err := disk.IsMountPoint(rootfs); err != nil || mounted {
		if err == nil {
			err = errors.New("already mounted: Unmount first")
		}
		return "", fmt.Errorf("mount %s at %s: %w", img.Ref, rootfs, err)
	}
	if err := mountOverlay(lowers, upper, work, rootfs); err != nil {
		return "", fmt.Errorf("mount %s at %s: %w", img.Ref, rootfs, err)
	}
	return rootfs, nil
}

// Unmount unmounts dir/rootfs (lazily if it is busy) and removes dir/upper,
// dir/work and the empty dir/rootfs: the instance's writes are gone. It is a
// no-op for what is already gone.
func Unmount(dir string) error {
	rootfs := filepath.Join(dir, "rootfs")
	if err := unix.Unmount(rootfs, 0); err != nil {
		switch {
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(rootfs, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", rootfs, err)
			}
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// Not mounted (any more).
		default:
			return fmt.Errorf("unmount %s: %w", rootfs, err)
		}
	}
	// Never RemoveAll the mount point: if it were still mounted, that
	// would delete through the overlay. Rmdir fails on a non-empty dir.
	if err := os.Remove(rootfs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unmount %s: remove mount point: %w", rootfs, err)
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return nil
}

// mountOverlay mounts an overlay of lowers (top first) with upper and work at
// target.
func mountOverlay(lowers []string, upper, work, target string) error {
	err := fsmountOverlay(lowers, upper, work, target)
	if !errors.Is(err, errUseMount2) {
		return err
	}
	return mount2Overlay(lowers, upper, work, target)
}

// mount2Overlay mounts with mount(2) and one option string.
func mount2Overlay(lowers []string, upper, work, target string) error {
	data := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if len(data) > maxMountData {
		return fmt.Errorf("%d layers make an overlay option string of %d bytes, more than mount(2) takes on this kernel (Linux < 6.8)", len(lowers), len(data))
	}
	return unix.Mount("overlay", target, "overlay", 0, data)
}

// errUseMount2 says that the new mount API or its "lowerdir+" option is
// missing, so mount(2) must do.
var errUseMount2 = errors.New("use mount(2)")

// fsmountOverlay mounts with fsopen/fsconfig/fsmount/move_mount, passing each
// lower dir as its own "lowerdir+" option.
func fsmountOverlay(lowers []string, upper, work, target string) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || (errors.Is(err, unix.EPERM) && os.Geteuid() == 0) {
			return errUseMount2
		}
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	for i, l := range lowers {
		if err := unix.FsconfigSetString(fd, "lowerdir+", l); err != nil {
			if i == 0 && errors.Is(err, unix.EINVAL) {
				return errUseMount2
			}
			return fmt.Errorf("lowerdir+ %s: %w", l, err)
		}
	}
	for _, kv := range [][2]string{{"upperdir", upper}, {"workdir", work}, {"source", "overlay"}} {
		if err := unix.FsconfigSetString(fd, kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s %s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fmt.Errorf("create overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// mountedLowerDirs returns the lower dirs of the overlays mounted in this
// process's mount namespace, from /proc/self/mountinfo.
func mountedLowerDirs() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		for _, l := range overlayLowerDirs(sc.Text()) {
			out[l] = true
		}
	}
	return out, sc.Err()
}

// overlayLowerDirs parses one mountinfo line and returns the lower dirs if it
// is an overlay mount: from "lowerdir=a:b" (mount(2)) or repeated
// "lowerdir+=a" (the new mount API).
func overlayLowerDirs(line string) []string {
	_, after, ok := strings.Cut(line, " - ")
	if !ok {
		return nil
	}
	fields := strings.Fields(after) // fstype source super-options
	if len(fields) < 3 || fields[0] != "overlay" {
		return nil
	}
	var out []string
	for _, opt := range strings.Split(fields[2], ",") {
		key, val, ok := strings.Cut(opt, "=")
		if !ok {
			continue
		}
		switch key {
		case "lowerdir":
			for _, l := range splitUnescaped(val, ':') {
				out = append(out, unescapeMountinfo(l))
			}
		case "lowerdir+", "datadir+":
			out = append(out, unescapeMountinfo(val))
		}
	}
	return out
}

// splitUnescaped splits s at sep not preceded by a backslash.
func splitUnescaped(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) and the
// backslash escapes of overlay option values in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		if i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i+1])
		i++
	}
	return b.String()
}
