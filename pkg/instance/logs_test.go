package instance

import (
	"bytes"
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

func newTestLog(t *testing.T, dir, id string, clk *fakeClock) *logFile {
	t.Helper()
	l, err := openLogFile(filepath.Join(dir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	l.now = clk.now
	t.Cleanup(func() { l.Close() })
	return l
}

func readRecords(t *testing.T, p string) []logRecord {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []logRecord
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		r, ok := parseRecord([]byte(line))
		if !ok {
			t.Fatalf("bad record %q", line)
		}
		out = append(out, r)
	}
	return out
}

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLineBytes+10)
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
		{"long line", []string{long + "\n"}, []string{"P:" + long[:maxLineBytes], "F:" + long[maxLineBytes:]}},
		{"long without newline", []string{long}, []string{"P:" + long[:maxLineBytes], "F:" + long[maxLineBytes:]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := newTestLog(t, dir, "i", &fakeClock{})
			w := &lineWriter{l: l, stream: streamStdout}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			var got []string
			for _, r := range readRecords(t, filepath.Join(dir, "i.log")) {
				tag := "F:"
				if r.partial {
					tag = "P:"
				}
				if r.stream != streamStdout {
					t.Errorf("stream %q", r.stream)
				}
				got = append(got, tag+string(r.msg))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("records %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLogRotationAndLogs(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := newTestLog(t, dir, "a", clk)
	b := newTestLog(t, dir, "b", clk)
	line := bytes.Repeat([]byte("y"), 1000)
	// Interleave two instances; a writes enough to rotate.
	var want []string
	n := logMaxBytes/1000 + 50
	for i := range n {
		msg := append([]byte{byte('0' + i%10)}, line...)
		a.record(streamStdout, false, msg)
		want = append(want, string(msg))
		if i%100 == 0 {
			b.record(streamStderr, false, []byte("from b"))
			want = append(want, "from b")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.log.1")); err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	for _, f := range []string{"a.log", "a.log.1"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() > logMaxBytes {
			t.Errorf("%s: %v, size %d > %d", f, err, fi.Size(), logMaxBytes)
		}
	}
	var out bytes.Buffer
	if err := copyLogs(dir, false, time.Time{}, &out, nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
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
	a.record(streamStdout, false, []byte("after the cut"))
	out.Reset()
	if err := copyLogs(dir, false, cut, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "after the cut\n" {
		t.Errorf("since: %q", out.String())
	}
}

func TestFollowLogs(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Now()}
	a := newTestLog(t, dir, "a", clk)
	a.record(streamStdout, false, []byte("first"))
	pr := newSyncBuffer()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- copyLogs(dir, true, time.Time{}, pr, stop) }()
	eventually(t, 5*time.Second, "first line", func() bool { return pr.String() == "first\n" })
	a.record(streamStdout, true, []byte("part "))
	a.record(streamStdout, false, []byte("whole"))
	b := newTestLog(t, dir, "b", clk) // an instance that starts later
	b.record(streamStderr, false, []byte("from b"))
	eventually(t, 5*time.Second, "followed lines", func() bool { return pr.String() == "first\npart whole\nfrom b\n" })
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A failing writer ends the follow.
	go func() { done <- copyLogs(dir, true, time.Time{}, failingWriter{}, make(chan struct{})) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("no error from a failing writer")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the writer failed")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("client went away") }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{} }

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
	tail := &outputTail{}
	w := &lineWriter{l: l, stream: streamStderr, tail: tail}
	for i := range 200 {
		w.Write([]byte(strings.Repeat("z", i%7) + "\n"))
	}
	w.Write([]byte("panic: boom\n"))
	got := tail.lastLines()
	if lines := strings.Split(got, "\n"); len(lines) > tailLines || len(got) > tailBytes || !strings.HasSuffix(got, "panic: boom") {
		t.Errorf("lastLines: %d lines, %d bytes, ends %q", len(lines), len(got), got[max(0, len(got)-20):])
	}
	tail.reset()
	l.record(streamSyslog, false, []byte("not output"))
	if got := tail.lastLines(); got != "" {
		t.Errorf("after reset: %q", got)
	}
}

// A tagged writer starts each line, not each partial record, with its tag;
// the tail keeps the output without it.
func TestLineWriterTag(t *testing.T) {
	dir := t.TempDir()
	l := newTestLog(t, dir, "i", &fakeClock{})
	tail := &outputTail{}
	w := &lineWriter{l: l, stream: streamStdout, tag: "[side] ", tail: tail}
	long := strings.Repeat("x", maxLineBytes+10)
	w.Write([]byte("one\n"))
	if got := tail.lastLines(); got != "one" {
		t.Errorf("tail = %q, want the output without the tag", got)
	}
	w.Write([]byte(long + "\ntwo"))
	w.Flush()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "i.log"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		rec, ok := parseRecord([]byte(line))
		if !ok {
			t.Fatalf("unparsable record %q", line)
		}
		msgs = append(msgs, string(rec.msg))
	}
	want := []string{"[side] one", "[side] " + long[:maxLineBytes], long[maxLineBytes:], "[side] two"}
	if !slices.Equal(msgs, want) {
		t.Errorf("records = %.60q\nwant %.60q", msgs, want)
	}
}

func TestPruneLogs(t *testing.T) {
	dir := t.TempDir()
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
	if err := pruneLogs(dir, map[string]bool{"live": true}, 2); err != nil {
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
		chunk = 1 + int(uint(chunk)%(2*maxLineBytes))
		dir := t.TempDir()
		l, err := openLogFile(filepath.Join(dir, "f.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		w := &lineWriter{l: l, stream: streamStdout}
		for i := 0; i < len(data); i += chunk {
			w.Write(data[i:min(len(data), i+chunk)])
		}
		w.Flush()
		var out bytes.Buffer
		if err := copyLogs(dir, false, time.Time{}, &out, nil); err != nil {
			t.Fatal(err)
		}
		// What comes out is what went in, lines ending in newlines, with
		// carriage returns before a newline dropped.
		want := strings.ReplaceAll(string(data), "\r\n", "\n")
		if len(data) > 0 && !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if out.String() != want {
			t.Errorf("round trip of %q: %q", data, out.String())
		}
	})
}
