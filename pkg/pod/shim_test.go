package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/runtime"
)

// FuzzShimRequest: whatever a client of a shim's socket sends (it is the
// daemon's, mode 0600, but a request is input all the same), the shim
// answers with an error or does what was asked, and never crashes. Starts
// are left out: they would run containers.
func FuzzShimRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"op":"state"}`))
	f.Add([]byte(`{"v":1,"op":"kill","id":"x","signal":9}`))
	f.Add([]byte(`{"v":1,"op":"log","line":"hello\nworld"}`))
	f.Add([]byte(`{"v":2,"op":"shutdown"}`))
	f.Add([]byte(`{"v":1,"op":"delete","id":"../x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		mon, err := newLocalMonitor(runtime.NewProcess(filepath.Join(dir, "process")), filepath.Join(dir, "pod.log"), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer mon.close()
		s := &shim{mon: mon, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctrs: map[string]*shimContainer{}, ended: make(chan struct{})}
		var req shimRequest
		if err := json.NewDecoder(io.LimitReader(bytes.NewReader(b), maxShimRequest)).Decode(&req); err != nil {
			return
		}
		if req.Op == "start" || req.Op == "wait" {
			return
		}
		resp := s.handle(context.Background(), req)
		if req.V != shimProtocol && resp.Error == "" {
			t.Fatalf("protocol %d accepted", req.V)
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
}

// TestShimGCOffDoesNotLeak: a shim starts with its garbage collector off
// (GOGC=off, for a cheaper start); what it runs (the runtime's monitor
// process, a Go program that lives as long as the container) must not
// inherit that.
func TestShimGCOffDoesNotLeak(t *testing.T) {
	requireHandler(t, "runc")
	e := newEnv(t, []string{"runc"})
	id := uniqueName("gcoff")
	e.run(e.spec(id, "runc", runtimeInfoImage(t)))
	e.waitStatus(id, time.Minute, "ready", ready)
	st := shimState(t, e.dir, id)
	if len(st.Containers) != 1 {
		t.Fatalf("shim state: %+v", st)
	}
	// The container's parent is the runtime's monitor (`runc run`), a
	// child of the shim.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.Containers[0].Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	monitor := f[1]
	environ, err := os.ReadFile("/proc/" + monitor + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte("GOGC=")) {
		t.Errorf("the runtime's monitor (pid %s) inherited the shim's GOGC: %q", monitor, bytes.ReplaceAll(environ, []byte{0}, []byte{' '}))
	}
	shimEnv, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.ShimPid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(shimEnv, []byte("GOGC=off")) {
		t.Errorf("the shim did not start with GOGC=off: %q", bytes.ReplaceAll(shimEnv, []byte{0}, []byte{' '}))
	}
}

// TestShimUnmapsItsBinary: a shim, which is knbox's binary and ran every
// package's initialisation, unmaps the pages of it that it mapped read-only
// once its start is over; what it runs after that maps a few back.
func TestShimUnmapsItsBinary(t *testing.T) {
	requireHandler(t, "runc")
	e := newEnv(t, []string{"runc"})
	id := uniqueName("unmap")
	e.run(e.spec(id, "runc", runtimeInfoImage(t)))
	e.waitStatus(id, time.Minute, "ready", ready)
	pid := shimState(t, e.dir, id).ShimPid
	var mapped, resident uint64
	deadline := time.Now().Add(time.Minute)
	for {
		mapped, resident = exeReadOnly(t, pid)
		if resident*4 < mapped || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("shim %d: %d KiB of its binary mapped read-only, %d KiB resident", pid, mapped, resident)
	if resident*4 >= mapped {
		t.Fatalf("shim %d: %d of %d KiB of its binary still resident a minute after its start; want under a quarter", pid, resident, mapped)
	}
}

// exeReadOnly is the size of process pid's read-only mappings of its
// executable and how much of them is resident, in KiB, from smaps.
func exeReadOnly(t *testing.T, pid int) (mapped, resident uint64) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	ours := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			ours = len(f) >= 6 && f[5] == exe && f[1][1] != 'w'
		case ours && len(f) >= 2 && (f[0] == "Size:" || f[0] == "Rss:"):
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps of %d: %q", pid, l)
			}
			if f[0] == "Size:" {
				mapped += n
			} else {
				resident += n
			}
		}
	}
	return mapped, resident
}
