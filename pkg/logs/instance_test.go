package logs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCopyInstanceOptions reads one instance's log with the kubelet's
// options: tail, timestamps, a container's lines (tag stripped) and the
// previous run.
func TestCopyInstanceOptions(t *testing.T) {
	root := t.TempDir()
	st, err := NewStore(root)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := st.Dir("ns", "rev")
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := newTestLog(t, dir, "rev-a", clk)
	other := newTestLog(t, dir, "rev-b", clk)
	other.Line(Stdout, "of another instance")
	for _, s := range []string{"[app] one", "[side] s1", "[app] two", "knbox: container app exited (exit code 1)", "[app] three", "[side] s2", "[app] four"} {
		l.Line(Stdout, s)
	}
	isEnd := func(r *Record) bool {
		return strings.HasPrefix(string(r.Msg), "knbox: ") && strings.Contains(string(r.Msg), " exited (")
	}
	app := func(r *Record) bool {
		m, ok := bytes.CutPrefix(r.Msg, []byte("[app] "))
		if ok {
			r.Msg = m
		}
		return ok || !bytes.HasPrefix(r.Msg, []byte("["))
	}
	for _, tc := range []struct {
		name string
		o    CopyOptions
		want string
	}{
		{"all", CopyOptions{}, "[app] one\n[side] s1\n[app] two\nknbox: container app exited (exit code 1)\n[app] three\n[side] s2\n[app] four\n"},
		{"tail 2", CopyOptions{Tail: 2, HasTail: true}, "[side] s2\n[app] four\n"},
		{"tail 0", CopyOptions{Tail: 0, HasTail: true}, ""},
		{"tail more", CopyOptions{Tail: 100, HasTail: true, Select: app}, "one\ntwo\nknbox: container app exited (exit code 1)\nthree\nfour\n"},
		{"container", CopyOptions{Select: app}, "one\ntwo\nknbox: container app exited (exit code 1)\nthree\nfour\n"},
		{"previous", CopyOptions{Select: app, RunEnd: isEnd, Previous: true}, "one\ntwo\nknbox: container app exited (exit code 1)\n"},
		{"timestamps", CopyOptions{Tail: 1, HasTail: true, Timestamps: true}, "2026-01-02T03:04:05.008Z [app] four\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := st.CopyInstance(context.Background(), "ns", "rev", "rev-a", tc.o, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", out.String(), tc.want)
			}
		})
	}
	var out bytes.Buffer
	err = st.CopyInstance(context.Background(), "ns", "rev", "rev-b", CopyOptions{RunEnd: isEnd, Previous: true}, &out)
	if !errors.Is(err, ErrNoPreviousRun) {
		t.Errorf("previous of a log without a restart: %v, want ErrNoPreviousRun", err)
	}
	if err := st.CopyInstance(context.Background(), "ns", "rev", "../x", CopyOptions{}, &out); err == nil {
		t.Error("an id with a path accepted")
	}

	// Follow with a tail: the last line, then what comes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- st.CopyInstance(ctx, "ns", "rev", "rev-a", CopyOptions{Follow: true, Tail: 1, HasTail: true}, pr)
	}()
	eventually(t, 10*time.Second, "the tail", func() bool { return pr.String() == "[app] four\n" })
	l.Line(Stdout, "[app] five")
	eventually(t, 10*time.Second, "the new line", func() bool { return pr.String() == "[app] four\n[app] five\n" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
