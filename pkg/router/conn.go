package router

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// serverConn is one client connection on the fast path. Its goroutine
// owns it: it reads requests, proxies them one after the other, and hands
// the connection to net/http when a request is not for the fast path.
type serverConn struct {
	s   *Server
	r   *Router
	c   net.Conn
	tcp *net.TCPConn // c, when it is TCP (bodies are spliced)
	io  sock         // c's reads and writes

	state atomic.Int32

	buf        []byte // read buffer, from connBufs
	rpos, wpos int    // unread bytes are buf[rpos:wpos]

	ip        string // the client's address without port; "" if unknown
	raddr     string // the client's address, once the observer asked for it
	head      reqHead
	resp      resHead   // the instance's response head, reused
	rdl       time.Time // the read deadline set on c
	out       []byte    // what is written next, reused
	hostLower []byte    // scratch for the canonical host
	ctx       connContext
	watch     *watcher
	body      *bodyCopy // the request body's copy, while it runs
	queueHook func()    // onQueueWait, made once
	isHead    bool      // the request is HEAD
	waited    bool      // the request in progress waited for a slot
	lastEnd   time.Time // when the last response ended, if known
	headBy    time.Time // when the head being read must be complete; zero between heads

	// The hold (serveHeld).
	held     bool               // the serving goroutine is inside it
	heldFD   uintptr            // c's descriptor, while held
	drained  bool               // the last read left nothing in the socket
	heldRes  parseResult        // why the hold ended: a head to serve outside it
	heldDone bool               // the hold ended with the connection
	heldFn   func(uintptr) bool // heldStep, made once

	pendingInfo RequestInfo // the request, for the Observer
	doneInfo    RequestInfo // a request answered without an instance, for the Observer
}

var connBufs = sync.Pool{New: func() any { return new([connBufSize]byte) }}

func newServerConn(s *Server, c net.Conn) *serverConn {
	sc := &serverConn{s: s, r: s.Router, c: c}
	sc.tcp, _ = c.(*net.TCPConn)
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok && sc.tcp == nil {
		// A wrapper (a counting listener's): bodies are spliced on the
		// TCP connection beneath, the rest goes through the wrapper.
		sc.tcp, _ = nc.NetConn().(*net.TCPConn)
	}
	sc.io.init(c, sc.tcp)
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		sc.ip = a.IP.String()
	} else if c.RemoteAddr() != nil {
		sc.ip = clientIP(c.RemoteAddr().String())
	}
	sc.state.Store(connIdle)
	sc.queueHook = sc.onQueueWait
	return sc
}

// serve runs the connection until it closes or is handed over.
func (sc *serverConn) serve() {
	handed := false
	defer func() {
		if sc.buf != nil {
			connBufs.Put((*[connBufSize]byte)(sc.buf))
			sc.buf = nil
		}
		if !handed {
			sc.state.Store(connClosed)
			sc.c.Close()
		}
		sc.s.forget(sc)
	}()
	sc.buf = connBufs.Get().(*[connBufSize]byte)[:]
	for {
		var res parseResult
		if sc.io.rc != nil {
			var done bool
			if res, done = sc.serveHeld(); done {
				return
			}
		} else {
			res = sc.readHead()
		}
		switch res {
		case headOK:
		case headHandover:
			handed = sc.handover()
			return
		case headBad:
			sc.badRequest(400, sc.head.reason)
			return
		case headBadTE:
			sc.badRequest(501, "")
			return
		default: // the client went away, or was too slow
			return
		}
		if !sc.serveRequest() || sc.s.closing.Load() {
			return
		}
		if !sc.state.CompareAndSwap(connActive, connIdle) {
			return // closed by Close
		}
	}
}

// readHead waits for a request head and parses it. It returns headOK,
// headHandover, headBad, headBadTE, or headIncomplete when the connection
// is done.
func (sc *serverConn) readHead() parseResult {
	if sc.rpos == sc.wpos {
		sc.rpos, sc.wpos = 0, 0
	}
	idle := true
	for {
		if sc.wpos > sc.rpos {
			if idle {
				idle = false
				if !sc.state.CompareAndSwap(connIdle, connActive) {
					return headIncomplete // Shutdown closed it
				}
			}
			res := parseRequestHead(sc.buf[sc.rpos:sc.wpos], &sc.head)
			if res != headIncomplete {
				sc.headBy = time.Time{}
				return res
			}
			if sc.wpos == len(sc.buf) {
				if sc.rpos == 0 {
					return headHandover // a head larger than the buffer
				}
				sc.wpos = copy(sc.buf, sc.buf[sc.rpos:sc.wpos])
				sc.rpos = 0
			}
		}
		sc.armReadDeadline(idle)
		n, err := sc.io.Read(sc.buf[sc.wpos:])
		sc.wpos += n
		if n == 0 && err != nil {
			return headIncomplete
		}
	}
}

// idleSlack is how much shorter than IdleTimeout the wait for a request
// may be: a tenth, at most a minute.
func idleSlack(idle time.Duration) time.Duration { return min(idle/10, time.Minute) }

// setReadDeadline sets the client connection's read deadline.
func (sc *serverConn) setReadDeadline(t time.Time) {
	sc.rdl = t
	_ = sc.c.SetReadDeadline(t)
}

// close closes the connection from another goroutine (Close, Shutdown).
// The socket is shut down at once, so the client sees the end and a
// request in progress fails its next write; the descriptor is closed in
// a goroutine of its own, because closing a held connection (serveHeld)
// waits until its serving goroutine lets go of it, which a request
// waiting for an instance does only when the wait ends.
func (sc *serverConn) close() {
	if sc.io.rc != nil {
		_ = sc.io.rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
	go sc.c.Close()
}

// handover gives the connection, with what was read of it, to net/http.
func (sc *serverConn) handover() bool {
	sc.setReadDeadline(time.Time{})
	pending := append([]byte(nil), sc.buf[sc.rpos:sc.wpos]...)
	// Counted before the handoff: net/http may answer on the connection
	// before give returns.
	sc.s.handedOver.Add(1)
	if !sc.s.handoff.give(&replayConn{Conn: sc.c, pending: pending}) {
		sc.s.handedOver.Add(^uint64(0))
		return false
	}
	sc.state.Store(connClosed) // net/http's now
	return true
}

// badRequest answers a request the fast path refuses, in net/http's
// words, and ends the connection (letting the client read the answer).
func (sc *serverConn) badRequest(code int, reason string) {
	status := strconv.Itoa(code) + " " + statusText(code)
	body := status
	switch {
	case code == 501:
		body = "Unsupported transfer encoding"
	case reason != "":
		status += ": " + reason
		body = status
	}
	_ = sc.c.SetDeadline(time.Now().Add(time.Second))
	b := append(sc.out[:0], "HTTP/1.1 "...)
	b = append(b, status...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"...)
	b = append(b, body...)
	_, _ = sc.c.Write(b)
	sc.out = b[:0]
	sc.lingerClose()
}

// lingerClose half-closes the connection and reads what the client still
// sends (at most 256 KiB, for at most a second), so that closing does not
// reset the connection before the client has read the answer.
func (sc *serverConn) lingerClose() {
	if sc.tcp == nil {
		return
	}
	_ = sc.tcp.CloseWrite()
	sc.setReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, sc.c, 256<<10)
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

// bodyCopy copies a request body from the client to the instance in its
// own goroutine, so that the instance's response is read (and forwarded)
// while the body streams, as net/http's transport does.
type bodyCopy struct {
	done chan struct{}
	err  error // of the copy: from either side
	// clientErr says the error came from the client side.
	clientErr bool
	n         int64
}

// startBody starts copying the request body of h (whose first bytes are
// sc.buf[from:sc.wpos]) to dst.
func (sc *serverConn) startBody(dst *upConn, from int) *bodyCopy {
	bc := &bodyCopy{done: make(chan struct{})}
	sc.body = bc
	// The body is read within ReadTimeout, if any, else without a
	// deadline (the idle one no longer applies).
	if rt := sc.s.ReadTimeout; rt > 0 {
		sc.setReadDeadline(time.Now().Add(rt))
	} else if !sc.rdl.IsZero() {
		sc.setReadDeadline(time.Time{})
	}
	h := &sc.head
	go func() {
		defer close(bc.done)
		if h.chunked {
			bc.n, bc.err, bc.clientErr = sc.copyChunked(dst, from)
		} else {
			bc.n, bc.err, bc.clientErr = sc.copyLength(dst, from, h.contentLength)
		}
	}()
	return bc
}

// stopBody waits for the body copy; with abort it interrupts it first. It
// reports whether the whole body was read from the client (so the
// connection can go on).
func (sc *serverConn) stopBody(abort bool) (complete bool) {
	bc := sc.body
	if bc == nil {
		return true
	}
	if abort {
		select {
		case <-bc.done:
		default:
			sc.setReadDeadline(aLongTimeAgo)
		}
	}
	<-bc.done
	sc.body = nil
	if abort {
		sc.setReadDeadline(time.Time{})
	}
	return bc.err == nil
}

// copyLength copies n bytes of body: the buffered ones, then the rest
// spliced from socket to socket.
func (sc *serverConn) copyLength(dst *upConn, from int, n int64) (int64, error, bool) {
	var done int64
	if buffered := int64(sc.wpos - from); buffered > 0 {
		k := min(buffered, n)
		if _, err := dst.io.Write(sc.buf[from : from+int(k)]); err != nil {
			return 0, err, false
		}
		done = k
		sc.rpos = from + int(k)
	} else {
		sc.rpos = from
	}
	if done == n {
		return done, nil, false
	}
	sc.rpos, sc.wpos = 0, 0
	lr := &io.LimitedReader{R: sc.c, N: n - done}
	var m int64
	var err error
	if sc.tcp != nil && dst.tcp != nil {
		lr.R = sc.tcp
		m, err = dst.tcp.ReadFrom(lr)
	} else {
		m, err = io.Copy(dst.c, lr)
	}
	done += m
	if err == nil && lr.N > 0 {
		return done, io.ErrUnexpectedEOF, true
	}
	if err != nil {
		// ReadFrom does not say which side failed: the client's if a
		// read deadline or an EOF stopped it.
		return done, err, isReadSideErr(err)
	}
	return done, nil, false
}

func isReadSideErr(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op == "read" || oe.Op == "splice" && errors.Is(err, os.ErrDeadlineExceeded)
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// copyChunked decodes the chunked body from the client and writes it
// chunked again (extensions dropped, trailers kept) to dst.
func (sc *serverConn) copyChunked(dst *upConn, from int) (int64, error, bool) {
	var dec chunkedDecoder
	dec.reset(true)
	var total int64
	sc.rpos = from
	out := make([]byte, 0, 4096)
	var data [][]byte
	for {
		if sc.rpos < sc.wpos {
			n, d, err := dec.decode(sc.buf[sc.rpos:sc.wpos], data[:0])
			if err != nil {
				return total, err, true
			}
			out = out[:0]
			for _, p := range d {
				out = appendChunk(out, p)
				total += int64(len(p))
			}
			sc.rpos += n
			if dec.done() {
				out = append(out, "0\r\n"...)
				out = append(out, dec.trailer...)
				out = append(out, "\r\n"...)
			}
			if len(out) > 0 {
				if _, err := dst.io.Write(out); err != nil {
					return total, err, false
				}
			}
			if dec.done() {
				return total, nil, false
			}
		}
		if sc.rpos == sc.wpos {
			sc.rpos, sc.wpos = 0, 0
		} else if sc.wpos == len(sc.buf) {
			sc.wpos = copy(sc.buf, sc.buf[sc.rpos:sc.wpos])
			sc.rpos = 0
		}
		n, err := sc.io.Read(sc.buf[sc.wpos:])
		sc.wpos += n
		if n == 0 && err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return total, err, true
		}
	}
}

// The hold: how the fast path waits for a client's next request, as
// nginx's event loop does. A goroutine reading with net.Conn (or one
// RawConn.Read per request) has to read once more after each response,
// to find the socket empty (EAGAIN) before it can wait: Go's poller
// forgets, at the start of every read, a readiness it saw before. So the
// fast path serves its requests inside one RawConn.Read of the client
// connection: its function reads, serves the requests it read, and asks
// to wait again without a read when the last read did not fill the
// buffer (the socket was empty then; what came since was seen by the
// poller, which then does not wait). One system call fewer per request.
//
// While held, the connection's reads are the serving goroutine's: a
// request whose body is still to be read is served outside the hold, the
// watcher reads a duplicate of the descriptor (startWatch), and Close
// does not wait for the hold to end (close).

// serveHeld serves requests inside the hold until one must be served
// outside it (its result, as readHead's) or the connection is done.
func (sc *serverConn) serveHeld() (res parseResult, done bool) {
	if sc.heldFn == nil {
		sc.heldFn = sc.heldStep
	}
	sc.heldRes, sc.heldDone = headIncomplete, false
	err := sc.io.rc.Read(sc.heldFn)
	sc.held = false
	if err != nil { // the deadline passed, or Close
		return headIncomplete, true
	}
	return sc.heldRes, sc.heldDone
}

// bodyUnbuffered reports whether the request in sc.head has body bytes
// still to read from the client.
func (sc *serverConn) bodyUnbuffered() bool {
	h := &sc.head
	return h.chunked || h.contentLength > 0 && int64(sc.wpos-sc.rpos-h.size) < h.contentLength
}

// heldStep is the hold's function for RawConn.Read: called at the start
// and each time the connection is readable, it reads, serves what it
// read, and returns false to wait for more, true to end the hold.
func (sc *serverConn) heldStep(fd uintptr) bool {
	sc.held, sc.heldFD = true, fd
	// A call follows the start (where the poller forgot what it saw) or
	// a readiness: either way, read before waiting again.
	mustRead := true
	for {
		if sc.rpos == sc.wpos {
			sc.rpos, sc.wpos = 0, 0
		}
		if sc.wpos > sc.rpos {
			if sc.state.Load() == connIdle && !sc.state.CompareAndSwap(connIdle, connActive) {
				sc.heldDone = true // Shutdown closed it
				return true
			}
			res := parseRequestHead(sc.buf[sc.rpos:sc.wpos], &sc.head)
			if res != headIncomplete {
				sc.headBy = time.Time{}
			}
			switch {
			case res == headOK && sc.bodyUnbuffered():
				sc.heldRes = headOK
				return true
			case res == headOK:
				if !sc.serveRequest() || sc.s.closing.Load() || !sc.state.CompareAndSwap(connActive, connIdle) {
					sc.heldDone = true
					return true
				}
				continue
			case res != headIncomplete:
				sc.heldRes = res
				return true
			}
			if sc.wpos == len(sc.buf) {
				if sc.rpos == 0 {
					sc.heldRes = headHandover // a head larger than the buffer
					return true
				}
				sc.wpos = copy(sc.buf, sc.buf[sc.rpos:sc.wpos])
				sc.rpos = 0
			}
		}
		idle := sc.state.Load() == connIdle
		if !mustRead && sc.drained {
			sc.armReadDeadline(idle)
			return false
		}
		n, e := recv(fd, sc.buf[sc.wpos:])
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			sc.armReadDeadline(idle)
			return false
		default:
			sc.heldDone = true
			return true
		}
		if n == 0 { // the client closed
			sc.heldDone = true
			return true
		}
		mustRead = false
		sc.drained = n < len(sc.buf)-sc.wpos
		sc.wpos += n
	}
}

// armReadDeadline sets the read deadline of a wait for a request: the
// idle timeout while none has begun, moved only when it has come closer
// than idleSlack (one timer change per many requests); once a head has
// begun, the time left to read it, counted from its first byte and not
// restarted by later reads, so a client sending a byte at a time cannot
// hold the connection longer than one head timeout (as net/http's
// ReadHeaderTimeout).
func (sc *serverConn) armReadDeadline(idle bool) {
	now := sc.lastEnd // as good as the clock when a response just ended
	sc.lastEnd = time.Time{}
	if idle {
		if now.IsZero() {
			now = time.Now()
		}
		if d := sc.s.idleTimeout(); sc.rdl.Before(now.Add(d - idleSlack(d))) {
			sc.setReadDeadline(now.Add(d))
		}
		return
	}
	if sc.headBy.IsZero() {
		d := sc.s.readHeaderTimeout()
		if rt := sc.s.ReadTimeout; rt > 0 && rt < d {
			d = rt
		}
		sc.headBy = time.Now().Add(d)
	}
	if !sc.rdl.Equal(sc.headBy) {
		sc.setReadDeadline(sc.headBy)
	}
}
