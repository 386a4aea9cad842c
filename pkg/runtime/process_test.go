package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// TestProcessGroupEnds: when the main process exits, what it left running in
// its process group is killed, as a PID namespace's end does for runc, and
// the output pipes that those processes held close with them.
func TestProcessGroupEnds(t *testing.T) {
	requireRuntime(t, "process")
	ctx := testContext(t, time.Minute)
	h := NewProcess(t.TempDir())
	var stdout syncBuffer
	b := newBundle(t, []string{"sh", "-c", "sleep 60 & echo $!"}, asUser(1000))
	c := create(t, ctx, h, "group", b, IO{Stdout: &stdout})
	start := time.Now()
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Fatalf("status %v", st)
	}
	if d := time.Since(start); d >= drainGrace {
		t.Errorf("wait took %v: the background process held the output", d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	err = eventually(ctx, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return nil // dead, waiting for its new parent to reap it
		}
		return fmt.Errorf("background process %d still runs", pid)
	})
	if err != nil {
		t.Error(err)
	}
}

// asUser makes a bundle's process run as uid and gid.
func asUser(uid uint32) func(*specs.Spec) {
	return func(s *specs.Spec) { s.Process.User = specs.User{UID: uid, GID: uid} }
}

// TestProcessRefusesRoot: the process handler, which does not isolate,
// never runs uid 0 (an image with USER 0 listed the host's / and wrote into
// it as root), and says why.
func TestProcessRefusesRoot(t *testing.T) {
	requireRuntime(t, "process")
	ctx := testContext(t, time.Minute)
	root := t.TempDir()
	h := NewProcess(root)
	b := newBundle(t, []string{"sh", "-c", "ls / && touch /host-written"})
	c, err := h.Create(ctx, "root", b, IO{})
	if err == nil {
		c.Delete(ctx)
		t.Fatal("the process handler ran uid 0")
	}
	if !strings.Contains(err.Error(), "process.user.uid is 0") {
		t.Errorf("error %q does not say uid 0 is refused", err)
	}
	if rr, ok := h.(RootRefuser); !ok || !rr.RefusesRoot() {
		t.Error("the process handler does not say it refuses root")
	}
	if u, ok := h.(Unisolated); !ok || !strings.Contains(u.Unisolated(), "does not isolate") {
		t.Error("the process handler does not say it does not isolate")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("a refused container left %d entries in the state directory", len(ents))
	}
}

// TestProcessDropsPrivileges: the process handler's child has no
// capabilities in any set and no_new_privs, so a setuid-root file in the
// image does not make it root.
func TestProcessDropsPrivileges(t *testing.T) {
	requireRuntime(t, "process")
	ctx := testContext(t, time.Minute)
	h := NewProcess(t.TempDir())
	var stdout, stderr syncBuffer
	b := newBundle(t, []string{"sh", "-c", "/suid/id -u; exec sleep 60"}, asUser(1000))
	// A setuid-root copy of busybox, called as id: "id -u" says 0 when the
	// setuid bit is honoured.
	bb, err := os.ReadFile(filepath.Join(b, "rootfs", "bin", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(b, "rootfs", "suid")
	if err := os.Mkdir(suid, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(suid, "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(suid, "busybox"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(suid, "id")); err != nil {
		t.Fatal(err)
	}
	c := create(t, ctx, h, "caps", b, IO{Stdout: &stdout, Stderr: &stderr})
	if err := stdout.await(ctx, "\n"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(stdout.String()); got != "1000" {
		t.Errorf("a setuid-root binary ran with euid %q, want 1000 (no_new_privs); stderr %q", got, stderr.String())
	}
	// The chroot has no /proc: read the child's status from here, once it
	// has exec'd sleep.
	status := map[string]string{}
	err = eventually(ctx, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Pid()))
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				status[k] = strings.TrimSpace(v)
			}
		}
		if status["Name"] != "sleep" {
			return fmt.Errorf("pid %d is %s", c.Pid(), status["Name"])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if status[k] != "0000000000000000" {
			t.Errorf("%s = %q, want none", k, status[k])
		}
	}
	if status["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", status["NoNewPrivs"])
	}
	if status["Uid"] != "1000\t1000\t1000\t1000" {
		t.Errorf("Uid = %q", status["Uid"])
	}
}
