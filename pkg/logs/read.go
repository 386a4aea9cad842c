package logs

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// followPoll is how often a followed log is checked for new lines.
const followPoll = 200 * time.Millisecond

// Record is a parsed record.
type Record struct {
	At      time.Time
	Stream  string
	Partial bool
	Msg     []byte
}

// ParseRecord parses one line of a log file (without its newline).
func ParseRecord(line []byte) (Record, bool) {
	ts, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return Record{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return Record{}, false
	}
	stream, rest, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return Record{}, false
	}
	tag, msg, ok := bytes.Cut(rest, []byte(" "))
	if !ok || (string(tag) != "F" && string(tag) != "P") {
		return Record{}, false
	}
	return Record{At: at, Stream: string(stream), Partial: string(tag) == "P", Msg: msg}, true
}

// source reads the records of one instance's log, the rotated file first.
// In follow mode it keeps reading the live file as it grows and across a
// rotation.
type source struct {
	path string
	f    *os.File
	r    *bufio.Reader
	rot  bool // reading path.1
	ino  uint64
	pend []byte // an incomplete last line
	next *Record
}

func newSource(path string) *source {
	s := &source{path: path}
	if f, err := os.Open(path + ".1"); err == nil {
		s.f, s.r, s.rot = f, bufio.NewReaderSize(f, 64<<10), true
	} else {
		s.openLive()
	}
	return s
}

func (s *source) openLive() {
	f, err := os.Open(s.path)
	if err != nil {
		return
	}
	s.f, s.r, s.rot = f, bufio.NewReaderSize(f, 64<<10), false
	if fi, err := f.Stat(); err == nil {
		s.ino = inode(fi)
	}
}

// maxRecordBytes bounds one line read back: a record is at most
// MaxLineBytes of message plus its header and a tag; longer lines were not
// written by a File and are skipped.
const maxRecordBytes = 2*MaxLineBytes + 4096

// peek returns the next record, reading if needed; nil when none is
// available right now.
func (s *source) peek() *Record {
	for s.next == nil {
		if s.f == nil {
			s.openLive()
			if s.f == nil {
				return nil
			}
		}
		line, err := s.r.ReadSlice('\n')
		if len(line) > 0 && len(s.pend) <= maxRecordBytes {
			s.pend = append(s.pend, line...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			// End of what is there now: switch from the rotated file to the
			// live one, or from a live file that was rotated away to the
			// new one.
			if s.rot {
				s.f.Close()
				s.f, s.pend = nil, s.pend[:0]
				s.openLive()
				continue
			}
			if fi, err := os.Stat(s.path); err == nil && inode(fi) != s.ino {
				s.f.Close()
				s.f, s.pend = nil, s.pend[:0]
				continue
			}
			return nil
		}
		rec, ok := ParseRecord(bytes.TrimSuffix(s.pend, []byte("\n")))
		if ok {
			rec.Msg = slices.Clone(rec.Msg)
			s.next = &rec
		}
		s.pend = s.pend[:0]
	}
	return s.next
}

func (s *source) pop() { s.next = nil }

func (s *source) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// sourceHeap orders sources by the time of their next record.
type sourceHeap []*source

func (h sourceHeap) Len() int           { return len(h) }
func (h sourceHeap) Less(i, j int) bool { return h[i].next.At.Before(h[j].next.At) }
func (h sourceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)        { *h = append(*h, x.(*source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// files lists the live log files of a directory (and those whose live file
// is gone but whose rotated one is left).
func files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			out = append(out, filepath.Join(dir, e.Name()))
		} else if base, ok := strings.CutSuffix(e.Name(), ".log.1"); ok {
			if _, err := os.Stat(filepath.Join(dir, base+".log")); errors.Is(err, os.ErrNotExist) {
				out = append(out, filepath.Join(dir, base+".log"))
			}
		}
	}
	return out, nil
}

// CopyOptions say what Copy writes.
type CopyOptions struct {
	// Follow keeps writing new records (also of files that appear later)
	// until ctx ends, a write fails or the directory is removed.
	Follow bool
	// Since skips records before it.
	Since time.Time
	// Tail, if >= 0 (with HasTail), writes only the last Tail lines of
	// what is there, then follows from there.
	Tail    int
	HasTail bool
	// Timestamps starts each line with its record's time (RFC 3339 with
	// nanoseconds) and a space, as the kubelet's timestamps option does.
	Timestamps bool
	// Select, if set, decides which records are written; it may change
	// the record's message (strip a tag).
	Select func(r *Record) bool
	// RunEnd, if set, says which records end a run of the containers (a
	// restart); Previous then writes only the records of the last run
	// that ended, up to and including its end (without Follow).
	RunEnd   func(r *Record) bool
	Previous bool
}

// ErrNoPreviousRun: Previous asked for a run that ended, and none did.
var ErrNoPreviousRun = errors.New("no previous run ended")

// CopyDir writes the messages of the records of the log files in dir,
// merged in time order, one line each (a partial record continues on the
// next one's line), to w.
func CopyDir(ctx context.Context, dir string, o CopyOptions, w io.Writer) error {
	return copyFiles(ctx, func() ([]string, error) { return files(dir) }, dir, o, w)
}

// CopyFile is CopyDir of one instance's log file (its rotated file
// included); following it ends as CopyDir's when the file's directory is
// removed.
func CopyFile(ctx context.Context, path string, o CopyOptions, w io.Writer) error {
	dir := filepath.Dir(path)
	list := func() ([]string, error) {
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
		_, err1 := os.Stat(path)
		_, err2 := os.Stat(path + ".1")
		if err1 != nil && err2 != nil {
			return nil, nil
		}
		return []string{path}, nil
	}
	return copyFiles(ctx, list, path, o, w)
}

// runs counts the ended runs in the log files list returns.
func runs(list func() ([]string, error), end func(*Record) bool) (int, error) {
	paths, err := list()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	n := 0
	for _, p := range paths {
		src := newSource(p)
		for r := src.peek(); r != nil; r = src.peek() {
			if end(r) {
				n++
			}
			src.pop()
		}
		src.close()
	}
	return n, nil
}

// tailBuffer keeps the last n lines written to it.
type tailBuffer struct {
	n     int
	lines [][]byte
	cur   []byte
	open  bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.cur = append(t.cur, p...)
			t.open = true
			return n, nil
		}
		t.cur = append(t.cur, p[:i+1]...)
		t.lines = append(t.lines, t.cur)
		t.cur, t.open = nil, false
		if len(t.lines) > t.n {
			t.lines[0] = nil
			t.lines = t.lines[1:]
		}
		p = p[i+1:]
	}
	return n, nil
}

func (t *tailBuffer) flush(w io.Writer) error {
	for _, l := range t.lines {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	if t.open && t.n > 0 {
		_, err := w.Write(t.cur)
		return err
	}
	return nil
}

func copyFiles(ctx context.Context, list func() ([]string, error), what string, o CopyOptions, w io.Writer) error {
	from, until := 0, -1 // the runs to write: [from, until], -1 open
	if o.Previous {
		if o.RunEnd == nil {
			return ErrNoPreviousRun
		}
		n, err := runs(list, o.RunEnd)
		if err != nil {
			return fmt.Errorf("logs %s: %w", what, err)
		}
		if n == 0 {
			return ErrNoPreviousRun
		}
		from, until = n-1, n-1
		o.Follow = false
	}
	paths, err := list()
	existed := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("logs %s: %w", what, err)
	}
	known := map[string]*source{}
	var all []*source
	defer func() {
		for _, s := range all {
			s.close()
		}
	}()
	add := func(p string) {
		if known[p] == nil {
			s := newSource(p)
			known[p] = s
			all = append(all, s)
		}
	}
	for _, p := range paths {
		add(p)
	}
	var out io.Writer = w
	var tb *tailBuffer
	if o.HasTail {
		tb = &tailBuffer{n: max(o.Tail, 0)}
		out = tb
	}
	bw := bufio.NewWriter(out)
	run := 0
	lineOpen := false
	emit := func(r *Record) error {
		inRun := run >= from && (until < 0 || run <= until)
		if o.RunEnd != nil && o.RunEnd(r) {
			run++
		}
		if !inRun || r.At.Before(o.Since) {
			return nil
		}
		if o.Select != nil && !o.Select(r) {
			return nil
		}
		if o.Timestamps && !lineOpen {
			if _, err := bw.WriteString(r.At.UTC().Format(time.RFC3339Nano) + " "); err != nil {
				return err
			}
		}
		if _, err := bw.Write(r.Msg); err != nil {
			return err
		}
		lineOpen = r.Partial
		if !r.Partial {
			return bw.WriteByte('\n')
		}
		return nil
	}
	drain := func() error {
		h := sourceHeap{}
		for _, s := range all {
			if s.peek() != nil {
				h = append(h, s)
			}
		}
		heap.Init(&h)
		for h.Len() > 0 {
			s := h[0]
			if err := emit(s.next); err != nil {
				return err
			}
			s.pop()
			if s.peek() != nil {
				heap.Fix(&h, 0)
			} else {
				heap.Pop(&h)
			}
		}
		return bw.Flush()
	}
	if err := drain(); err != nil {
		return err
	}
	if tb != nil {
		if err := tb.flush(w); err != nil {
			return err
		}
		bw.Reset(w)
	}
	if !o.Follow {
		return nil
	}
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		paths, err := list()
		switch {
		case err == nil:
			existed = true
			for _, p := range paths {
				add(p)
			}
		case errors.Is(err, os.ErrNotExist) && existed:
			return drain() // removed: what was read is written, then the end
		}
		if err := drain(); err != nil {
			return err
		}
	}
}
