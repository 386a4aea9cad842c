// Package safemount pins the host paths that knbox hands an OCI runtime as
// bind-mount sources, so that no container can change what they name
// between knbox's check and the runtime's mount.
//
// The attack it closes (the kubelet's CVE-2017-1002101): two containers
// share an emptyDir; the first keeps swapping "a" between a directory and a
// symbolic link to a host path; the second mounts the emptyDir with
// subPath "a". Resolving the path to a string and handing that string to
// runc lets runc resolve it again, later, after the swap: the host
// directory ends up mounted read-write in the container.
//
// Pin resolves a path below a root with openat2(2) (RESOLVE_BENEATH: no
// "..", absolute symbolic link or mount crossing leads out of the root;
// RESOLVE_NO_MAGICLINKS; and RESOLVE_NO_SYMLINKS where no symbolic link is
// expected), holding the result as an O_PATH file descriptor, then
// bind-mounts that descriptor (/proc/self/fd/N: the mount takes the
// descriptor's file, it does not look the name up again) onto an entry of
// a private staging directory that only root can reach, checks that the
// mount shows the very file it opened (device and inode), and returns the
// entry's path. That path is what goes into the OCI spec: nothing a
// container can write lies on the way to it.
//
// The package owns the staging directory and its mounts, nothing else: it
// imports no other knbox package and knows no spec. Release unmounts a
// staging directory's mounts and removes it; after a crash of the daemon,
// whoever removes the directory that holds it must unmount what is
// mounted below it first (package instance's Recover does).
package safemount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxEntries bounds the mounts of one staging directory.
const maxEntries = 4096

// Dir is a staging directory.
type Dir struct {
	path string
	n    int
}

// Open makes dir (mode 0700, owned by this process's user) as a staging
// directory, or reuses one that is there. It refuses a dir that is a
// symbolic link or not a directory.
func Open(dir string) (*Dir, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("staging directory %s is not a directory", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	return &Dir{path: dir}, nil
}

// Path is the staging directory.
func (d *Dir) Path() string { return d.path }

// Options say how Pin resolves a path.
type Options struct {
	// FollowSymlinks lets the path pass symbolic links, as long as they
	// stay below the root (a volume's subPath; Secret and ConfigMap
	// volumes are made of links). Without it any link fails the Pin: for
	// files knbox made itself.
	FollowSymlinks bool
	// MakeDirs, when not 0, makes what is missing of the path as
	// directories with these permissions (an emptyDir's subPath, which
	// the kubelet makes too). The directories are made and opened one by
	// one below the root without following any link: a path knbox must
	// complete passes none.
	MakeDirs os.FileMode
}

// Pin resolves rel (slash-separated, relative; "" for root itself) below
// root, bind-mounts what it found into the staging directory and returns
// the mount's path. root must be a directory and is not followed if it is a
// symbolic link. What rel names must be a directory, a regular file or a
// socket.
func (d *Dir) Pin(root, rel string, opts Options) (string, error) {
	fd, err := openBeneath(root, rel, opts)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", describe(root, rel), err)
	}
	isDir := false
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		isDir = true
	case unix.S_IFREG, unix.S_IFSOCK:
	default:
		return "", fmt.Errorf("%s is neither a directory, a regular file nor a socket", describe(root, rel))
	}
	target, err := d.newEntry(isDir)
	if err != nil {
		return "", err
	}
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		removeEntry(target)
		return "", fmt.Errorf("bind %s: %w", describe(root, rel), err)
	}
	if err := sameFile(target, &st); err != nil {
		_ = unmountAll(target)
		removeEntry(target)
		return "", fmt.Errorf("pin %s: %w", describe(root, rel), err)
	}
	return target, nil
}

// openBeneath opens rel below root as an O_PATH descriptor.
func openBeneath(root, rel string, opts Options) (int, error) {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", root, err)
	}
	if rel == "" || rel == "." {
		return rootFd, nil
	}
	defer unix.Close(rootFd)
	if strings.HasPrefix(rel, "/") {
		return -1, fmt.Errorf("%s: not a relative path", describe(root, rel))
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	if !opts.FollowSymlinks {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	for range 64 {
		fd, err := unix.Openat2(rootFd, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOENT) && opts.MakeDirs != 0:
			return makeBeneath(rootFd, root, rel, opts.MakeDirs)
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			// A rename raced the lookup (RESOLVE_BENEATH retries are
			// the caller's): try again, a bounded number of times.
			continue
		case errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%s leads out of %s", describe(root, rel), root)
		case errors.Is(err, unix.ELOOP) && !opts.FollowSymlinks:
			return -1, fmt.Errorf("%s passes a symbolic link", describe(root, rel))
		case errors.Is(err, unix.ENOSYS):
			return -1, fmt.Errorf("open %s: openat2 needs Linux 5.6 or later: %w", describe(root, rel), err)
		default:
			return -1, fmt.Errorf("open %s: %w", describe(root, rel), err)
		}
	}
	return -1, fmt.Errorf("open %s: renamed under us too often", describe(root, rel))
}

// makeBeneath opens rel below the directory rootFd component by component,
// making the directories that are missing with mode perm, and returns an
// O_PATH descriptor of the last. No component may be a link, "." or "..".
func makeBeneath(rootFd int, root, rel string, perm os.FileMode) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	cur, err := unix.Dup(rootFd)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", root, err)
	}
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		if c == "" || c == "." || c == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("%s: a path knbox makes has no empty, \".\" or \"..\" component", describe(root, rel))
		}
		last := i == len(comps)-1
		fd, err := unix.Openat2(cur, c, &how)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, c, uint32(perm.Perm())); err == nil || errors.Is(err, unix.EEXIST) {
				if fd, err = unix.Openat2(cur, c, &how); err == nil {
					// The mode past the umask, on the directory opened
					// (never through a name a link could have taken).
					err = unix.Fchmod(fd, unixMode(perm))
				}
			}
		}
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return -1, fmt.Errorf("make %s: %q is not a directory (links are not followed when knbox makes the path)", describe(root, rel), strings.Join(comps[:i+1], "/"))
			}
			return -1, fmt.Errorf("make %s: %w", describe(root, rel), err)
		}
		if last {
			return fd, nil
		}
		cur = fd
	}
	return -1, fmt.Errorf("%s: empty path", describe(root, rel))
}

// unixMode is perm as chmod(2) takes it: permissions and the sticky bit.
func unixMode(perm os.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

func describe(root, rel string) string {
	if rel == "" {
		return root
	}
	return fmt.Sprintf("%q below %s", rel, root)
}

// newEntry makes an empty directory or file in the staging directory for a
// mount to cover.
func (d *Dir) newEntry(dir bool) (string, error) {
	for ; d.n < maxEntries; d.n++ {
		p := filepath.Join(d.path, strconv.Itoa(d.n))
		var err error
		if dir {
			err = unix.Mkdir(p, 0o700)
		} else {
			var fd int
			fd, err = unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err == nil {
				unix.Close(fd)
			}
		}
		if errors.Is(err, unix.EEXIST) {
			continue // left by an earlier run of this directory
		}
		if err != nil {
			return "", fmt.Errorf("staging entry: %w", err)
		}
		d.n++
		return p, nil
	}
	return "", fmt.Errorf("staging directory %s: more than %d entries", d.path, maxEntries)
}

// sameFile checks that target (not followed) is the file st describes.
func sameFile(target string, want *unix.Stat_t) error {
	fd, err := unix.Open(target, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		return err
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		return fmt.Errorf("the mount at %s shows device %d inode %d, not the file opened (device %d inode %d)", target, got.Dev, got.Ino, want.Dev, want.Ino)
	}
	return nil
}

// Release unmounts every entry of the staging directory dir and removes it.
// A dir that does not exist is released already. It never removes anything
// through a mount: an entry that stays mounted makes it fail.
func Release(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", dir, err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := unmountAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := removeEntryErr(p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("release %s: %w", dir, errors.Join(errs...))
	}
	return nil
}

// unmountAll unmounts whatever is mounted at p (mounts may be stacked),
// lazily when busy, without following p if it is a link.
func unmountAll(p string) error {
	for range 16 {
		err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		default:
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", p)
}

func removeEntry(p string) { _ = removeEntryErr(p) }

// removeEntryErr removes an unmounted entry: an empty directory or a file.
func removeEntryErr(p string) error {
	err := unix.Rmdir(p)
	if errors.Is(err, unix.ENOTDIR) {
		err = unix.Unlink(p)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
