package oci

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci/safemount"
	knboxruntime "github.com/knbox/knbox/pkg/runtime"
)

var unpinned = flag.Bool("unpinned", false, "TestSubPathRace without Input.Pin, as knbox built specs before package safemount: it should find escapes")

// raceStarts is how many times TestSubPathRace starts the victim under
// each runtime.
const raceStarts = 30

// TestSubPathRace: two containers of one instance share an emptyDir (and
// the instance's network namespace). The first, an attacker built in this
// test, keeps swapping "a" between a directory and a symbolic link to a
// directory on the host (one this test made, holding a marker); the second
// mounts the emptyDir with subPath "a" and is started again and again, as
// a restarting sidecar is. Before package safemount, knbox resolved the
// subPath to a string and the runtime resolved it again at mount time: 7
// of 19 starts under runc had the host directory mounted read-write. With
// every source pinned, no start may see the marker, and nothing may be
// written into the host directory. A start whose pin is refused ("leads
// out of" the volume, when it caught the link) fails, as it should, and
// does not count.
func TestSubPathRace(t *testing.T) {
	requireRoot(t)
	swapper := buildTestdata(t, "swapper")
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			bin := requireBinary(t, rt)
			testSubPathRace(t, rt, bin, swapper)
		})
	}
}

func testSubPathRace(t *testing.T, rt, bin, swapper string) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(dir, "host") // the test's stand-in for a host directory
	vol := filepath.Join(dir, "emptydir")
	for _, d := range []string{host, vol} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(vol, 0o1777); err != nil { // as knbox makes an emptyDir
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "marker"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := knboxruntime.OCIConfig{Binary: bin, Root: filepath.Join(dir, "state")}
	if rt == "runsc" {
		cfg.Args, cfg.SandboxENOSYS = []string{"--network=host", "--host-uds=open", "--oci-seccomp"}, true
	}
	h, err := knboxruntime.NewOCI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	netns := newTestNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// One root filesystem, the image built in this test, for every
	// container (the runtimes make the mount points in it).
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile(swapper)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "swapper"), bb, 0o755); err != nil {
		t.Fatal(err)
	}

	// bundle writes a bundle for c under name, pinning into its own
	// staging directory (released by the caller through the returned
	// function).
	bundle := func(name string, c corev1.Container) (string, func(), error) {
		b := filepath.Join(dir, name)
		if err := os.Mkdir(b, 0o755); err != nil {
			t.Fatal(err)
		}
		pinned := filepath.Join(b, "pinned")
		release := func() {}
		in := Input{
			Container: c,
			Rootfs:    rootfs,
			NetNSPath: netns,
			Volumes:   map[string]Volume{"shared": {Path: vol, Writable: true}},
			Policy:    withOpenFiles(Policy{}),
		}
		if !*unpinned {
			in.Pin = pinIn(t, pinned)
			release = func() {
				if err := safemount.Release(pinned); err != nil {
					t.Error(err)
				}
			}
		}
		spec, err := Build(in)
		if err != nil {
			return "", release, err
		}
		js, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b, "config.json"), js, 0o644); err != nil {
			t.Fatal(err)
		}
		return b, release, nil
	}

	// The attacker: a sidecar that shares the emptyDir.
	ab, _, err := bundle("attacker", corev1.Container{Name: "attacker", Command: []string{"/swapper", "swap", "/shared", host},
		VolumeMounts: []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}})
	if err != nil {
		t.Fatal(err)
	}
	var aout, aerr lockedBuffer
	attacker, err := h.Create(ctx, "attacker", ab, knboxruntime.IO{Stdout: &aout, Stderr: &aerr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := attacker.Delete(context.Background()); err != nil {
			t.Errorf("delete the attacker: %v", err)
		}
	})
	for !strings.Contains(aout.String(), "swapping") {
		select {
		case <-ctx.Done():
			t.Fatalf("the attacker did not start swapping: %s", aerr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The victim, started again and again, each time from a fresh bundle.
	started, refused, escapes := 0, 0, 0
	for i := 0; started < raceStarts && i < 50*raceStarts && ctx.Err() == nil; i++ {
		name := fmt.Sprintf("victim-%d", i)
		vb, release, err := bundle(name, corev1.Container{Name: "victim", Command: []string{"/swapper", "check", "/victim"},
			VolumeMounts: []corev1.VolumeMount{{Name: "shared", MountPath: "/victim", SubPath: "a"}}})
		if err != nil {
			release()
			if !strings.Contains(err.Error(), "subPath") {
				t.Fatal(err)
			}
			refused++
			// The next attempt a little later: a slow attacker (gVisor
			// under load) may hold one state for a while.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var out, errOut lockedBuffer
		c, err := h.Create(ctx, name, vb, knboxruntime.IO{Stdout: &out, Stderr: &errOut})
		if err != nil {
			// The runtime itself may refuse (the unpinned case: a link
			// it will not mount). Not an escape.
			release()
			refused++
			t.Logf("start %d: %v", i, err)
			continue
		}
		st, err := c.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		release()
		started++
		if strings.Contains(out.String(), "escaped") {
			escapes++
		} else if !strings.Contains(out.String(), "contained") {
			t.Errorf("start %d: %v, stdout %q, stderr %q", i, st, out.String(), errOut.String())
		}
	}
	// The attacker swapped all along: a test it lost early proves nothing.
	short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
	_, werr := attacker.Wait(short)
	stop()
	if werr == nil {
		t.Fatalf("the attacker stopped swapping: %s", aerr.String())
	}
	ents, _ := os.ReadDir(host)
	t.Logf("%s: %d starts, %d refused, %d escapes, host directory holds %d entries (attacker: %s)", rt, started, refused, escapes, len(ents), strings.TrimSpace(aerr.String()))
	if started < raceStarts {
		t.Errorf("only %d starts in %d attempts", started, started+refused)
	}
	if escapes != 0 || len(ents) != 1 {
		t.Errorf("%d of %d starts had the host directory mounted; it holds %d entries (want the marker alone)", escapes, started, len(ents))
	}
}

// lockedBuffer is a strings.Builder safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newTestNetns makes a network namespace for the test, as knbox makes one
// per instance.
func newTestNetns(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	ns, err := network.CreateIn(root, "race")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	return ns.Path
}
