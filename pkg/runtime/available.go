package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// probeBusybox is the static busybox Available runs when the host has one
// (Debian: busybox-static).
var probeBusybox = "/bin/busybox"

// Available probes whether h works on this host: it creates and runs a
// trivial container (a static busybox "true" in a rootfs made under scratch)
// and returns why not when it does not, e.g. crun refusing the hybrid cgroup
// layout. Without a static busybox it falls back to the handler's own check
// (for an OCI runtime: that the binary runs).
func Available(ctx context.Context, h Handler, scratch string) error {
	if !isStatic(probeBusybox) {
		if c, ok := h.(checker); ok {
			return c.check(ctx)
		}
		return nil
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	id := ProbePrefix + hex.EncodeToString(suffix[:])
	bundle := filepath.Join(scratch, id)
	if err := makeProbeBundle(bundle); err != nil {
		return fmt.Errorf("probe %s: %w", h.Name(), err)
	}
	defer os.RemoveAll(bundle)

	var stderr bytes.Buffer
	c, err := h.Create(ctx, id, bundle, IO{Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("probe %s: %w", h.Name(), err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx)) }()
	st, err := c.Wait(ctx)
	if err != nil {
		return fmt.Errorf("probe %s: %w", h.Name(), err)
	}
	if st.Code != 0 {
		return fmt.Errorf("probe %s: /bin/true: %v: %s", h.Name(), st, trimOutput(stderr.Bytes()))
	}
	if err := c.Delete(ctx); err != nil {
		return fmt.Errorf("probe %s: %w", h.Name(), err)
	}
	return nil
}

// ProbePrefix starts the ids of Available's containers.
const ProbePrefix = "knbox-probe-"

// RemoveProbeLeftovers deletes the probe containers that a process killed
// while Available ran left in h's state root, with their cgroups,
// processes and state, and returns how many it deleted. Their bundles stay
// under Available's scratch directory: clearing it is the caller's (probes
// of several handlers may share it).
func RemoveProbeLeftovers(ctx context.Context, h Handler) (int, error) {
	cs, err := h.Recover(ctx)
	if err != nil {
		return 0, fmt.Errorf("probe leftovers of %s: %w", h.Name(), err)
	}
	var errs []error
	n := 0
	for _, c := range cs {
		if !strings.HasPrefix(c.ID(), ProbePrefix) {
			continue
		}
		if err := c.Delete(ctx); err != nil {
			errs = append(errs, fmt.Errorf("probe leftover %s of %s: %w", c.ID(), h.Name(), err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ProbeCgroupMaxAge is how old an empty probe cgroup must be before
// RemoveStaleProbeCgroups takes it for a leftover: far longer than a probe
// runs, so that another knbox's probe in progress is never touched.
const ProbeCgroupMaxAge = 10 * time.Minute

// RemoveStaleProbeCgroups removes the probe cgroups (named ProbePrefix...,
// under each hierarchy in root, /sys/fs/cgroup, or its knbox/) that are empty and
// older than maxAge, and returns how many it removed. The runtimes make
// them for probes and remove them with the container; a knbox killed while
// probing, whose data dir (and with it the runtime's state) is then
// deleted, leaves them with nothing that could find them otherwise. A cgroup still in use is not empty, and
// rmdir refuses it.
func RemoveStaleProbeCgroups(root string, maxAge time.Duration) int {
	hierarchies, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	n := 0
	for _, hier := range hierarchies {
		if !hier.IsDir() {
			continue
		}
		// Probes had no cgroupsPath (the runtime used the id at the
		// hierarchy's top) before they had /knbox/<id>.
		for _, dir := range []string{filepath.Join(root, hier.Name()), filepath.Join(root, hier.Name(), "knbox")} {
			ents, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if !e.IsDir() || !strings.HasPrefix(e.Name(), ProbePrefix) {
					continue
				}
				fi, err := e.Info()
				if err != nil || time.Since(fi.ModTime()) < maxAge {
					continue
				}
				if os.Remove(filepath.Join(dir, e.Name())) == nil {
					n++
				}
			}
		}
	}
	return n
}

// checker is implemented by handlers that can tell whether they work without
// running a container.
type checker interface {
	check(ctx context.Context) error
}

func (h *ociHandler) check(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, h.bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %s", h.name, err, trimOutput(out))
	}
	return nil
}

func isStatic(file string) bool {
	f, err := elf.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// makeProbeBundle writes a bundle whose container runs busybox's "true" with
// the usual namespaces and a read-only root.
func makeProbeBundle(bundle string) error {
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	bb, err := os.ReadFile(probeBusybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bb, 0o755); err != nil {
		return err
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "true")); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	spec := &specs.Spec{
		// The oldest version every runtime here reads: crun 1.8 refuses
		// anything but 1.0.x ("unknown version specified").
		Version: "1.0.2",
		Process: &specs.Process{
			Args: []string{"/bin/true"},
			Env:  []string{"PATH=/bin"},
			Cwd:  "/",
			// Not root: the process handler refuses root, and nothing
			// here needs it.
			User: specs.User{UID: 65534, GID: 65534},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: []string{}, Effective: []string{}, Permitted: []string{},
			},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "probe",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: &specs.Linux{
			// Where instances' cgroups are, so that what a probe killed
			// half-way leaves is found as theirs is (Create's failure path).
			CgroupsPath: "/knbox/" + filepath.Base(bundle),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644)
}
