package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	"golang.org/x/net/http2/h2c"
)

// Defaults of [Server].
const (
	// DefaultReadHeaderTimeout bounds the wait for a request head once its
	// first byte has come.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout bounds the wait for the next request on a
	// keep-alive connection (knbox's limits.router.idleTimeout default).
	DefaultIdleTimeout = 90 * time.Second
)

// connBufSize is the read buffer of a client connection: a request head
// must fit in it to take the fast path (larger ones go to net/http, whose
// bound is 1 MiB).
const connBufSize = 8 << 10

// Server serves a Router on plain TCP listeners. The common HTTP/1.1
// request is served on the fast path: one goroutine per client connection
// parses the request itself and proxies it over a pooled connection to
// the instance, bodies spliced from socket to socket. Everything else
// (HTTP/1.0, HTTP/2 cleartext, upgrades, Expect, CONNECT, absolute or
// asterisk targets, heads over 8 KiB) is handed, with the bytes read so
// far, to a net/http server running [Router.ServeHTTP] wrapped for h2c, for
// the rest of the connection's life.
//
// A Server is used once: Serve, then Shutdown or Close. Zero values of its
// fields are the documented defaults.
type Server struct {
	// Router serves the requests; required.
	Router *Router
	// ReadHeaderTimeout bounds the wait for a request head once its first
	// byte has come. 0: DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for a request on a connection (the
	// first one included). 0: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included;
	// 0: none (a revision's timeouts bound its requests).
	ReadTimeout time.Duration
	// MaxHeaderBytes bounds a request head on the net/http path (the
	// fast path takes heads of at most 8 KiB). 0: net/http's default.
	MaxHeaderBytes int
	// H2C serves HTTP/2 cleartext connections; nil: a default one.
	H2C *http2.Server
	// Namespace, when set, says this Server serves the calls of the
	// instances of that namespace, on listeners inside their network
	// namespaces: every Route is served, cluster-local ones included, by
	// its cluster-local address, its short forms and its bare name for a
	// Route of the same namespace, whatever [Options.External] says.
	Namespace string

	initOnce sync.Once
	fallback *http.Server
	handoff  *handoffListener
	fbErr    chan error

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	closing   atomic.Bool
	active    sync.WaitGroup // connection goroutines

	handedOver atomic.Uint64 // connections given to net/http
}

// scopeKey keys a request context's scope: the Server's Namespace.
type scopeKey struct{}

// Connection states.
const (
	connIdle int32 = iota // waiting for a request: Shutdown may close it
	connActive
	connClosed
)

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*serverConn]struct{}{}
		s.handoff = newHandoffListener()
		var log *slog.Logger
		if s.Router != nil {
			log = s.Router.log
		} else {
			log = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		h2 := s.H2C
		if h2 == nil {
			h2 = &http2.Server{IdleTimeout: s.idleTimeout()}
		}
		s.fallback = &http.Server{
			//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
			Handler:           h2c.NewHandler(s.Router, h2),
			ReadHeaderTimeout: s.readHeaderTimeout(),
			ReadTimeout:       max(s.ReadTimeout, 0),
			IdleTimeout:       s.idleTimeout(),
			MaxHeaderBytes:    s.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		}
		if s.Namespace != "" {
			ctx := context.WithValue(context.Background(), scopeKey{}, s.Namespace)
			s.fallback.BaseContext = func(net.Listener) context.Context { return ctx }
		}
		s.fbErr = make(chan error, 1)
		go func() { s.fbErr <- s.fallback.Serve(s.handoff) }()
	})
}

func (s *Server) readHeaderTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return DefaultReadHeaderTimeout
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return DefaultIdleTimeout
}

// Serve accepts connections on ln until Shutdown or Close, which make it
// return http.ErrServerClosed; other errors of Accept end it too. It closes
// ln when it returns.
func (s *Server) Serve(ln net.Listener) error {
	if s.Router == nil {
		return errors.New("router: Server.Router is required")
	}
	s.init()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait, as
				// net/http does, bounded.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		sc := newServerConn(s, c)
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			c.Close()
			return http.ErrServerClosed
		}
		s.conns[sc] = struct{}{}
		s.active.Add(1)
		s.mu.Unlock()
		go sc.serve()
	}
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight (on both paths) to end, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.closing.Store(true)
	s.closeListeners()
	fb := make(chan error, 1)
	go func() { fb <- s.fallback.Shutdown(ctx) }()
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	interval := time.Millisecond
	for {
		if s.closeIdle() {
			break
		}
		select {
		case <-ctx.Done():
			<-fb
			return ctx.Err()
		case <-t.C:
		}
		interval = min(2*interval, 100*time.Millisecond)
		t.Reset(interval)
	}
	return <-fb
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.init()
	s.closing.Store(true)
	s.closeListeners()
	s.mu.Lock()
	for sc := range s.conns {
		sc.state.Store(connClosed)
		sc.close()
	}
	s.mu.Unlock()
	return s.fallback.Close()
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		ln.Close()
	}
	s.handoff.Close()
}

// closeIdle closes the connections that wait for a request; true if no
// connection is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sc := range s.conns {
		if sc.state.CompareAndSwap(connIdle, connClosed) {
			sc.close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) forget(sc *serverConn) {
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
	s.active.Done()
}

// handoffListener gives net/http the connections the fast path hands over.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener() *handoffListener {
	return &handoffListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// give hands c to net/http; false if the server is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "handoff" }

// replayConn is a client connection handed to net/http: the bytes the
// fast path read come first.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// connContext is a client connection's context for one request: Done
// makes its channel only when someone waits on it (a request that waits
// in a queue or dials), so the common request allocates none.
type connContext struct {
	mu   sync.Mutex
	done chan struct{}
	err  error
}

func (c *connContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *connContext) Value(any) any               { return nil }

func (c *connContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *connContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *connContext) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled
		if c.done != nil {
			close(c.done)
		}
	}
}

// reset readies the context for the connection's next request.
func (c *connContext) reset() {
	c.mu.Lock()
	c.done, c.err = nil, nil
	c.mu.Unlock()
}

var _ context.Context = (*connContext)(nil)

// aLongTimeAgo is a deadline that has passed: it interrupts a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// watcher notices, while a request waits (in the queue, or for the
// instance's first byte), that its client has gone: it reads the client
// connection in the background, as net/http's server does for every
// request. It runs only for requests that wait, and only while they wait.
type watcher struct {
	sc   *serverConn
	done chan struct{}
	// file, when the connection is held (serveHeld), is a duplicate of
	// its descriptor that the watcher reads: the held one's reads are
	// the serving goroutine's until the request ends.
	file    *os.File
	n       int   // bytes read (a pipelined request), into sc.buf[sc.wpos:]
	err     error // the read's error
	stopped atomic.Bool
	onGone  func()
}

// startWatch starts watching the client; onGone runs (in the watcher's
// goroutine) if the client goes away. It returns nil if the buffer has no
// room to read into (the request's bytes are all there).
func (sc *serverConn) startWatch(onGone func()) *watcher {
	if sc.wpos >= len(sc.buf) || sc.watch != nil {
		return nil
	}
	w := &watcher{sc: sc, done: make(chan struct{}), onGone: onGone}
	read := sc.c.Read
	if sc.held {
		f, err := dupSocket(sc.heldFD)
		if err != nil {
			// Out of descriptors: this request goes on unwatched (a
			// client that leaves is noticed when its answer is written).
			return nil
		}
		w.file, read = f, f.Read
		sc.drained = false // what the watcher reads is buffered
	}
	sc.watch = w
	go func() {
		defer close(w.done)
		w.n, w.err = read(sc.buf[sc.wpos:])
		if w.n == 0 && w.err != nil && !w.stopped.Load() {
			w.onGone()
		}
	}()
	return w
}

// stopWatch stops the watcher, if any, and takes what it read; it reports
// whether the client has gone.
func (sc *serverConn) stopWatch() (gone bool) {
	w := sc.watch
	if w == nil {
		return false
	}
	sc.watch = nil
	w.stopped.Store(true)
	if w.file != nil {
		_ = w.file.SetReadDeadline(aLongTimeAgo)
		<-w.done
		w.file.Close()
	} else {
		sc.setReadDeadline(aLongTimeAgo)
		<-w.done
		sc.setReadDeadline(time.Time{})
	}
	sc.wpos += w.n
	if w.n > 0 {
		return false
	}
	var ne net.Error
	return w.err != nil && !(errors.As(w.err, &ne) && ne.Timeout() && w.stopped.Load())
}

// dupSocket duplicates a non-blocking socket's descriptor as a file that
// Go's network poller waits on (with deadlines).
func dupSocket(fd uintptr) (*os.File, error) {
	nfd, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, os.NewSyscallError("fcntl", e)
	}
	return os.NewFile(nfd, "client"), nil
}
