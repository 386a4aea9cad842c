package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/disk"
)

// space enforces Options.MinFreeBytes and keeps the reserve file. Its
// methods are called with Store.mu held.
type space struct {
	dir      string // the directory of the database file
	reserve  string // the reserve file's path; "" without one
	minFree  int64  // <= 0: no check
	size     int64  // of the reserve file
	haveFile bool   // the reserve file is there, at its size
}

func (sp *space) init(dbPath string, minFree, reserve int64) {
	sp.dir, sp.minFree = filepath.Dir(dbPath), minFree
	if reserve > 0 {
		sp.reserve, sp.size = dbPath+".reserve", reserve
		sp.ensureReserve()
	}
}

// free is the space left on the database's file system.
func (sp *space) free() (int64, error) { return disk.Free(sp.dir) }

// check returns ErrNoSpace, with the figures, when less than MinFreeBytes
// are free. It also makes the reserve again once there is room for it.
func (sp *space) check() error {
	if sp.minFree <= 0 && sp.reserve == "" {
		return nil
	}
	free, err := sp.free()
	if err != nil {
		return nil // cannot tell: let the write find out
	}
	if sp.reserve != "" && !sp.haveFile && free >= sp.minFree+2*sp.size {
		sp.ensureReserve()
		free -= sp.size
	}
	if sp.minFree > 0 && free < sp.minFree {
		return sp.lowError(free)
	}
	return nil
}

func (sp *space) lowError(free int64) error {
	return fmt.Errorf("%s free in %s, below the %s kept free (minFreeBytes): only deletions are accepted until space is freed: %w",
		disk.Bytes(free), sp.dir, disk.Bytes(sp.minFree), ErrNoSpace)
}

// ensureReserve makes the reserve file hold its size in real blocks
// (fallocate), so that removing it frees that much.
func (sp *space) ensureReserve() {
	f, err := os.OpenFile(sp.reserve, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, sp.size); err != nil {
		// No room (or no fallocate): keep what there is; a later check
		// tries again.
		return
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > sp.size {
		_ = f.Truncate(sp.size) // the size was lowered
	}
	sp.haveFile = true
}

// release removes the reserve file, if there is one, and reports whether
// that freed anything.
func (sp *space) release() bool {
	if sp.reserve == "" {
		return false
	}
	err := os.Remove(sp.reserve)
	had := sp.haveFile || err == nil
	sp.haveFile = false
	return had && (err == nil || !errors.Is(err, fs.ErrNotExist))
}

// Check reports whether the store's file system has at least MinFreeBytes
// free: nil, or an error that wraps ErrNoSpace and says how much is free.
// The readiness check of the API serves it.
func (s *Store) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return s.space.check()
}
