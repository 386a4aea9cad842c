package pod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/knbox/knbox/pkg/image"
)

// Names in a files volume's directory besides the user's files, as the
// kubelet lays them out: the files live in a directory of their own whose
// name starts with "..", ..data is a symlink to it, and every top-level name
// the user sees is a symlink through ..data. An update writes a new
// directory and renames a new symlink over ..data: a reader sees the old
// files or the new ones, never a mix.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
)

// checkFiles refuses file paths that would leave the volume or collide
// with its own names, and a path that is a file and a directory at once
// ("a" and "a/b").
func checkFiles(files map[string]File) error {
	for p := range files {
		c := path.Clean(p)
		if p == "" || c != p || path.IsAbs(p) || p == "." || strings.HasPrefix(p, "..") || strings.Contains(p, "\x00") {
			return fmt.Errorf("file path %q: want a clean relative path that does not start with '..'", p)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; ok {
				return fmt.Errorf("file paths %q and %q: %q cannot be a file and a directory", d, p, d)
			}
		}
	}
	return nil
}

// writeVolume makes dir hold files, laid out as above. It writes nothing
// and returns false when dir holds them already (same paths, contents and
// modes).
func writeVolume(dir string, files map[string]File) (changed bool, err error) {
	if err := checkFiles(files); err != nil {
		return false, err
	}
	if same, err := volumeHolds(dir, files); err != nil {
		return false, err
	} else if same {
		return false, nil
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, fmt.Errorf("write volume: %w", err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return false, fmt.Errorf("write volume: %w", err)
	}
	for p, f := range files {
		dst := filepath.Join(ts, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
		if err := os.WriteFile(dst, f.Data, f.Mode.Perm()); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
		if err := os.Chmod(dst, f.Mode.Perm()); err != nil { // past the umask
			return false, fmt.Errorf("write volume: %w", err)
		}
	}
	tmp := filepath.Join(dir, dataLinkTmp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("write volume: %w", err)
	}
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return false, fmt.Errorf("write volume: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, fmt.Errorf("write volume: %w", err)
	}
	// The user's names: a link for each new top-level name, none for a gone one.
	top := map[string]bool{}
	for p := range files {
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(path.Join(dataLink, name), link); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("write volume: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "..") || top[name] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
	}
	if old != "" && old != filepath.Base(ts) && strings.HasPrefix(old, "..") && !strings.Contains(old, "/") {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
	}
	return true, nil
}

// volumeHolds tells whether dir's ..data holds exactly files.
func volumeHolds(dir string, files map[string]File) (bool, error) {
	data := filepath.Join(dir, dataLink)
	if _, err := os.Lstat(data); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	n := 0
	err := filepath.WalkDir(data+"/", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel, err := filepath.Rel(data, p)
		if err != nil {
			return err
		}
		want, ok := files[filepath.ToSlash(rel)]
		if !ok {
			return errDiffers
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != want.Mode.Perm() || fi.Size() != int64(len(want.Data)) {
			return errDiffers
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, want.Data) {
			return errDiffers
		}
		return nil
	})
	if errors.Is(err, errDiffers) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read volume: %w", err)
	}
	return n == len(files), nil
}

var errDiffers = errors.New("differs")

// seedTimeout bounds unpacking a seed archive.
const seedTimeout = 10 * time.Minute

// seed unpacks an emptyDir's seed archive into it, or runs its Fill with
// the pod's network view (made afresh: a pod that prepares again, after a
// restart of its containers, keeps what its containers wrote).
func seed(ctx context.Context, dir string, s *Seed, net SeedNet) error {
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
	if s.Fill != nil {
		if err := s.Fill(ctx, dir, net); err != nil {
			return &SeedError{err}
		}
		return nil
	}
	f, err := os.Open(s.Path)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	defer f.Close()
	return image.UnpackArchive(ctx, dir, f, s.Limits)
}
