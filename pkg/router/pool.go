package router

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// upConn is a connection to an instance on the fast path, with its read
// buffer while it is in use.
type upConn struct {
	c      net.Conn
	tcp    *net.TCPConn // c, when it is TCP (bodies are spliced)
	io     sock         // c's reads and writes
	buf    []byte       // read buffer; nil while idle
	r, w   int          // unread bytes are buf[r:w]
	idleAt time.Time
	reused bool // served a request before
	// dl is the read deadline set; zero if none.
	dl time.Time
}

func newUpConn(c net.Conn) *upConn {
	uc := &upConn{c: c}
	uc.tcp, _ = c.(*net.TCPConn)
	uc.io.init(c, uc.tcp)
	return uc
}

// take readies the connection for a request.
func (uc *upConn) take() {
	if uc.buf == nil {
		uc.buf = connBufs.Get().(*[connBufSize]byte)[:]
	}
	uc.r, uc.w = 0, 0
}

// release gives the read buffer back.
func (uc *upConn) release() {
	if cap(uc.buf) == connBufSize {
		connBufs.Put((*[connBufSize]byte)(uc.buf[:connBufSize]))
	}
	uc.buf = nil
}

func (uc *upConn) close() {
	uc.release()
	uc.c.Close()
}

// setReadDeadline sets (or, with a zero t, clears) the read deadline.
func (uc *upConn) setReadDeadline(t time.Time) {
	if t.Equal(uc.dl) {
		return
	}
	uc.dl = t
	_ = uc.c.SetReadDeadline(t)
}

// alive reports whether the instance has not closed the idle connection
// (nor sent anything unasked): a non-blocking peek. It costs a system
// call, so it is done only for requests that cannot be sent again.
func (uc *upConn) alive() bool {
	if uc.tcp == nil {
		return true
	}
	rc, err := uc.tcp.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && ok
}

// connPool keeps an endpoint's idle connections: at most
// maxIdlePerEndpoint, each for at most idleConnTimeout, most recently used
// first.
type connPool struct {
	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// get returns an idle connection, or nil.
func (p *connPool) get(now time.Time) *upConn {
	p.mu.Lock()
	for len(p.idle) > 0 {
		uc := p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(uc.idleAt) < idleConnTimeout {
			p.mu.Unlock()
			uc.take()
			return uc
		}
		uc.c.Close()
	}
	p.mu.Unlock()
	return nil
}

// put keeps a connection whose request ended cleanly at now. A read
// deadline it has stays: the next request sets its own before it reads.
func (p *connPool) put(uc *upConn, now time.Time) {
	uc.release()
	uc.reused = true
	uc.idleAt = now
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdlePerEndpoint {
		p.mu.Unlock()
		uc.c.Close()
		return
	}
	p.idle = append(p.idle, uc)
	p.mu.Unlock()
}

// closeIdle closes the idle connections; with final, connections put
// later are closed too.
func (p *connPool) closeIdle(final bool) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = p.closed || final
	p.mu.Unlock()
	for _, uc := range idle {
		uc.c.Close()
	}
}
