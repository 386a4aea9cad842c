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
}

// CopyDir writes the messages of the records of the log files in dir,
// merged in time order, one line each (a partial record continues on the
// next one's line), to w.
func CopyDir(ctx context.Context, dir string, o CopyOptions, w io.Writer) error {
	paths, err := files(dir)
	existed := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("logs %s: %w", dir, err)
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
	bw := bufio.NewWriter(w)
	emit := func(r *Record) error {
		if r.At.Before(o.Since) {
			return nil
		}
		if _, err := bw.Write(r.Msg); err != nil {
			return err
		}
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
		paths, err := files(dir)
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
