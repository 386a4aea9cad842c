package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Names of OCI whiteouts and of the overlayfs xattr that marks a directory
// opaque.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// Errors of unpacking that a caller (or test) may want to tell apart.
var (
	errTraversal      = errors.New("path escapes the layer (\"..\")")
	errSymlinkParent  = errors.New("parent directory is a symlink: refusing to write through it")
	errNotDirParent   = errors.New("parent is not a directory")
	errBadLinkTarget  = errors.New("hard link target is not in the layer")
	errInvalidEntry   = errors.New("invalid entry name")
	errUnpackCanceled = errors.New("unpack canceled")
)

// unpack extracts the uncompressed layer tar r into dir (an existing, empty
// directory) as an overlayfs lower directory; see the package comment for
// what is kept, skipped and refused. It reads r only up to the end of the
// tar archive. Every entry counts against b (nil: no limits), and a limit
// exceeded ends the unpacking with a contentError.
func unpack(ctx context.Context, dir string, r io.Reader, b *layerBudget) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(root)
	u := &unpacker{root: root, rootless: os.Geteuid() != 0, budget: b, buf: make([]byte, 64<<10)}
	tr := tar.NewReader(r)
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", errUnpackCanceled, ctx.Err())
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		size := int64(0)
		if hdr.Typeflag == tar.TypeReg {
			size = hdr.Size
		}
		if err := b.entry(size); err != nil {
			return err
		}
		if err := u.entry(hdr, tr); err != nil {
			if isContentError(err) {
				return err
			}
			return fmt.Errorf("%q: %w", hdr.Name, err)
		}
	}
	return u.finish()
}

type unpacker struct {
	root     int  // the layer directory, never closed by entry
	rootless bool // not root: ownership cannot be set, so it is not
	dirs     []dirTimes
	budget   *layerBudget
	buf      []byte // for copying files
}

// dirTimes are set when the layer is done, since adding entries to a
// directory changes its modification time.
type dirTimes struct {
	rel          string
	atime, mtime time.Time
}

// cleanPath turns a tar entry name into a relative slash-separated path
// without "." components. A leading "/" is dropped (names are relative to
// the layer); ".." components are refused outright. "" is the layer root.
func cleanPath(name string) (string, error) {
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", errTraversal
		}
		if strings.IndexByte(p, 0) >= 0 {
			return "", errInvalidEntry
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/"), nil
}

// openParent opens the parent directory of rel (a cleaned, non-empty path)
// without following symlinks, creating missing directories (root-owned,
// 0755) when create is set, and returns its fd (to close) and rel's last
// component.
func (u *unpacker) openParent(rel string, create bool) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := unix.Dup(u.root)
	if err != nil {
		return -1, "", err
	}
	unix.CloseOnExec(fd)
	if dir == "" {
		return fd, base, nil
	}
	for _, comp := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		next, err := u.openDir(fd, comp, create)
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, base, nil
}

// openDir opens the directory name in dirfd, never following a symlink.
func (u *unpacker) openDir(dirfd int, name string, create bool) (int, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOENT) && create && attempt == 0:
			if err := unix.Mkdirat(dirfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, err
			}
			continue
		case errors.Is(err, unix.ELOOP):
			return -1, errSymlinkParent
		case errors.Is(err, unix.ENOTDIR):
			var st unix.Stat_t
			if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, errSymlinkParent
			}
			return -1, errNotDirParent
		default:
			return -1, err
		}
	}
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanPath(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		// The layer root itself ("./"): overlay takes the root's
		// attributes from the upper layer, so there is nothing to do.
		return nil
	}
	if base := path.Base(rel); strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(rel, base)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		// Devices (the runtime provides /dev), global headers and
		// types this unpacker does not know are skipped.
		return nil
	}

	pfd, name, err := u.openParent(rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)

	// A later entry replaces an earlier one of the same name, except that
	// a directory stays a directory (keeping its contents).
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case hdr.Typeflag == tar.TypeDir && isDir:
		case hdr.Typeflag == tar.TypeLink && mustClean(hdr.Linkname) == rel:
			return nil // a hard link to itself
		case isDir:
			if err := removeAllAt(pfd, name); err != nil {
				return err
			}
		default:
			if err := unix.Unlinkat(pfd, name, 0); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return err
	}

	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := u.attrs(fd, hdr, mode); err != nil {
			return err
		}
		u.dirs = append(u.dirs, dirTimes{rel: rel, atime: hdr.AccessTime, mtime: hdr.ModTime})
		return nil

	case tar.TypeReg:
		fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		// Blocks of zeros become holes: a sparse file stays sparse.
		w := &sparseWriter{f: f, budget: u.budget}
		if _, err := io.CopyBuffer(w, r, u.buf); err != nil {
			return err
		}
		if err := w.finish(); err != nil {
			return err
		}
		if err := u.attrs(fd, hdr, mode); err != nil {
			return err
		}

	case tar.TypeFifo:
		if err := unix.Mknodat(pfd, name, unix.S_IFIFO|0o600, 0); err != nil {
			return err
		}
		if err := u.chown(pfd, name, hdr); err != nil {
			return err
		}
		if err := unix.Fchmodat(pfd, name, mode, 0); err != nil {
			return err
		}

	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return errInvalidEntry
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, name); err != nil {
			return err
		}
		if err := u.chown(pfd, name, hdr); err != nil {
			return err
		}

	case tar.TypeLink:
		target, err := cleanPath(hdr.Linkname)
		if err != nil {
			return err
		}
		if target == "" {
			return errBadLinkTarget
		}
		tfd, tname, err := u.openParent(target, false)
		if err != nil {
			return fmt.Errorf("%w: %w", errBadLinkTarget, err)
		}
		defer unix.Close(tfd)
		// linkat without AT_SYMLINK_FOLLOW links a symlink itself.
		if err := unix.Linkat(tfd, tname, pfd, name, 0); err != nil {
			return fmt.Errorf("%w: %w", errBadLinkTarget, err)
		}
		return nil // a hard link shares the target's attributes
	}
	return setTimes(pfd, name, hdr.AccessTime, hdr.ModTime)
}

// attrs sets ownership, then mode (chown clears setuid and setgid bits, so
// the order matters), then the kept extended attributes of an open file or
// directory.
func (u *unpacker) attrs(fd int, hdr *tar.Header, mode uint32) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil && !(u.rootless && errors.Is(err, unix.EPERM)) {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	for key, val := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(key, "SCHILY.xattr.")
		if !ok || !keptXattr(attr) {
			continue
		}
		if err := unix.Fsetxattr(fd, attr, []byte(val), 0); err != nil {
			if u.rootless || errors.Is(err, unix.EOPNOTSUPP) {
				continue
			}
			return fmt.Errorf("set xattr %s: %w", attr, err)
		}
	}
	return nil
}

// keptXattr says which extended attributes of a layer are applied: user
// attributes and file capabilities. trusted.* is never applied, so a layer
// cannot forge overlayfs metadata (opaque dirs, redirects, metacopy).
func keptXattr(name string) bool {
	return strings.HasPrefix(name, "user.") || name == "security.capability"
}

func (u *unpacker) chown(dirfd int, name string, hdr *tar.Header) error {
	err := unix.Fchownat(dirfd, name, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !(u.rootless && errors.Is(err, unix.EPERM)) {
		return err
	}
	return nil
}

// whiteout turns an OCI whiteout entry into its overlayfs form.
func (u *unpacker) whiteout(rel, base string) error {
	if base == whiteoutOpaque {
		pfd, _, err := u.openParent(rel, true)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		return unix.Fsetxattr(pfd, opaqueXattr, []byte("y"), 0)
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS metadata (.wh..wh.plnk, ...): meaningless here
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return errInvalidEntry
	}
	pfd, _, err := u.openParent(rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	// A whiteout hides only what lower layers have: an entry of this layer
	// that came earlier stays.
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return nil
	}
	return unix.Mknodat(pfd, name, unix.S_IFCHR, int(unix.Mkdev(0, 0)))
}

// finish sets the times of directories, now that their entries are written.
func (u *unpacker) finish() error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		pfd, name, err := u.openParent(d.rel, false)
		if err != nil {
			continue // replaced by a later entry
		}
		var st unix.Stat_t
		if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = setTimes(pfd, name, d.atime, d.mtime)
		}
		unix.Close(pfd)
		if err != nil {
			return fmt.Errorf("%q: %w", d.rel, err)
		}
	}
	return nil
}

func setTimes(dirfd int, name string, atime, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAllAt removes name in dirfd and everything below it, never following
// a symlink.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		if err := removeAllAt(fd, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// mustClean is cleanPath for comparisons, "" when the name is refused.
func mustClean(name string) string {
	p, err := cleanPath(name)
	if err != nil {
		return ""
	}
	return p
}
