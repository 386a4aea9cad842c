package router

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// States of a call's response.
const (
	pending  int32 = iota // nothing came back from the instance yet
	started               // the instance's response headers came back
	timedOut              // a deadline passed first: the answer is 504
)

var errTimedOut = errors.New("the instance did not start its response in time")

// call is one request on its way through the router. It is the
// http.ResponseWriter the proxy writes to; the transport and the hooks find
// it in the outbound request's context.
type call struct {
	w      http.ResponseWriter
	client context.Context // the inbound request's context
	rv     *revision
	ep     *endpoint
	cfg    RevisionConfig
	body   *trackingBody
	// host, when set, replaces the client's Host header (target.rewriteHost).
	host string

	status    int  // the status written to the client, 0 while none
	streaming bool // the response has no length: flush its headers at once
	retry     bool // the attempt failed to connect: try another instance
	dialErr   error

	state     atomic.Int32
	start     time.Time    // of the current attempt
	lastWrite atomic.Int64 // nanoseconds after start of the last body write
	writing   atomic.Bool  // a body write to the client is under way

	written     int64  // response body bytes written
	traceparent string // sent to the instance, when observed

	mu       sync.Mutex // guards the fields below
	gen      int        // attempt number
	cancel   context.CancelFunc
	timer    *time.Timer
	upgraded bool
}

type callKey struct{}

// attemptContext is the context of one attempt: a child of the client's
// context that carries the call.
type attemptContext struct {
	context.Context
	c *call
}

func (a *attemptContext) Value(key any) any {
	if key == (callKey{}) {
		return a.c
	}
	return a.Context.Value(key)
}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// firstByteDeadline is how long the instance has to start its response:
// the smallest of the revision's timeouts; 0 if it has none.
func (c *call) firstByteDeadline() time.Duration {
	var d time.Duration
	for _, t := range [...]time.Duration{c.cfg.Timeout, c.cfg.ResponseStartTimeout, c.cfg.IdleTimeout} {
		if t > 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

// begin starts an attempt: its context and its first-byte timer.
func (c *call) begin() context.Context {
	ctx, cancel := context.WithCancel(c.client)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.cancel = cancel
	c.state.Store(pending)
	c.start = time.Now()
	c.lastWrite.Store(0)
	c.writing.Store(false)
	c.upgraded = false
	if d := c.firstByteDeadline(); d > 0 {
		gen := c.gen
		c.timer = time.AfterFunc(d, func() { c.onTimer(gen) })
	}
	return &attemptContext{Context: ctx, c: c}
}

// end stops the attempt's timer and cancels its context.
func (c *call) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.cancel()
}

// onTimer runs when a deadline of attempt gen passes: before the response
// started it times the attempt out; after, it checks the idle timeout.
func (c *call) onTimer(gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || c.timer == nil {
		return // the attempt has ended
	}
	if c.state.CompareAndSwap(pending, timedOut) {
		c.cancel()
		return
	}
	idle := c.cfg.IdleTimeout
	if c.upgraded || idle <= 0 {
		return
	}
	silent := time.Since(c.start) - time.Duration(c.lastWrite.Load())
	if c.writing.Load() {
		silent = 0
	}
	if silent >= idle {
		// Cut: the proxy's copy fails and the client connection is aborted.
		c.cancel()
		return
	}
	c.timer.Reset(idle - silent)
}

// responseStarted is called when the instance's response headers arrive;
// false if the attempt timed out first.
func (c *call) responseStarted(res *http.Response) bool {
	if !c.state.CompareAndSwap(pending, started) {
		return false
	}
	upgrade := res.StatusCode == http.StatusSwitchingProtocols
	if upgrade {
		// Written by the proxy on the hijacked connection, not through
		// WriteHeader.
		c.status = http.StatusSwitchingProtocols
	}
	c.streaming = res.ContentLength < 0
	c.mu.Lock()
	defer c.mu.Unlock()
	c.upgraded = upgrade
	if c.timer == nil {
		return true
	}
	if upgrade {
		c.timer.Stop()
		return true
	}
	if idle := c.cfg.IdleTimeout; idle > 0 {
		c.lastWrite.Store(int64(time.Since(c.start)))
		c.timer.Reset(idle)
	} else {
		c.timer.Stop()
	}
	return true
}

// Header, WriteHeader, Write and Flush make the call the proxy's
// ResponseWriter: they record the status and the last write.

func (c *call) Header() http.Header { return c.w.Header() }

func (c *call) WriteHeader(code int) {
	if code >= 200 && c.status == 0 {
		c.status = code
	}
	c.w.WriteHeader(code)
	if code >= 200 && c.streaming {
		_ = c.FlushError()
	}
}

func (c *call) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.cfg.IdleTimeout <= 0 {
		n, err := c.w.Write(p)
		c.written += int64(n)
		return n, err
	}
	// A write blocked by a slow client is not the instance being silent:
	// the silence starts when the write is done.
	c.writing.Store(true)
	n, err := c.w.Write(p)
	c.lastWrite.Store(int64(time.Since(c.start)))
	c.writing.Store(false)
	c.written += int64(n)
	return n, err
}

func (c *call) Flush() { _ = c.FlushError() }

// FlushError flushes the client's response (http.ResponseController).
func (c *call) FlushError() error {
	switch f := c.w.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.NewResponseController(c.w).Flush()
}

// Unwrap gives http.ResponseController the client's writer (to hijack it
// for an upgrade).
func (c *call) Unwrap() http.ResponseWriter { return c.w }

// fail answers with a short text, unless an answer has started.
func (c *call) fail(code int, body string) {
	if c.status != 0 {
		return
	}
	c.status = code
	writeText(c.w, code, body)
}

var _ http.ResponseWriter = (*call)(nil)
var _ http.Flusher = (*call)(nil)

// trackingBody is the inbound body as the instance reads it; it records
// whether any byte was read, so a failed attempt can be retried.
type trackingBody struct {
	rc      io.ReadCloser
	touched atomic.Bool
	n       atomic.Int64
}

func (b *trackingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.touched.Store(true)
		b.n.Add(int64(n))
	}
	return n, err
}

// Close does nothing: the server owns the inbound body, and a retry reads it.
func (b *trackingBody) Close() error { return nil }

// read reports whether any byte was read; false for no body.
func (b *trackingBody) read() bool { return b != nil && b.touched.Load() }

// roundTripper sends the outbound request to the call's endpoint.
type roundTripper struct{}

func (roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	c := callOf(req.Context())
	if c == nil || c.ep == nil {
		return nil, errors.New("router: request without an instance")
	}
	if c.rv.r.observer != nil {
		c.traceparent = req.Header.Get("Traceparent")
	}
	return c.ep.rt.RoundTrip(req)
}

// backendHost is the URL host of outbound requests: each endpoint has its
// own transport, which ignores it; the Host header is the client's.
const backendHost = "instance"

// rewrite builds the outbound request: the inbound one as received, with
// knbox's forwarding headers (ReverseProxy has removed the client's
// Forwarded and X-Forwarded-* before this runs) and a traceparent.
func rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	out.URL.Scheme = "http"
	out.URL.Host = backendHost
	out.URL.RawQuery = in.URL.RawQuery // as received, even when unparsable
	out.Host = in.Host
	if c := callOf(in.Context()); c != nil && c.host != "" {
		out.Host = c.host
	}
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	ip := clientIP(in.RemoteAddr)
	h := out.Header
	// One backing array for the values knbox sets.
	v := make([]string, 4)
	if ip != "" {
		v[0] = ip
		h["X-Forwarded-For"] = v[0:1:1]
	}
	v[1] = proto
	h["X-Forwarded-Proto"] = v[1:2:2]
	v[2] = forwarded(ip, in.Host, proto)
	h["Forwarded"] = v[2:3:3]
	if len(h["Traceparent"]) == 0 {
		v[3] = newTraceparent()
		h["Traceparent"] = v[3:4:4]
	}
}

// clientIP is the client's address without port; "" if unknown.
func clientIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return ""
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i] // no zone: it means nothing to the instance
	}
	return host
}

// forwarded is an RFC 7239 Forwarded element.
func forwarded(ip, host, proto string) string {
	return string(appendForwarded(make([]byte, 0, len(ip)+len(host)+32), ip, []byte(host), proto))
}

// appendForwarded appends an RFC 7239 Forwarded element.
func appendForwarded(b []byte, ip string, host []byte, proto string) []byte {
	b = append(b, "for="...)
	switch {
	case ip == "":
		b = append(b, "unknown"...)
	case strings.IndexByte(ip, ':') >= 0:
		b = append(b, `"[`...)
		b = append(b, ip...)
		b = append(b, `]"`...)
	default:
		b = append(b, ip...)
	}
	if len(host) > 0 {
		b = append(b, ";host="...)
		b = appendForwardedValue(b, host)
	}
	b = append(b, ";proto="...)
	return append(b, proto...)
}

// appendForwardedValue appends v as an RFC 7230 token, or as a quoted
// string when it is not one.
func appendForwardedValue(b, v []byte) []byte {
	if isToken(v) {
		return append(b, v...)
	}
	b = append(b, '"')
	for _, c := range v {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\t' || (c >= 0x20 && c != 0x7f):
			b = append(b, c)
		default:
			// Not allowed in a quoted string: dropped.
		}
	}
	return append(b, '"')
}

// newTraceparent starts a W3C trace: version 00, a random trace id and
// span id, flags 01 (sampled).
func newTraceparent() string { return string(appendTraceparent(make([]byte, 0, 55))) }

// appendTraceparent appends a new traceparent value.
func appendTraceparent(dst []byte) []byte {
	const hex = "0123456789abcdef"
	var b [55]byte
	copy(b[:], "00-")
	put := func(at int, v uint64) {
		for i := 15; i >= 0; i-- {
			b[at+i] = hex[v&0xf]
			v >>= 4
		}
	}
	hi, lo := rand.Uint64(), rand.Uint64()
	if hi == 0 && lo == 0 {
		lo = 1 // an all-zero trace id is invalid
	}
	put(3, hi)
	put(19, lo)
	b[35] = '-'
	span := rand.Uint64()
	if span == 0 {
		span = 1
	}
	put(36, span)
	copy(b[52:], "-01")
	return append(dst, b[:]...)
}

// modifyResponse marks the response as started; it fails the attempt if a
// deadline passed first.
func modifyResponse(res *http.Response) error {
	if c := callOf(res.Request.Context()); c != nil && !c.responseStarted(res) {
		return errTimedOut
	}
	return nil
}

// proxyError answers an attempt that failed before the response started.
func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	c, ok := w.(*call)
	if !ok {
		writeText(w, http.StatusBadGateway, "knbox: bad gateway\n")
		return
	}
	var de *dialError
	switch {
	case c.state.Load() == timedOut:
		r.debug(c, req, "instance did not answer in time", "timeout", c.firstByteDeadline())
		c.fail(http.StatusGatewayTimeout, "knbox: revision "+c.rv.String()+" did not start its response within "+c.firstByteDeadline().String()+"\n")
	case c.client.Err() != nil:
		// The client went away: nobody to answer.
	case errors.As(err, &de) && !c.body.read():
		c.retry, c.dialErr = true, err
	default:
		r.debug(c, req, "instance failed", "error", err)
		c.fail(http.StatusBadGateway, "knbox: the instance of revision "+c.rv.String()+" failed before it answered\n")
	}
}

// copyBufferSize is the size of the buffers responses are copied with.
const copyBufferSize = 32 << 10

var copyBuffers = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

// bufferPool lends the proxy its copy buffers.
type bufferPool struct{}

func (bufferPool) Get() []byte { return copyBuffers.Get().(*[copyBufferSize]byte)[:] }

func (bufferPool) Put(b []byte) {
	if cap(b) == copyBufferSize {
		copyBuffers.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}
