// Package listen bounds what clients may hold of knbox's HTTP servers (the
// API and the router): a listener that holds at most a given number of
// connections, and the http.Server timeouts that close connections that are
// idle or too slow to send a request.
//
// It owns no handler and knows nothing of what is served; it must not
// import other knbox packages.
package listen

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Defaults of Limits.
const (
	// DefaultReadHeaderTimeout is kube-apiserver's (32 s): a client that
	// has not sent a request's headers by then is disconnected (slowloris).
	DefaultReadHeaderTimeout = 32 * time.Second
	// DefaultIdleTimeout is kube-apiserver's (90 s): a keep-alive connection
	// without a request for that long is closed.
	DefaultIdleTimeout = 90 * time.Second
	// DefaultMaxHeaderBytes is kube-apiserver's (1 MiB).
	DefaultMaxHeaderBytes = 1 << 20
)

// Limits bound a server's connections. Zero values are the documented
// defaults; a negative duration or count turns that bound off.
type Limits struct {
	// MaxConnections is the most connections held at once; one more is
	// accepted and closed at once (so that the kernel's backlog does not
	// fill up with clients that wait for nothing). 0: no limit, as there
	// is no default fit for both servers; the callers set theirs.
	MaxConnections int
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time to read a whole request, body included
	// (0: none; a handler of long uploads or streams clears it per
	// request with http.ResponseController.SetReadDeadline).
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections without a request for
	// that long (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (DefaultMaxHeaderBytes).
	MaxHeaderBytes int
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0 // net/http: no timeout
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	if l.ReadTimeout < 0 {
		l.ReadTimeout = 0
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Apply sets srv's timeouts and header limit from l. A server that must
// keep connections without a request longer (none of knbox's) would not
// use it.
func (l Limits) Apply(srv *http.Server) *http.Server {
	l = l.withDefaults()
	srv.ReadHeaderTimeout = l.ReadHeaderTimeout
	srv.ReadTimeout = l.ReadTimeout
	srv.IdleTimeout = l.IdleTimeout
	srv.MaxHeaderBytes = l.MaxHeaderBytes
	return srv
}

// H2C is the HTTP/2 server of cleartext HTTP/2 (h2c) connections, which
// leave the http.Server once upgraded: it keeps l's idle timeout.
func (l Limits) H2C() *http2.Server {
	l = l.withDefaults()
	return &http2.Server{IdleTimeout: l.IdleTimeout}
}

// Listener returns ln limited to l.MaxConnections open connections (ln
// itself when there is no limit).
func (l Limits) Listener(ln net.Listener) net.Listener {
	if l.MaxConnections <= 0 {
		return ln
	}
	return &limited{Listener: ln, max: int64(l.MaxConnections)}
}

// limited is a listener that holds at most max connections.
type limited struct {
	net.Listener
	max      int64
	open     atomic.Int64
	rejected atomic.Int64
}

// Accept returns the next connection while fewer than max are open; a
// connection over the limit is closed at once and Accept waits for the
// next one.
func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.rejected.Add(1)
			_ = c.Close()
			continue
		}
		return &counted{Conn: c, release: func() { l.open.Add(-1) }}, nil
	}
}

// counted gives its slot back once, when closed.
type counted struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn is the connection beneath, as tls.Conn's NetConn is: a server
// that splices bodies between sockets (the router's) needs the TCP one.
func (c *counted) NetConn() net.Conn { return c.Conn }

func (c *counted) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Stats are a limited listener's counts.
type Stats struct {
	Open, Rejected int64
}

// StatsOf returns the counts of a listener that Listener limited, and false
// for any other.
func StatsOf(ln net.Listener) (Stats, bool) {
	l, ok := ln.(*limited)
	if !ok {
		return Stats{}, false
	}
	return Stats{Open: l.open.Load(), Rejected: l.rejected.Load()}, true
}
