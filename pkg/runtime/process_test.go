package runtime

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessGroupEnds: when the main process exits, what it left running in
// its process group is killed, as a PID namespace's end does for runc, and
// the output pipes that those processes held close with them.
func TestProcessGroupEnds(t *testing.T) {
	requireRuntime(t, "process")
	ctx := testContext(t, time.Minute)
	h := NewProcess(t.TempDir())
	var stdout syncBuffer
	b := newBundle(t, []string{"sh", "-c", "sleep 60 & echo $!"})
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
