// Package disk owns knbox's data directory as a place on the host: it makes
// it private to knbox's user, whatever mode it had, and tells how much room
// its file system has left, for the store's and the image cache's limits and
// for the readiness check.
//
// It must not import other knbox packages; it knows nothing of what the data
// directory holds.
package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DataDirMode is the mode of the data directory: it holds Secret volumes,
// the API's credentials and every tenant's files.
const DataDirMode fs.FileMode = 0o700

// PrepareDataDir creates dir (and its parents) if missing and makes it mode
// 0700 even when it existed with another mode, since a group- or
// world-readable data dir lets local users read Secret volume files and the
// admin token. dir must be a directory owned by the effective user (after
// following symlinks, so a data dir may be a link to another disk): one that
// another user owns could be changed under knbox, and is refused.
func PrepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, DataDirMode); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("data dir %s: not a directory", dir)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("data dir %s: owned by uid %d, not by knbox's user (uid %d): another user could change knbox's state; chown it or pick another dataDir", dir, st.Uid, uid)
	}
	if fs.FileMode(st.Mode)&fs.ModePerm != DataDirMode || st.Mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) != 0 {
		if err := os.Chmod(dir, DataDirMode); err != nil {
			return fmt.Errorf("data dir %s: make it private (0700): %w", dir, err)
		}
	}
	return nil
}

// Free is the number of bytes available to an unprivileged user on the file
// system holding path (statfs f_bavail: what root's reserved blocks leave).
func Free(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// IsNoSpace reports whether err says that a file system is full (ENOSPC) or
// that a quota is exhausted (EDQUOT).
func IsNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// Bytes formats n as a human-readable size for messages ("1.5 GiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		suffix = s
		if f < unit && f > -unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", f, suffix)
}

// IsMountPoint tells whether something is mounted at dir: whether dir is
// on another file system (device) than its parent.
func IsMountPoint(dir string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &pst); err != nil {
		return false, err
	}
	return st.Dev != pst.Dev, nil
}
