package instance

import (
	"bufio"
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Limits of the log files.
const (
	// logMaxBytes is the size at which an instance's log file is rotated;
	// one rotated file (.1) is kept, so an instance keeps at most twice this.
	logMaxBytes = 10 << 20
	// maxLineBytes is the longest line written as one record; longer lines
	// are split into partial records, as CRI does.
	maxLineBytes = 16 << 10
	// tailBytes and tailLines bound the fallback termination message, as
	// the kubelet bounds FallbackToLogsOnError.
	tailBytes = 2048
	tailLines = 80
	// keptStoppedLogs is how many stopped instances of a revision keep
	// their log files.
	keptStoppedLogs = 10
	// followPoll is how often a followed log is checked for new lines.
	followPoll = 200 * time.Millisecond
)

// Streams of a log record.
const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	streamSyslog = "syslog"
)

// logFile is one instance's log: records in the CRI log format
// ("<RFC3339Nano> <stream> <F|P> <message>"), one a line, rotated at
// logMaxBytes. It is safe for concurrent use.
type logFile struct {
	path string

	mu   sync.Mutex
	f    *os.File
	size int64
	err  error // the first write error, after which records are dropped
	now  func() time.Time
}

func openLogFile(path string) (*logFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return &logFile{path: path, f: f, size: fi.Size(), now: time.Now}, nil
}

// record appends one record. partial says the message continues in the next
// record of the same stream.
func (l *logFile) record(stream string, partial bool, msg []byte) {
	tag := "F"
	if partial {
		tag = "P"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil || l.err != nil {
		return
	}
	var b bytes.Buffer
	b.Grow(len(msg) + 48)
	b.WriteString(l.now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(msg)
	b.WriteByte('\n')
	if l.size > 0 && l.size+int64(b.Len()) > logMaxBytes {
		l.rotateLocked()
		if l.err != nil {
			return
		}
	}
	n, err := l.f.Write(b.Bytes())
	l.size += int64(n)
	if err != nil {
		l.err = err
	}
}

func (l *logFile) rotateLocked() {
	if err := l.f.Close(); err != nil {
		l.err = err
		return
	}
	l.f = nil
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		l.err = err
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		l.err = err
		return
	}
	l.f, l.size = f, 0
}

// outputTail remembers the end of what one container wrote (stdout and
// stderr, without tags), for its termination message. It is safe for
// concurrent use.
type outputTail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *outputTail) add(partial bool, msg []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, msg...)
	if !partial {
		t.buf = append(t.buf, '\n')
	}
	if len(t.buf) > 2*tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
}

// reset forgets the remembered output (a new container starts).
func (t *outputTail) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// lastLines returns the last lines of the remembered output, at most
// tailLines lines and tailBytes bytes.
func (t *outputTail) lastLines() string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	s = strings.TrimRight(s, "\n")
	if len(s) > tailBytes {
		s = s[len(s)-tailBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	lines := strings.Split(s, "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return strings.Join(lines, "\n")
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// lineWriter splits one stream's output into records. It is used by one
// goroutine at a time (the runtime's copy of that stream); Flush ends a last
// line without a newline. Each line starts with tag (the container's name
// in brackets when an instance has several containers; the CRI format has
// no field for it), and goes to tail (if set) without it.
type lineWriter struct {
	l      *logFile
	stream string
	tag    string
	tail   *outputTail
	buf    []byte
	cont   bool // the last record was partial: the next one continues its line
	rec    []byte
}

// emit writes one record (a line or, partial, a piece of one).
func (w *lineWriter) emit(partial bool, msg []byte) {
	if w.tail != nil {
		w.tail.add(partial, msg)
	}
	out := msg
	if w.tag != "" && !w.cont {
		w.rec = append(append(w.rec[:0], w.tag...), msg...)
		out = w.rec
	}
	w.l.record(w.stream, partial, out)
	w.cont = partial
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			for len(w.buf) >= maxLineBytes {
				w.emit(true, w.buf[:maxLineBytes])
				w.buf = append(w.buf[:0], w.buf[maxLineBytes:]...)
			}
			break
		}
		line := p[:i]
		if len(w.buf) > 0 {
			w.buf = append(w.buf, line...)
			line = w.buf
		}
		for len(line) > maxLineBytes {
			w.emit(true, line[:maxLineBytes])
			line = line[maxLineBytes:]
		}
		w.emit(false, bytes.TrimSuffix(line, []byte("\r")))
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush writes a pending line that has no newline yet.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit(false, w.buf)
		w.buf = w.buf[:0]
	}
}

// logRecord is a parsed record.
type logRecord struct {
	at      time.Time
	stream  string
	partial bool
	msg     []byte
}

// parseRecord parses one line of a log file.
func parseRecord(line []byte) (logRecord, bool) {
	ts, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return logRecord{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return logRecord{}, false
	}
	stream, rest, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return logRecord{}, false
	}
	tag, msg, ok := bytes.Cut(rest, []byte(" "))
	if !ok || (string(tag) != "F" && string(tag) != "P") {
		return logRecord{}, false
	}
	return logRecord{at: at, stream: string(stream), partial: string(tag) == "P", msg: msg}, true
}

// logSource reads the records of one instance's log, the rotated file first.
// In follow mode it keeps reading the live file as it grows and across a
// rotation.
type logSource struct {
	path string
	f    *os.File
	r    *bufio.Reader
	rot  bool // reading path.1
	ino  uint64
	pend []byte // an incomplete last line
	next *logRecord
}

func newLogSource(path string) *logSource {
	s := &logSource{path: path}
	if f, err := os.Open(path + ".1"); err == nil {
		s.f, s.r, s.rot = f, bufio.NewReaderSize(f, 64<<10), true
	} else {
		s.openLive()
	}
	return s
}

func (s *logSource) openLive() {
	f, err := os.Open(s.path)
	if err != nil {
		return
	}
	s.f, s.r, s.rot = f, bufio.NewReaderSize(f, 64<<10), false
	if fi, err := f.Stat(); err == nil {
		s.ino = inode(fi)
	}
}

// peek returns the next record, reading if needed; nil when none is
// available right now.
func (s *logSource) peek() *logRecord {
	for s.next == nil {
		if s.f == nil {
			s.openLive()
			if s.f == nil {
				return nil
			}
		}
		line, err := s.r.ReadSlice('\n')
		if len(line) > 0 {
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
		rec, ok := parseRecord(bytes.TrimSuffix(s.pend, []byte("\n")))
		if ok {
			rec.msg = slices.Clone(rec.msg)
			s.next = &rec
		}
		s.pend = s.pend[:0]
	}
	return s.next
}

func (s *logSource) pop() { s.next = nil }

func (s *logSource) close() {
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
type sourceHeap []*logSource

func (h sourceHeap) Len() int           { return len(h) }
func (h sourceHeap) Less(i, j int) bool { return h[i].next.at.Before(h[j].next.at) }
func (h sourceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)        { *h = append(*h, x.(*logSource)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// logFiles lists the live log files of a revision's log directory.
func logFiles(dir string) ([]string, error) {
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

// copyLogs writes the messages of the records of the logs in dir at or
// after since, merged in time order, to w. With follow it then keeps
// writing new records (also of instances that start later) until stop is
// closed or a write fails.
func copyLogs(dir string, follow bool, since time.Time, w io.Writer, stop <-chan struct{}) error {
	files, err := logFiles(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("logs %s: %w", dir, err)
	}
	known := map[string]*logSource{}
	var all []*logSource
	defer func() {
		for _, s := range all {
			s.close()
		}
	}()
	add := func(p string) {
		if known[p] == nil {
			s := newLogSource(p)
			known[p] = s
			all = append(all, s)
		}
	}
	for _, p := range files {
		add(p)
	}
	bw := bufio.NewWriter(w)
	emit := func(r *logRecord) error {
		if r.at.Before(since) {
			return nil
		}
		if _, err := bw.Write(r.msg); err != nil {
			return err
		}
		if !r.partial {
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
	if !follow {
		return nil
	}
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		if files, err := logFiles(dir); err == nil {
			for _, p := range files {
				add(p)
			}
		}
		if err := drain(); err != nil {
			return err
		}
	}
}

// pruneLogs removes the log files of all but the keep most recently written
// stopped instances in dir; live lists the instances still running.
func pruneLogs(dir string, live map[string]bool, keep int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	type stopped struct {
		id  string
		mod time.Time
	}
	var old []stopped
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || live[id] {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		old = append(old, stopped{id, fi.ModTime()})
	}
	if len(old) <= keep {
		return nil
	}
	slices.SortFunc(old, func(a, b stopped) int { return b.mod.Compare(a.mod) })
	var errs []error
	for _, s := range old[keep:] {
		for _, suffix := range []string{".log", ".log.1"} {
			if err := os.Remove(filepath.Join(dir, s.id+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
