package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Store lays out log files as <root>/<namespace>/<name>/<id>.log. It holds
// no state but its root: any number of Stores (and processes) may use one
// root.
type Store struct {
	root string
}

// NewStore returns the store under root, made if missing.
func NewStore(root string) (*Store, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("log store: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("log store: %w", err)
	}
	return &Store{root: root}, nil
}

// checkName refuses a path element that would leave its directory.
func checkName(what, s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("log store: invalid %s %q", what, s)
	}
	return nil
}

// Dir is the directory of a group's logs.
func (s *Store) Dir(namespace, name string) (string, error) {
	if err := checkName("namespace", namespace); err != nil {
		return "", err
	}
	if err := checkName("name", name); err != nil {
		return "", err
	}
	return filepath.Join(s.root, namespace, name), nil
}

// Path is the log file of instance id of a group.
func (s *Store) Path(namespace, name, id string) (string, error) {
	dir, err := s.Dir(namespace, name)
	if err != nil {
		return "", err
	}
	if err := checkName("id", id); err != nil {
		return "", err
	}
	return filepath.Join(dir, id+".log"), nil
}

// Copy writes a group's logs (every instance's, the rotated files
// included) from o.Since on, in time order, one message a line. With
// o.Follow it keeps writing new lines until ctx ends, a write fails or the
// group is removed.
func (s *Store) Copy(ctx context.Context, namespace, name string, o CopyOptions, w io.Writer) error {
	dir, err := s.Dir(namespace, name)
	if err != nil {
		return err
	}
	return CopyDir(ctx, dir, o, w)
}

// CopyInstance writes one instance's logs as Copy writes a group's; a
// follow ends when the group is removed.
func (s *Store) CopyInstance(ctx context.Context, namespace, name, id string, o CopyOptions, w io.Writer) error {
	path, err := s.Path(namespace, name, id)
	if err != nil {
		return err
	}
	return CopyFile(ctx, path, o, w)
}

// Remove deletes a group's logs.
func (s *Store) Remove(namespace, name string) error {
	dir, err := s.Dir(namespace, name)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove logs of %s/%s: %w", namespace, name, err)
	}
	_ = os.Remove(filepath.Dir(dir)) // the namespace's, if empty
	return nil
}

// RemoveInstances deletes the log files of some instances of a group (a
// revision deleted while another of the same name runs), and the group's
// directory if that leaves it empty.
func (s *Store) RemoveInstances(namespace, name string, ids []string) error {
	dir, err := s.Dir(namespace, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := checkName("id", id); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, suffix := range []string{".log", ".log.1"} {
			if err := os.Remove(filepath.Join(dir, id+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	_ = os.Remove(dir) // only if empty
	return errors.Join(errs...)
}

// Prune removes the log files of all but the keep most recently written
// instances of a group that are not live.
func (s *Store) Prune(namespace, name string, live map[string]bool, keep int) error {
	dir, err := s.Dir(namespace, name)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	type stopped struct {
		id  string
		mod time.Time
	}
	var old []stopped
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || live[id] {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		old = append(old, stopped{id, fi.ModTime()})
	}
	if len(old) <= keep {
		return nil
	}
	slices.SortFunc(old, func(a, b stopped) int { return b.mod.Compare(a.mod) })
	var errs []error
	for _, st := range old[keep:] {
		for _, suffix := range []string{".log", ".log.1"} {
			if err := os.Remove(filepath.Join(dir, st.id+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
