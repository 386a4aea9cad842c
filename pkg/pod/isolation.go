package pod

import (
	"os"
	"path/filepath"

	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/oci/safemount"
	"github.com/knbox/knbox/pkg/runtime"
)

// policyFor is the operator's policy for a container that handler h runs: a
// handler that refuses root (process, which does not isolate) makes Build
// refuse such a container up front, with an error that names the field
// that made it root, rather than failing in the handler.
func policyFor(p oci.Policy, h runtime.Handler) oci.Policy {
	if rr, ok := h.(runtime.RootRefuser); ok && rr.RefusesRoot() {
		p.RefuseRoot = true
		p.RootRefusedBy = "the " + h.Name() + " runtime, which does not isolate"
	}
	return p
}

// emptyDirMode is the mode of an emptyDir and of the subPath directories
// made in it: writable by every uid, as the containers of a pod may
// run as different users.
const emptyDirMode = 0o777 | os.ModeSticky

// pinDir is the staging directory of c's bind-mount sources (see package
// safemount): below its bundle, so that Recover, which unmounts everything
// below a pod's directory before it removes it, finds them after a crash.
func (c *ctr) pinDir() string { return filepath.Join(c.dir, "pinned") }

// pinner returns the oci.Input.Pin hook for c's next start, in a fresh
// staging directory. Every host path of the spec is pinned: the subPaths
// of volumes that another container of the instance can change under knbox
// (the subPath race of CVE-2017-1002101), and the volumes, /etc files,
// termination log and /dev/log socket, which knbox made and which are
// opened without following any link. A missing subPath of an emptyDir is
// made, as the kubelet makes it.
func (c *ctr) pinner() (func(oci.HostPath) (string, error), error) {
	if err := c.unpin(); err != nil { // what an earlier start left
		return nil, err
	}
	d, err := safemount.Open(c.pinDir())
	if err != nil {
		return nil, err
	}
	c.pinned = true
	return func(hp oci.HostPath) (string, error) {
		opts := safemount.Options{FollowSymlinks: hp.FollowSymlinks}
		if hp.MakeDirs {
			opts.MakeDirs = emptyDirMode // as the emptyDir itself (prepareVolumes)
		}
		return d.Pin(hp.Root, hp.Rel, opts)
	}, nil
}

// unpin unmounts and removes c's staging directory.
func (c *ctr) unpin() error {
	if err := safemount.Release(c.pinDir()); err != nil {
		return err
	}
	c.pinned = false
	return nil
}
