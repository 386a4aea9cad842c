package logs

import (
	"bytes"
	"strings"
	"sync"
)

// Bounds of a Tail, as the kubelet bounds FallbackToLogsOnError.
const (
	TailBytes = 2048
	TailLines = 80
)

// Tail remembers the end of what one container wrote (its stdout and
// stderr, without tags), for its termination message. It is safe for
// concurrent use.
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *Tail) add(partial bool, msg []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, msg...)
	if !partial {
		t.buf = append(t.buf, '\n')
	}
	if len(t.buf) > 2*TailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-TailBytes:]...)
	}
}

// Reset forgets the remembered output (a new container starts).
func (t *Tail) Reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// LastLines returns the last lines of the remembered output, at most
// TailLines lines and TailBytes bytes.
func (t *Tail) LastLines() string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	s = strings.TrimRight(s, "\n")
	if len(s) > TailBytes {
		s = s[len(s)-TailBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	lines := strings.Split(s, "\n")
	if len(lines) > TailLines {
		lines = lines[len(lines)-TailLines:]
	}
	return strings.Join(lines, "\n")
}

// LineWriter cuts one stream's output into records of a File. It is used by
// one goroutine at a time (the copy of that stream); Flush ends a last line
// without a newline. Each line starts with Tag (e.g. the container's name in
// brackets when an instance has several containers; the CRI format has no
// field for it) and goes to Tail (if set) without it.
type LineWriter struct {
	File   *File
	Stream string
	Tag    string
	Tail   *Tail

	buf  []byte
	cont bool // the last record was partial: the next one continues its line
	rec  []byte
}

// emit writes one record (a line or, partial, a piece of one).
func (w *LineWriter) emit(partial bool, msg []byte) {
	if w.Tail != nil {
		w.Tail.add(partial, msg)
	}
	out := msg
	if w.Tag != "" && !w.cont {
		w.rec = append(append(w.rec[:0], w.Tag...), msg...)
		out = w.rec
	}
	w.File.Record(w.Stream, partial, out)
	w.cont = partial
}

// Write records the complete lines of p and keeps the rest for the next
// Write; it never fails, so a container never blocks on its log.
func (w *LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			for len(w.buf) >= MaxLineBytes {
				w.emit(true, w.buf[:MaxLineBytes])
				w.buf = append(w.buf[:0], w.buf[MaxLineBytes:]...)
			}
			break
		}
		line := p[:i]
		if len(w.buf) > 0 {
			w.buf = append(w.buf, line...)
			line = w.buf
		}
		for len(line) > MaxLineBytes {
			w.emit(true, line[:MaxLineBytes])
			line = line[MaxLineBytes:]
		}
		w.emit(false, bytes.TrimSuffix(line, []byte("\r")))
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush writes a pending line that has no newline yet.
func (w *LineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit(false, w.buf)
		w.buf = w.buf[:0]
	}
}
