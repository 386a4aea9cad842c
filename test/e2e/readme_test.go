package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestReadmeCommands types the README's set-up commands as a new user
// does, word for word: `make run` in one shell and, once it says the sample
// is loaded, the block that follows in another, ending with the first curl.
// Only the environment differs: HOME and the data dir are the test's own
// (through $DATA_DIR, which the Makefile reads, and $KNBOX_DATA_DIR, which
// the CLI reads), so a user's knbox and kubeconfig are untouched. The
// README's addresses are knbox's defaults (127.0.0.1:6443, :8080 and the
// registry's :5000), so the test needs them free; outside CI it skips when
// they are not.
func TestReadmeCommands(t *testing.T) {
	for _, tool := range []string{"make", "curl", "kubectl", "runc", "go"} {
		requireTool(t, tool)
	}
	for _, addr := range []string{"127.0.0.1:6443", "127.0.0.1:8080", "127.0.0.1:5000"} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("the README's address %s is taken: %v", addr, err)
			}
			t.Skipf("the README's address %s is taken (a knbox running here?): %v", addr, err)
		}
		l.Close()
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	setup, rest := readmeBlocks(t, string(readme))
	if !strings.Contains(setup, "make run") {
		t.Fatalf("the README's set-up block has no `make run`:\n%s", setup)
	}

	tmp := t.TempDir()
	home, data := filepath.Join(tmp, "home"), filepath.Join(tmp, "data")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// SERVE_FLAGS: the knbox that make run starts stops its instances when
	// it stops, so a failed test leaves nothing running.
	env := append(os.Environ(), "HOME="+home, "DATA_DIR="+data, "KNBOX_DATA_DIR="+data, "KUBECONFIG=",
		"SERVE_FLAGS=--keep-instances=false --handover-timeout=0s")
	// Go's caches stay where they are (they default to $HOME/.cache).
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}

	// Shell one: make run, in its own process group so that stopping it
	// is the Ctrl-C a user types (the group is ours: make, its shell and
	// the knbox it starts).
	mk := exec.Command("bash", "-c", "make run")
	mk.Dir, mk.Env = "../..", env
	mk.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := mk.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	mk.Stderr = &lockedWriter{b: &logs}
	if err := mk.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			line := sc.Text()
			mk.Stderr.Write([]byte(line + "\n"))
			if !once && strings.Contains(line, "sample image") && strings.Contains(line, "is loaded") {
				once = true
				close(loaded)
			}
		}
		_ = mk.Wait()
		close(exited)
	}()
	stop := func() {
		_ = syscall.Kill(-mk.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-mk.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("make run:\n%s", mk.Stderr.(*lockedWriter).String())
		}
	}()
	select {
	case <-loaded:
	case <-exited:
		t.Fatal("make run exited before the sample was loaded")
	case <-time.After(10 * time.Minute):
		t.Fatal("make run did not load the sample in 10 minutes")
	}

	// Shell two: the README's next block as it is.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-x", "-c", rest)
	sh.Dir, sh.Env = "../..", env
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Hello knbox!") {
		t.Errorf("the README's curl did not answer Hello knbox!:\n%s", out)
	}
	if strings.Contains(string(out), "Warning:") {
		t.Errorf("the README's commands printed a warning:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(home, ".kube", "knbox.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("~/.kube/knbox.yaml: %v (want mode 0600)", err)
	}
}

// readmeBlocks returns the README's set-up block (the first fenced block
// of "## Set up") and the block that follows it.
func readmeBlocks(t *testing.T, readme string) (setup, rest string) {
	t.Helper()
	i := strings.Index(readme, "\n## Set up")
	if i < 0 {
		t.Fatal(`README.md has no "## Set up" section`)
	}
	var blocks []string
	s := readme[i:]
	for len(blocks) < 2 {
		a := strings.Index(s, "\n```")
		if a < 0 {
			t.Fatalf("README.md's set-up section has %d fenced blocks, want 2", len(blocks))
		}
		s = s[a+4:]
		s = s[strings.Index(s, "\n")+1:]
		b := strings.Index(s, "\n```")
		if b < 0 {
			t.Fatal("README.md: unterminated fenced block")
		}
		blocks = append(blocks, s[:b+1])
		s = s[b+4:]
	}
	return blocks[0], blocks[1]
}

// lockedWriter collects a process's output written from two goroutines.
type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Bounded: a runaway process must not grow the test's memory.
	if w.b.Len() < 4<<20 {
		w.b.Write(p)
	}
	return len(p), nil
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
