package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// withMemoryLimit puts the container into cgroup /parent/name with a memory
// limit (and no swap beyond it, where swap is accounted).
func withMemoryLimit(parent, name string, limit int64) func(*specs.Spec) {
	return func(s *specs.Spec) {
		s.Linux.CgroupsPath = "/" + parent + "/" + name
		mem := &specs.LinuxMemory{Limit: &limit}
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
			mem.Swap = &limit
		}
		s.Linux.Resources = &specs.LinuxResources{Memory: mem}
	}
}

// cgroupParent names a cgroup parent for one test and removes it (from every
// v1 hierarchy and the unified one) when the test ends.
func cgroupParent(t *testing.T) string {
	parent := fmt.Sprintf("knbox-runtime-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
		if _, err := os.Stat("/sys/fs/cgroup/" + parent); err == nil {
			dirs = append(dirs, "/sys/fs/cgroup/"+parent)
		}
		for _, d := range dirs {
			if err := os.Remove(d); err != nil {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	})
	return parent
}

// TestRuncMemoryLimit shows that a memory limit in config.json is enforced
// through runc: a process that allocates past it is OOM-killed, and the exit
// status says so; one that stays below it, or is killed otherwise, is not
// reported as OOM-killed.
func TestRuncMemoryLimit(t *testing.T) {
	requireRuntime(t, "runc")
	ctx := testContext(t, 2*time.Minute)
	h := mustOCI(t, OCIConfig{Binary: "runc", Root: t.TempDir()})
	parent := cgroupParent(t)
	const limit = 32 << 20

	// busybox tail keeps the last ten lines; /dev/zero has no newline, so it
	// keeps everything it reads.
	b := newBundle(t, []string{"tail", "/dev/zero"}, withMemoryLimit(parent, "over", limit))
	c := create(t, ctx, h, "over", b, IO{})
	st := wait(t, ctx, c)
	if !st.OOMKilled || st.Signal != syscall.SIGKILL || st.Code != 137 {
		t.Errorf("allocating past the limit: %+v, want OOM-killed", st)
	}

	b = newBundle(t, []string{"sh", "-c", "head -c 4000000 /dev/zero | tail; echo done"}, withMemoryLimit(parent, "under", limit))
	var stdout syncBuffer
	c = create(t, ctx, h, "under", b, IO{Stdout: &stdout})
	if st := wait(t, ctx, c); st.Code != 0 || st.OOMKilled {
		t.Errorf("below the limit: %+v", st)
	}

	b = newBundle(t, []string{"sleep", "60"}, withMemoryLimit(parent, "killed", limit))
	c = create(t, ctx, h, "killed", b, IO{})
	got, err := os.ReadFile("/sys/fs/cgroup/memory/" + parent + "/killed/memory.limit_in_bytes")
	if err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(limit) {
		t.Errorf("memory.limit_in_bytes %q (%v), want %d", got, err, limit)
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, ctx, c); st.OOMKilled || st.Signal != syscall.SIGKILL {
		t.Errorf("killed, not OOM: %+v", st)
	}
}

// TestRunscMemoryLimit shows that runsc enforces the limit on its sandbox:
// the allocating container dies by SIGKILL instead of eating the host's
// memory. runsc removes the cgroup before it exits, so OOMKilled cannot be
// read (see the package documentation).
func TestRunscMemoryLimit(t *testing.T) {
	requireRuntime(t, "runsc")
	ctx := testContext(t, 2*time.Minute)
	h := mustOCI(t, OCIConfig{Binary: "runsc", Root: t.TempDir(), Args: []string{"--network=host"}})
	parent := cgroupParent(t)
	b := newBundle(t, []string{"tail", "/dev/zero"}, withMemoryLimit(parent, "over", 64<<20))
	c := create(t, ctx, h, "over", b, IO{})
	st := wait(t, ctx, c)
	if st.Signal != syscall.SIGKILL {
		t.Errorf("allocating past the limit under runsc: %+v, want SIGKILL", st)
	}
	t.Logf("runsc, allocating past the limit: %v", st)
}

// TestMonitorKilled: when the runtime process that monitors a container dies,
// the container lives on; Wait then waits for the container itself and
// reports an unknown code.
func TestMonitorKilled(t *testing.T) {
	requireRuntime(t, "runc")
	ctx := testContext(t, time.Minute)
	h := mustOCI(t, OCIConfig{Binary: "runc", Root: t.TempDir()})
	b := newBundle(t, []string{"sleep", "60"})
	c := create(t, ctx, h, "orphan", b, IO{})
	monitor, err := parentOf(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(monitor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait after the monitor died: %v, want the container still running", err)
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, ctx, c); st.Code != -1 {
		t.Errorf("status %+v, want unknown", st)
	}
}

func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return strconv.Atoi(fields[1])
}

func TestAvailable(t *testing.T) {
	for _, f := range handlerFactories {
		t.Run(f.name, func(t *testing.T) {
			requireRuntime(t, f.name)
			ctx := testContext(t, time.Minute)
			if err := Available(ctx, f.open(t, t.TempDir()), t.TempDir()); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("crun", func(t *testing.T) {
		requireRuntime(t, "crun")
		ctx := testContext(t, time.Minute)
		err := Available(ctx, mustOCI(t, OCIConfig{Binary: "crun", Root: t.TempDir()}), t.TempDir())
		// Whether crun works depends on the host's cgroup layout; when it
		// does not, the reason must say who refused.
		if err != nil && !strings.Contains(err.Error(), "crun") {
			t.Errorf("error does not name the handler: %v", err)
		}
		t.Logf("crun available: %v", err)
	})
	t.Run("missing binary", func(t *testing.T) {
		_, err := NewOCI(OCIConfig{Name: "nope", Binary: "no-such-runtime", Root: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("NewOCI with a missing binary: %v", err)
		}
	})
}

func TestCreateCanceled(t *testing.T) {
	for _, f := range handlerFactories {
		t.Run(f.name, func(t *testing.T) {
			requireRuntime(t, f.name)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			root := t.TempDir()
			h := f.open(t, root)
			if _, err := h.Create(ctx, "canceled", newBundle(t, []string{"true"}), IO{}); !errors.Is(err, context.Canceled) {
				t.Errorf("create with a canceled context: %v", err)
			}
			cs, err := h.Recover(testContext(t, time.Minute))
			if err != nil || len(cs) != 0 {
				t.Errorf("left behind: %d containers, %v", len(cs), err)
			}
		})
	}
}
