package instance

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

	corev1 "k8s.io/api/core/v1"
)

// DefaultVolumeSyncPeriod is how often running instances' Secret, ConfigMap
// and projected volumes are brought up to date. Kubernetes' kubelet takes
// up to about a minute plus its cache's lifetime; knbox is quicker, and
// eventually consistent in the same way.
const DefaultVolumeSyncPeriod = 10 * time.Second

// volumeFile is one file of a Secret, ConfigMap or projected volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// Names in a volume directory besides the user's files, as the kubelet
// lays them out: the files live in a directory of their own whose name
// starts with "..", ..data is a symlink to it, and every top-level name the
// user sees is a symlink through ..data. An update writes a new directory
// and renames a new symlink over ..data: a reader sees the old files or
// the new ones, never a mix.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
)

// writeVolume makes dir hold files, laid out as above. It writes nothing
// and returns false when dir holds them already (same paths, contents and
// modes).
func writeVolume(dir string, files map[string]volumeFile) (changed bool, err error) {
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
		if err := os.WriteFile(dst, f.data, f.mode); err != nil {
			return false, fmt.Errorf("write volume: %w", err)
		}
		if err := os.Chmod(dst, f.mode); err != nil { // past the umask
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
func volumeHolds(dir string, files map[string]volumeFile) (bool, error) {
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
		if fi.Mode().Perm() != want.mode || fi.Size() != int64(len(want.data)) {
			return errDiffers
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, want.data) {
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

// syncVolumes keeps the instance's Secret, ConfigMap and projected volumes
// up to date until ctx ends: every period it reads their sources again and
// rewrites those that changed (subPath mounts of them stay as they were,
// as in Kubernetes). A source that cannot be read leaves its volume as it
// is. vols maps volume names to their directories.
func (in *instance) syncVolumes(ctx context.Context, volumes []corev1.Volume, vols map[string]string, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, v := range volumes {
			dir, ok := vols[v.Name]
			if !ok || v.EmptyDir != nil {
				continue
			}
			files, err := in.r.m.volumeFiles(in.r.key.namespace, v)
			if err == nil {
				var changed bool
				if changed, err = writeVolume(dir, files); changed {
					in.log.Info("volume updated", "volume", v.Name)
				}
			}
			if err != nil && !failing[v.Name] {
				in.log.Warn("volume not updated; it keeps its content", "volume", v.Name, "err", err)
			}
			failing[v.Name] = err != nil
		}
	}
}
