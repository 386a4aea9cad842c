package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "KNBOX_STORE_CRASH_CHILD"

// Bounds of the crash test.
const (
	crashMinAcks   = 200
	crashMaxWrites = 5000
	crashDeadline  = 10 * time.Second
)

// TestCrashDurability kills a writing process with SIGKILL and checks that
// every write it acknowledged is in the reopened store with its revision, and
// that revisions continue above them. The writer is this test binary run
// again with crashChildEnv set to the store's path.
func TestCrashDurability(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "store.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDurability$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = cmd.Process.Kill() } // SIGKILL, by PID
	timer := time.AfterFunc(crashDeadline, kill)
	defer timer.Stop()

	acked := map[string]int64{}
	var maxRev int64
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		var name string
		var rev int64
		if _, err := fmt.Sscanf(sc.Text(), "ACK %s %d", &name, &rev); err != nil {
			continue // test framework output
		}
		acked[name] = rev
		maxRev = max(maxRev, rev)
		if len(acked) >= crashMinAcks && !killed {
			kill()
			killed = true
			// Keep reading: lines already in the pipe were acknowledged too.
		}
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed: %v\nstderr:\n%s", err, stderr.String())
	}
	if len(acked) < crashMinAcks {
		t.Logf("only %d writes acknowledged within %v", len(acked), crashDeadline)
	}
	if len(acked) == 0 {
		t.Fatalf("no write acknowledged; stderr:\n%s", stderr.String())
	}

	s := openAt(t, path, Options{})
	for name, rev := range acked {
		e, err := s.Get(Key{svc, "default", name})
		if err != nil {
			t.Fatalf("acknowledged %s@%d lost: %v", name, rev, err)
		}
		if want := fmt.Sprintf("%s@%d", name, rev); e.Revision != rev || string(e.Value) != want {
			t.Fatalf("%s: got %q at %d, want %q at %d", name, e.Value, e.Revision, want, rev)
		}
	}
	// At most the write in flight at the kill was committed unacknowledged.
	if got := s.Revision(); got != maxRev && got != maxRev+1 {
		t.Fatalf("reopened at revision %d, last acknowledged %d", got, maxRev)
	}
	e := mustCreate(t, s, Key{svc, "default", "after-crash"}, "x")
	if e.Revision <= maxRev || e.Revision != s.Revision() {
		t.Fatalf("write after crash got revision %d, last acknowledged %d", e.Revision, maxRev)
	}
	t.Logf("%d acknowledged writes survived SIGKILL; last revision %d", len(acked), maxRev)
}

// crashChild writes objects until killed, printing each acknowledged write.
// It never returns: it exits without letting the test framework report.
func crashChild(path string) {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for i := range crashMaxWrites {
		name := fmt.Sprintf("o%d", i)
		e, err := s.Create(Key{svc, "default", name}, versioned(name))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		// os.Stdout is unbuffered: the line is in the pipe when Fprintf returns.
		fmt.Fprintf(os.Stdout, "ACK %s %d\n", name, e.Revision)
	}
	time.Sleep(2 * crashDeadline) // wait to be killed, bounded
	os.Exit(4)
}
