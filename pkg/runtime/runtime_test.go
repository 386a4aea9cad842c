package runtime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestFromCode(t *testing.T) {
	for _, tc := range []struct {
		code int
		sig  syscall.Signal
	}{
		{0, 0}, {1, 0}, {128, 0}, {129, syscall.SIGHUP}, {137, syscall.SIGKILL},
		{143, syscall.SIGTERM}, {192, syscall.Signal(64)}, {193, 0}, {255, 0},
	} {
		if st := fromCode(tc.code); st.Code != tc.code || st.Signal != tc.sig {
			t.Errorf("fromCode(%d) = %+v, want signal %d", tc.code, st, tc.sig)
		}
	}
}

func TestExitStatusString(t *testing.T) {
	for _, tc := range []struct {
		st   ExitStatus
		want string
	}{
		{ExitStatus{Code: 0}, "exit code 0"},
		{ExitStatus{Code: 137, Signal: syscall.SIGKILL}, "killed by signal 9 (killed)"},
		{ExitStatus{Code: 137, Signal: syscall.SIGKILL, OOMKilled: true}, "OOM-killed"},
		{ExitStatus{Code: -1}, "exit status unknown"},
	} {
		if got := tc.st.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.st, got, tc.want)
		}
	}
}

func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{
		"a": true, "knbox_default_hello-00001.x+y": true, "0abc": true,
		"": false, "-a": false, ".a": false, "../a": false, "a/b": false, "a b": false,
	} {
		if err := checkID(id); (err == nil) != ok {
			t.Errorf("checkID(%q) = %v", id, err)
		}
	}
}

// TestResolveIn checks that symbolic links resolve inside the root, as they
// will after chroot, and never reach the host.
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	mkdir := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("usr/bin")
	if err := os.WriteFile(filepath.Join(root, "usr/bin/app"), []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("usr/bin", "bin")           // relative
	link("/usr/bin/app", "abs")      // absolute: inside root
	link("../../../../../etc", "up") // ".." stops at the root
	link("loop", "loop")

	for _, tc := range []struct{ in, want string }{
		{"/bin/app", "/usr/bin/app"},
		{"/abs", "/usr/bin/app"},
		{"/bin/../bin/./app", "/usr/bin/app"},
	} {
		got, err := resolveIn(root, tc.in)
		if err != nil || got != filepath.Join(root, tc.want) {
			t.Errorf("resolveIn(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if got, err := resolveIn(root, "/up/passwd"); err == nil {
		t.Errorf("resolveIn(/up/passwd) = %q: escaped to the host's /etc", got)
	}
	if _, err := resolveIn(root, "/loop"); err == nil {
		t.Error("a symlink loop resolved")
	}

	if p, err := lookPathIn(root, "app", "/nope:/bin", "/"); err != nil || p != "/bin/app" {
		t.Errorf("lookPathIn = %q, %v", p, err)
	}
	if _, err := lookPathIn(root, "missing", "/bin", "/"); err == nil {
		t.Error("lookPathIn found a missing program")
	}
}

func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	if _, ok := oomKills(dir); ok {
		t.Error("counter read from an empty directory")
	}
	v1 := "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := oomKills(dir); !ok || n != 2 {
		t.Errorf("v1: %d, %v", n, ok)
	}
	dir = t.TempDir()
	v2 := "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.events"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := oomKills(dir); !ok || n != 1 {
		t.Errorf("v2: %d, %v", n, ok)
	}
}

func TestUnderMount(t *testing.T) {
	for _, tc := range []struct{ mnt, root, path, want string }{
		{"/sys/fs/cgroup/memory", "/", "/a/b", "/sys/fs/cgroup/memory/a/b"},
		{"/sys/fs/cgroup/memory", "/outer", "/outer/a", "/sys/fs/cgroup/memory/a"},
		{"/sys/fs/cgroup/memory", "/", "/../../etc", "/sys/fs/cgroup/memory/etc"},
	} {
		if got := underMount(tc.mnt, tc.root, tc.path); got != tc.want {
			t.Errorf("underMount(%q, %q, %q) = %q, want %q", tc.mnt, tc.root, tc.path, got, tc.want)
		}
	}
}

func TestRemoveStaleProbeCgroups(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour)
	mk := func(p string, mtime time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(root, p), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	mk("memory/"+ProbePrefix+"old", old)
	mk("cpu/"+ProbePrefix+"old", old)
	mk("memory/"+ProbePrefix+"new", time.Now()) // a probe in progress
	mk("memory/"+ProbePrefix+"busy/child", old) // not empty: in use
	mk("memory/other", old)                     // not a probe's
	mk("memory/knbox/"+ProbePrefix+"old", old)  // where probes' cgroups are now
	mk("memory/a/b/"+ProbePrefix+"deeper", old) // not a probe's place
	os.Chtimes(filepath.Join(root, "memory", ProbePrefix+"busy"), old, old)
	if n := RemoveStaleProbeCgroups(root, ProbeCgroupMaxAge); n != 3 {
		t.Errorf("removed %d, want 3 (the old empty ones)", n)
	}
	for _, p := range []string{"memory/" + ProbePrefix + "new", "memory/" + ProbePrefix + "busy", "memory/other", "memory/a/b/" + ProbePrefix + "deeper"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	for _, p := range []string{"memory/" + ProbePrefix + "old", "cpu/" + ProbePrefix + "old", "memory/knbox/" + ProbePrefix + "old"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s still there", p)
		}
	}
	if n := RemoveStaleProbeCgroups(filepath.Join(root, "missing"), 0); n != 0 {
		t.Errorf("a missing root: %d", n)
	}
}
