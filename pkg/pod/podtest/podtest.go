// Package podtest holds the fixtures that the tests of the pod runtime and
// of the replica controller share: handlers opened as knbox opens them,
// the root and binary checks, and the test images in a registry that lives
// as long as the test binary. Only tests import it.
package podtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
	"github.com/knbox/knbox/pkg/runtime"
)

// RuntimeInfoPkg is the test image's program.
const RuntimeInfoPkg = "github.com/knbox/knbox/test/images/runtime-info"

// RequireHandler skips the test unless root and the handler's binary are
// there; in CI (CI set) it fails instead.
func RequireHandler(t testing.TB, name string) {
	t.Helper()
	imagetest.Require(t, os.Geteuid() == 0, "pods need root (overlay mounts, network namespaces)")
	if name != "process" {
		_, err := exec.LookPath(name)
		imagetest.Require(t, err == nil, name+" is not installed (apt-get install "+name+")")
	}
}

// NewHandler opens handler name with its state under dir.
func NewHandler(t testing.TB, name, dir string) runtime.Handler {
	t.Helper()
	var (
		h   runtime.Handler
		err error
	)
	switch name {
	case "process":
		h = runtime.NewProcess(filepath.Join(dir, "process"))
	case "runc":
		h, err = runtime.NewOCI(runtime.OCIConfig{Binary: "runc", Root: filepath.Join(dir, "runc")})
	case "runsc":
		// See package runtime for why runsc runs with host networking (in
		// the pod's namespace).
		h, err = runtime.NewOCI(runtime.OCIConfig{Binary: "runsc", Root: filepath.Join(dir, "runsc"), Args: []string{"--network=host", "--host-uds=open", "--oci-seccomp"},
			ManageCgroups: true})
	default:
		t.Fatalf("unknown handler %q", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// images caches one registry and the test images per test binary.
var images struct {
	once    sync.Once
	host    string
	ref     string
	bbOnce  sync.Once
	busybox string
}

// RuntimeInfoImage returns the digest reference of the runtime-info image
// in a registry that lives as long as the test binary.
func RuntimeInfoImage(t testing.TB) string {
	t.Helper()
	images.once.Do(func() {
		// The registry outlives single tests: it is registered on a
		// helper T whose cleanups never run before the process ends.
		images.host = imagetest.StartRegistry(keepAlive{t})
		images.ref = imagetest.PushGoImage(t, images.host, "runtime-info:test", RuntimeInfoPkg, image.Config{ExposedPorts: []string{"8080/tcp"}})
	})
	if images.ref == "" {
		t.Fatal("no runtime-info image (an earlier test failed to build it)")
	}
	return images.ref
}

// BusyboxImage returns the digest reference of a busybox image in the
// shared registry.
func BusyboxImage(t testing.TB) string {
	t.Helper()
	RuntimeInfoImage(t) // starts the registry
	images.bbOnce.Do(func() {
		images.busybox = imagetest.PushBusyboxImage(t, images.host, "busybox:test")
	})
	if images.busybox == "" {
		t.Fatal("no busybox image (an earlier test failed to build it)")
	}
	return images.busybox
}

// keepAlive is a testing.TB whose Cleanup registrations are dropped, for
// fixtures shared by all tests of the binary.
type keepAlive struct{ testing.TB }

func (keepAlive) Cleanup(func()) {}
