// Package listener opens knbox's listening sockets so that a restart or an
// upgrade of knbox refuses no connection: from systemd's socket activation
// (LISTEN_FDS, matched by FileDescriptorName) when systemd holds them, else
// from the knbox that runs before (or is exiting), which hands its sockets
// over through a unix socket in the data directory, else new ones.
//
// While sockets pass from one process to the next, connections queue in
// their backlog: the kernel accepts them on a listening socket whether or
// not a process calls accept, so a client waits instead of being refused.
//
// It owns sockets and their handover, nothing else: it knows no HTTP and
// no knbox package.
package listener

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
)

// Set is the listening sockets of one knbox process, by name ("api",
// "http", "https").
type Set struct {
	log       *slog.Logger
	lns       map[string]net.Listener
	files     map[string]*os.File // dups, kept for a handover after the listeners close
	activated bool
	from      string // "systemd", "handover" or "new"

	mu        sync.Mutex
	requested chan struct{} // closed when a successor asked for the sockets
	reqOnce   sync.Once
	handover  *net.UnixListener
	handed    chan struct{} // closed once the sockets were handed over
	handOnce  sync.Once
}

// Open returns a listener for each name in addrs (name -> TCP address):
// systemd's when it passed sockets (names it passed win, addresses are not
// checked), else a predecessor's, asked for at handoverPath (waiting up to
// wait for one that is exiting or still starting its handover), else new
// ones.
func Open(ctx context.Context, addrs map[string]string, handoverPath string, wait time.Duration, log *slog.Logger) (*Set, error) {
	s := &Set{log: log, lns: map[string]net.Listener{}, files: map[string]*os.File{},
		requested: make(chan struct{}), handed: make(chan struct{})}
	if lns, err := activation.ListenersWithNames(); err != nil {
		return nil, fmt.Errorf("systemd sockets: %w", err)
	} else if len(lns) > 0 {
		for name := range addrs {
			if l := lns[name]; len(l) > 0 {
				s.lns[name] = l[0]
			}
		}
		if len(s.lns) > 0 {
			s.activated, s.from = true, "systemd"
		}
	}
	if !s.activated {
		if err := s.takeOrListen(ctx, addrs, handoverPath, wait); err != nil {
			s.Close()
			return nil, err
		}
	}
	for name, l := range s.lns {
		f, err := l.(filer).File()
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("socket %s: %w", name, err)
		}
		s.files[name] = f
	}
	return s, nil
}

type filer interface{ File() (*os.File, error) }

// takeOrListen asks a predecessor for its sockets, else listens anew; while
// an address is in use (a predecessor that is exiting, or lingering with
// its sockets), it asks and tries again, for up to wait.
func (s *Set) takeOrListen(ctx context.Context, addrs map[string]string, handoverPath string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	logged := false
	for {
		files, err := receive(ctx, handoverPath)
		if err != nil && !logged {
			s.log.Info("no sockets handed over (yet)", "reason", err)
			logged = true
		}
		for name, f := range files {
			if _, ok := addrs[name]; !ok || s.lns[name] != nil {
				f.Close()
				continue
			}
			l, err := net.FileListener(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("socket %s handed over: %w", name, err)
			}
			s.lns[name] = l
			s.from = "handover"
		}
		var inUse error
		for _, name := range slices.Sorted(maps.Keys(addrs)) {
			if s.lns[name] != nil {
				continue
			}
			l, err := net.Listen("tcp", addrs[name])
			if errors.Is(err, syscall.EADDRINUSE) {
				inUse = fmt.Errorf("listen on %s (%s): %w", addrs[name], name, err)
				continue
			}
			if err != nil {
				return fmt.Errorf("listen on %s (%s): %w", addrs[name], name, err)
			}
			s.lns[name] = l
			if s.from == "" {
				s.from = "new"
			}
		}
		if inUse == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return inUse
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Listener returns the listener of name.
func (s *Set) Listener(name string) net.Listener { return s.lns[name] }

// Activated tells whether systemd holds the sockets (then no handover is
// needed: they outlive this process).
func (s *Set) Activated() bool { return s.activated }

// From says where the sockets came from: "systemd", "handover" or "new".
func (s *Set) From() string { return s.from }

// Requested is closed when a successor asked for the sockets: this process
// should then stop serving and exit.
func (s *Set) Requested() <-chan struct{} { return s.requested }

// Close closes the listeners, this process's copies of the sockets and the
// handover socket.
func (s *Set) Close() {
	s.mu.Lock()
	if s.handover != nil {
		s.handover.Close()
		s.handover = nil
	}
	s.mu.Unlock()
	for _, l := range s.lns {
		l.Close()
	}
	for _, f := range s.files {
		f.Close()
	}
}

// header is what a predecessor sends with its sockets.
type header struct {
	Names []string `json:"names"`
}

// ServeHandover answers successors at path until Linger or Close ends: the
// first that asks gets the sockets (Requested is closed first, so that this
// process stops serving). Not for systemd's sockets.
func (s *Set) ServeHandover(path string) error {
	if s.activated {
		return nil
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("handover socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	s.mu.Lock()
	s.handover = ln
	s.mu.Unlock()
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			s.handOver(c)
		}
	}()
	return nil
}

// handOver sends the sockets to a successor on c.
func (s *Set) handOver(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	s.reqOnce.Do(func() { close(s.requested) })
	names := slices.Sorted(maps.Keys(s.files))
	fds := make([]int, len(names))
	for i, n := range names {
		fds[i] = int(s.files[n].Fd())
	}
	b, _ := json.Marshal(header{Names: names})
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
		s.log.Warn("handing the sockets over", "err", err)
		return
	}
	// The successor says it has them; then they are its.
	buf := make([]byte, 16)
	if n, _ := c.Read(buf); strings.TrimSpace(string(buf[:n])) == "ok" {
		s.log.Info("listening sockets handed over to the next knbox", "sockets", names)
		s.handOnce.Do(func() { close(s.handed) })
	}
}

// Linger keeps the sockets open after the listeners stopped accepting, for
// a successor to take them (connections wait in the backlog meanwhile): it
// returns once they were handed over or after d (or ctx), and then closes
// this process's copies.
func (s *Set) Linger(ctx context.Context, d time.Duration) bool {
	defer s.Close()
	if s.activated || d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.handed:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-s.handed:
		return true
	default:
		return false
	}
}

// receive asks the knbox that runs (or is exiting) for its sockets at
// path. Nobody answering (no socket, or one a killed knbox left) is not an
// error the caller must stop for: it opens new sockets.
func receive(ctx context.Context, path string) (map[string]*os.File, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := conn.(*net.UnixConn)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	var h header
	if err := json.Unmarshal(buf[:n], &h); err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("handover: no sockets (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	if len(fds) != len(h.Names) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("handover: %d sockets for %d names", len(fds), len(h.Names))
	}
	files := map[string]*os.File{}
	for i, name := range h.Names {
		unix.CloseOnExec(fds[i])
		files[name] = os.NewFile(uintptr(fds[i]), name)
	}
	_, _ = c.Write([]byte("ok\n"))
	return files, nil
}
