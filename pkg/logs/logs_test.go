package logs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock ticks one millisecond per record, so merges are deterministic.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func newTestLog(t *testing.T, dir, id string, clk *fakeClock) *File {
	t.Helper()
	l, err := Open(filepath.Join(dir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	l.now = clk.now
	t.Cleanup(func() { l.Close() })
	return l
}

func readRecords(t *testing.T, p string) []Record {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		r, ok := ParseRecord([]byte(line))
		if !ok {
			t.Fatalf("bad record %q", line)
		}
		out = append(out, r)
	}
	return out
}

// eventually waits for cond, failing the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func copyAll(t *testing.T, dir string, since time.Time) string {
	t.Helper()
	var out bytes.Buffer
	if err := CopyDir(context.Background(), dir, CopyOptions{Since: since}, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes+10)
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string // "F:msg" or "P:msg"
	}{
		{"lines", []string{"a\nb\n"}, []string{"F:a", "F:b"}},
		{"split writes", []string{"he", "llo\nwor", "ld\n"}, []string{"F:hello", "F:world"}},
		{"crlf", []string{"dos\r\n"}, []string{"F:dos"}},
		{"empty line", []string{"\n"}, []string{"F:"}},
		{"no newline, flushed", []string{"tail"}, []string{"F:tail"}},
		{"long line", []string{long + "\n"}, []string{"P:" + long[:MaxLineBytes], "F:" + long[MaxLineBytes:]}},
		{"long without newline", []string{long}, []string{"P:" + long[:MaxLineBytes], "F:" + long[MaxLineBytes:]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := newTestLog(t, dir, "i", &fakeClock{})
			w := &LineWriter{File: l, Stream: Stdout}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			var got []string
			for _, r := range readRecords(t, filepath.Join(dir, "i.log")) {
				tag := "F:"
				if r.Partial {
					tag = "P:"
				}
				if r.Stream != Stdout {
					t.Errorf("stream %q", r.Stream)
				}
				got = append(got, tag+string(r.Msg))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("records %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRotationAndMerge(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := newTestLog(t, dir, "a", clk)
	b := newTestLog(t, dir, "b", clk)
	line := bytes.Repeat([]byte("y"), 1000)
	// Interleave two instances; a writes enough to rotate.
	var want []string
	n := MaxFileBytes/1000 + 50
	for i := range n {
		msg := append([]byte{byte('0' + i%10)}, line...)
		a.Record(Stdout, false, msg)
		want = append(want, string(msg))
		if i%100 == 0 {
			b.Record(Stderr, false, []byte("from b"))
			want = append(want, "from b")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.log.1")); err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	for _, f := range []string{"a.log", "a.log.1"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() > MaxFileBytes {
			t.Errorf("%s: %v, size %d > %d", f, err, fi.Size(), MaxFileBytes)
		}
	}
	got := strings.Split(strings.TrimSuffix(copyAll(t, dir, time.Time{}), "\n"), "\n")
	// The oldest records of a were rotated away (one older file is kept):
	// what is there is a suffix of what was written, in time order.
	if len(got) < n/2 || len(got) > len(want) {
		t.Fatalf("%d lines, wrote %d", len(got), len(want))
	}
	tail := want[len(want)-len(got):]
	for i := range got {
		if got[i] != tail[i] {
			t.Fatalf("line %d = %.20q, want %.20q", i, got[i], tail[i])
		}
	}

	// since: only records at or after it.
	cut := clk.now()
	a.Record(Stdout, false, []byte("after the cut"))
	if out := copyAll(t, dir, cut); out != "after the cut\n" {
		t.Errorf("since: %q", out)
	}
}

func TestFollow(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Now()}
	a := newTestLog(t, dir, "a", clk)
	a.Record(Stdout, false, []byte("first"))
	pr := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- CopyDir(ctx, dir, CopyOptions{Follow: true}, pr) }()
	eventually(t, 5*time.Second, "first line", func() bool { return pr.String() == "first\n" })
	a.Record(Stdout, true, []byte("part "))
	a.Record(Stdout, false, []byte("whole"))
	b := newTestLog(t, dir, "b", clk) // an instance that starts later
	b.Record(Stderr, false, []byte("from b"))
	eventually(t, 5*time.Second, "followed lines", func() bool { return pr.String() == "first\npart whole\nfrom b\n" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A failing writer ends the follow.
	go func() { done <- CopyDir(context.Background(), dir, CopyOptions{Follow: true}, failingWriter{}) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("no error from a failing writer")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the writer failed")
	}
}

// TestStore: paths stay inside the root; a follow ends when its group is
// removed, and one started before the group exists waits for it.
func TestStore(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][3]string{{"..", "r", "i"}, {"ns", "a/b", "i"}, {"ns", "r", ""}, {"", "r", "i"}, {"ns", "r", "x\x00"}} {
		if p, err := s.Path(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("Path(%q) = %s, want an error", bad, p)
		}
	}
	pr := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- s.Copy(context.Background(), "ns", "rev", CopyOptions{Follow: true}, pr) }()
	p, err := s.Path("ns", "rev", "i1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Line(Stdout, "hello\nworld")
	f.Close()
	eventually(t, 5*time.Second, "lines of a group made after the follow started", func() bool { return pr.String() == "hello\nworld\n" })
	if err := s.Remove("ns", "rev"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the group was removed")
	}
	if _, err := os.Stat(filepath.Join(s.root, "ns")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the empty namespace directory is left: %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("client went away") }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLastLines(t *testing.T) {
	l := newTestLog(t, t.TempDir(), "i", &fakeClock{})
	tail := &Tail{}
	w := &LineWriter{File: l, Stream: Stderr, Tail: tail}
	for i := range 200 {
		w.Write([]byte(strings.Repeat("z", i%7) + "\n"))
	}
	w.Write([]byte("panic: boom\n"))
	got := tail.LastLines()
	if lines := strings.Split(got, "\n"); len(lines) > TailLines || len(got) > TailBytes || !strings.HasSuffix(got, "panic: boom") {
		t.Errorf("LastLines: %d lines, %d bytes, ends %q", len(lines), len(got), got[max(0, len(got)-20):])
	}
	tail.Reset()
	l.Record(Syslog, false, []byte("not output"))
	if got := tail.LastLines(); got != "" {
		t.Errorf("after Reset: %q", got)
	}
}

// A tagged writer starts each line, not each partial record, with its tag;
// the tail keeps the output without it.
func TestLineWriterTag(t *testing.T) {
	dir := t.TempDir()
	l := newTestLog(t, dir, "i", &fakeClock{})
	tail := &Tail{}
	w := &LineWriter{File: l, Stream: Stdout, Tag: "[side] ", Tail: tail}
	long := strings.Repeat("x", MaxLineBytes+10)
	w.Write([]byte("one\n"))
	if got := tail.LastLines(); got != "one" {
		t.Errorf("tail = %q, want the output without the tag", got)
	}
	w.Write([]byte(long + "\ntwo"))
	w.Flush()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, rec := range readRecords(t, filepath.Join(dir, "i.log")) {
		msgs = append(msgs, string(rec.Msg))
	}
	want := []string{"[side] one", "[side] " + long[:MaxLineBytes], long[MaxLineBytes:], "[side] two"}
	if !slices.Equal(msgs, want) {
		t.Errorf("records = %.60q\nwant %.60q", msgs, want)
	}
}

func TestPrune(t *testing.T) {
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := s.Dir("ns", "rev")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for i, id := range []string{"a", "b", "c", "d", "live"} {
		for _, suffix := range []string{".log", ".log.1"} {
			p := filepath.Join(dir, id+suffix)
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			at := base.Add(time.Duration(i) * time.Minute)
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Prune("ns", "rev", map[string]bool{"live": true}, 2); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "c.log c.log.1 d.log d.log.1 live.log live.log.1" {
		t.Errorf("kept %s", got)
	}
}

func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("a\nb"), 1)
	f.Add([]byte("\r\n\n"), 3)
	f.Add([]byte("x\r\r\ny\n\r"), 2)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		chunk = 1 + int(uint(chunk)%(2*MaxLineBytes))
		dir := t.TempDir()
		l, err := Open(filepath.Join(dir, "f.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		w := &LineWriter{File: l, Stream: Stdout}
		for i := 0; i < len(data); i += chunk {
			w.Write(data[i:min(len(data), i+chunk)])
		}
		w.Flush()
		// What comes out is what went in, lines ending in newlines, with
		// carriage returns before a newline dropped.
		want := strings.ReplaceAll(string(data), "\r\n", "\n")
		if len(data) > 0 && !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if out := copyAll(t, dir, time.Time{}); out != want {
			t.Errorf("round trip of %q: %q", data, out)
		}
	})
}

// FuzzCopyDir: whatever a log file holds (a file written by another
// version, or damaged), reading it neither fails nor writes more than the
// file holds.
func FuzzCopyDir(f *testing.F) {
	f.Add([]byte("2026-01-01T00:00:00Z stdout F hello\n"))
	f.Add([]byte("2026-01-01T00:00:00Z stdout P he\n2026-01-01T00:00:01Z stdout F llo\nnot a record\n"))
	f.Add([]byte("\n\n x y z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "i.log"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		out := copyAll(t, dir, time.Time{})
		if len(out) > len(data)+1 {
			t.Errorf("copied %d bytes from a %d-byte file", len(out), len(data))
		}
	})
}
