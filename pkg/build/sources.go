package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// Sources keeps the uploaded source archives of Builds, one file per
// Build UID, until the build ends or the Build is deleted.
type Sources struct{ dir string }

// NewSources keeps the archives in dir (made if missing, mode 0700).
func NewSources(dir string) (*Sources, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("build sources: %w", err)
	}
	return &Sources{dir: dir}, nil
}

func (s *Sources) path(uid types.UID) string {
	return filepath.Join(s.dir, strings.ToLower(string(uid))+".tar")
}

// has tells whether the Build's archive is there.
func (s *Sources) has(uid types.UID) bool {
	_, err := os.Stat(s.path(uid))
	return err == nil
}

// remove deletes the Build's archive, if any.
func (s *Sources) remove(uid types.UID) {
	_ = os.Remove(s.path(uid))
}

// put stores r as the Build's archive (whole or not at all).
func (s *Sources) put(uid types.UID, r io.Reader) error {
	f, err := os.CreateTemp(s.dir, ".upload-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(uid))
}

// keep removes the archives of Builds not in uids (deleted while knbox was
// down) and leftover partial uploads.
func (s *Sources) keep(uids map[types.UID]bool) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		uid, ok := strings.CutSuffix(e.Name(), ".tar")
		if !ok || !uids[types.UID(uid)] {
			_ = os.RemoveAll(filepath.Join(s.dir, e.Name())) // a partial upload, or a clone's leftover .git-* directory
		}
	}
}

// Upload is the API server's BuildSource: it stores the source archive of a
// Build that waits for one and wakes the build.
func (c *Controller) Upload(_ context.Context, obj runtime.Object, body io.Reader) error {
	b, ok := obj.(*buildv1alpha1.Build)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("not a Build: %T", obj))
	}
	gr := buildv1alpha1.Resource("builds")
	switch {
	case c.opts.Sources == nil:
		return apierrors.NewMethodNotSupported(gr, "upload")
	case b.Spec.Source == nil || b.Spec.Source.Upload == nil:
		return apierrors.NewBadRequest(fmt.Sprintf("Build %q takes no upload: its spec.source.upload is not set", b.Name))
	case b.Status.StartTime != nil || b.Status.IsDone():
		return apierrors.NewConflict(gr, b.Name, errors.New("the build has started: its source cannot change"))
	case c.opts.Sources.has(b.UID):
		return apierrors.NewConflict(gr, b.Name, errors.New("the source is uploaded already: create a new Build for another"))
	}
	if err := c.opts.Sources.put(b.UID, body); err != nil {
		return err
	}
	c.log.Info("build source uploaded", "namespace", b.Namespace, "build", b.Name)
	c.queue.Add(b.Namespace + "/" + b.Name)
	return nil
}
