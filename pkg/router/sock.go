package router

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// sock does the fast path's reads and writes of one TCP connection with
// raw system calls, waiting for readiness in Go's network poller (through
// syscall.RawConn) as net.Conn's methods do, deadlines included.
//
// Why: the sockets are non-blocking, so a read or write never blocks in
// the kernel, but net.Conn's methods still tell the scheduler they enter a
// system call. On a busy machine the thread doing one is often preempted
// by the kernel inside it (a loopback write runs the receiver's TCP stack
// too); the runtime's monitor then takes its P away and wakes another
// thread to run it, which parks again a few microseconds later. Under
// load that churn (futex wake-ups, the monitor waking every 20 µs, thread
// switches) was a sixth of the router's CPU time. A raw system call keeps
// the P, as an event loop (nginx's worker) keeps its CPU.
//
// A sock's reads may run alongside its writes (a request body's copy
// writes the instance's connection while the response is read from it),
// not a read alongside a read nor a write alongside a write, as with
// net.Conn's own locks.
type sock struct {
	c  net.Conn        // Close, deadlines and addresses; reads and writes if rc is nil
	rc syscall.RawConn // the TCP connection beneath c; nil if none

	rp      []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(uintptr) bool
	wp      []byte
	wn      int
	werr    syscall.Errno
	writeFn func(uintptr) bool
	// awaiting: writeThenAwait wrote, and waits for readability.
	awaiting bool
	awaitFn  func(uintptr) bool
}

// init readies s for c, whose reads and writes are those of tcp (nil if
// c is not TCP: c's methods are used).
func (s *sock) init(c net.Conn, tcp *net.TCPConn) {
	s.c = c
	if tcp == nil {
		return
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return
	}
	s.rc = rc
	s.readFn = s.readRaw
	s.writeFn = s.writeRaw
	s.awaitFn = s.writeAwait
}

// Read reads into p as net.Conn's Read does.
func (s *sock) Read(p []byte) (int, error) {
	if s.rc == nil {
		return s.c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.rp, s.rn, s.rerr = p, 0, 0
	err := s.rc.Read(s.readFn)
	s.rp = nil
	switch {
	case err != nil:
		return 0, err
	case s.rerr != 0:
		return 0, s.opError("read", s.rerr)
	case s.rn == 0:
		return 0, io.EOF
	}
	return s.rn, nil
}

func (s *sock) readRaw(fd uintptr) bool {
	for {
		n, e := recv(fd, s.rp)
		switch e {
		case 0:
			s.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rerr = e
		return true
	}
}

// Write writes all of p as net.Conn's Write does.
func (s *sock) Write(p []byte) (int, error) {
	if s.rc == nil {
		return s.c.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.wp, s.wn, s.werr = p, 0, 0
	err := s.rc.Write(s.writeFn)
	n := s.wn
	s.wp = nil
	switch {
	case err != nil:
		return n, err
	case s.werr != 0:
		return n, s.opError("write", s.werr)
	}
	return n, nil
}

func (s *sock) writeRaw(fd uintptr) bool {
	for s.wn < len(s.wp) {
		b := s.wp[s.wn:]
		n, e := send(fd, b)
		switch e {
		case 0:
			s.wn += n
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.werr = e
		return true
	}
	return true
}

// writeThenAwait writes p, then waits until the connection has something
// to read or its read deadline passes, without the read that would find
// nothing: the wait is armed before the write, so an answer to what p
// asks cannot be missed, however soon it comes. It returns how much of p
// was written; the caller writes the rest with Write (when the socket
// buffer was full, or the read deadline had passed before the write)
// and, either way, reads the answer with Read, which reports a deadline
// that passed. err is the write's error.
func (s *sock) writeThenAwait(p []byte) (written int, err error) {
	if s.rc == nil || len(p) == 0 {
		return 0, nil
	}
	s.wp, s.wn, s.werr, s.awaiting = p, 0, 0, false
	_ = s.rc.Read(s.awaitFn)
	n := s.wn
	s.wp, s.awaiting = nil, false
	if s.werr != 0 {
		return n, s.opError("write", s.werr)
	}
	return n, nil
}

// writeAwait is writeThenAwait's function for RawConn.Read: on its first
// call it writes, and asks to wait for readability if the write is
// complete; on the next (readable) it ends the wait.
func (s *sock) writeAwait(fd uintptr) bool {
	if s.awaiting {
		return true
	}
	for s.wn < len(s.wp) {
		b := s.wp[s.wn:]
		n, e := send(fd, b)
		switch e {
		case 0:
			s.wn += n
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return true // the rest with Write
		}
		s.werr = e
		return true
	}
	s.awaiting = true
	return false
}

// recv reads a socket into p (not empty) as read(2) does. recvfrom(2)
// without an address goes straight to the socket, where read(2) first
// goes through the file layer (fdget_pos, vfs_read): 1-2% of the router's
// CPU time under load.
func recv(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
	return int(n), e
}

// send writes p (not empty) to a socket as write(2) does, through
// sendto(2) for the same reason; MSG_NOSIGNAL: a closed peer is an EPIPE,
// never a SIGPIPE.
func send(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_NOSIGNAL, 0, 0)
	return int(n), e
}

// opError is the error net.Conn's methods return for a failed call.
func (s *sock) opError(op string, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: os.NewSyscallError(op, e)}
}
