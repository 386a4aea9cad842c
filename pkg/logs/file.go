package logs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Limits of the log files.
const (
	// MaxFileBytes is the size at which a log file is rotated; one rotated
	// file (.1) is kept, so an instance keeps at most twice this.
	MaxFileBytes = 10 << 20
	// MaxLineBytes is the longest line written as one record; longer lines
	// are split into partial records, as CRI does.
	MaxLineBytes = 16 << 10
)

// Streams of a record.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	Syslog = "syslog"
)

// File is one instance's log: records, one a line, rotated at MaxFileBytes.
// It is safe for concurrent use.
type File struct {
	path string

	mu   sync.Mutex
	f    *os.File
	size int64
	err  error // the first write error, after which records are dropped
	now  func() time.Time
}

// Open opens (appending) or creates the log file path and its directory.
func Open(path string) (*File, error) {
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
	return &File{path: path, f: f, size: fi.Size(), now: time.Now}, nil
}

// Path is the file's path.
func (l *File) Path() string { return l.path }

// Record appends one record. partial says the message continues in the
// next record of the same stream. A message must not hold a newline.
func (l *File) Record(stream string, partial bool, msg []byte) {
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
	if l.size > 0 && l.size+int64(b.Len()) > MaxFileBytes {
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

// Line records msg as full lines of stream (one record per line of msg).
func (l *File) Line(stream, msg string) {
	for _, line := range bytes.Split([]byte(msg), []byte("\n")) {
		l.Record(stream, false, line)
	}
}

func (l *File) rotateLocked() {
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

// Close closes the file; later records are dropped.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
