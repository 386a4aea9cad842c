package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// watchAfter is how long the fast path waits for an instance's first
// byte before it starts watching whether the client is still there (a
// goroutine per waiting request, as net/http's server has for every
// request).
const watchAfter = 50 * time.Millisecond

// max1xx bounds the informational responses forwarded per request.
const max1xx = 5

// bodyGrace bounds the wait for a request body's copy to end once the
// response has: longer, and the body is cut (both connections closed).
const bodyGrace = time.Second

// fastCall is one request on the fast path.
type fastCall struct {
	rv  *revision
	ep  *endpoint
	cfg RevisionConfig
	// host, when set, replaces the client's Host header (target.rewriteHost).
	host string

	status   int  // sent to the client; 0 while none
	retry    bool // the instance could not be reached: try another
	dialErr  error
	bodyRead bool // request body bytes were consumed: no retry
	keep     bool // the client connection goes on
	isHead   bool
	// bodyEnd is where the request ends in the buffer when the body did
	// not need a copy of its own.
	bodyEnd  int
	reqBytes int64
	resBytes int64
	cold     bool
	start    time.Time
	// now, when set, is the time of the attempt to come (when it was
	// admitted, or started).
	now    time.Time
	queued time.Duration
	// end, when set, is when the response ended.
	end time.Time
}

// serveRequest routes and proxies the request in sc.head; it reports
// whether the connection goes on.
func (sc *serverConn) serveRequest() bool {
	r := sc.r
	h := &sc.head
	sc.isHead = string(h.method) == http.MethodHead
	// One clock reading serves the admission, the first attempt (its
	// deadlines, the pool's idle check) and the observer, unless the
	// request waits: about 2% of the path's CPU time under load was
	// clock readings.
	start := time.Now()
	t := r.find(string(sc.canonicalHost(h.host)), sc.s.Namespace)
	if t == nil || len(h.host) == 0 {
		r.unknown.Add(1)
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("no route for host", "host", string(h.host))
		}
		keep := sc.answer(http.StatusNotFound, "knbox: no route for host "+quoteHost(string(h.host))+"\n")
		sc.observe(nil, nil, "", http.StatusNotFound, start, 0, false)
		return keep
	}
	name := t.pick()
	if name == "" {
		keep := sc.answer(http.StatusServiceUnavailable, "knbox: route "+t.namespace+"/"+t.route+" has no traffic target\n")
		sc.observe(t, nil, "", http.StatusServiceUnavailable, start, 0, false)
		return keep
	}
	for {
		rv := r.revision(t.namespace, name)
		rv.ensureLoaded()
		cfg, ok := rv.config()
		if !ok {
			rv.count(http.StatusServiceUnavailable)
			keep := sc.answer(http.StatusServiceUnavailable, "knbox: revision "+t.namespace+"/"+name+" is not available\n")
			sc.observe(t, rv, "", http.StatusServiceUnavailable, start, 0, false)
			return keep
		}
		if keep, served := sc.proxy(t, rv, cfg, start); served {
			return keep
		}
	}
}

// canonicalHost is canonicalHost on bytes, without allocating.
func (sc *serverConn) canonicalHost(host []byte) []byte {
	switch {
	case len(host) > 0 && host[0] == '[':
		if i := bytes.IndexByte(host, ']'); i > 0 {
			host = host[:i+1]
		}
	case bytes.Count(host, []byte{':'}) == 1:
		host = host[:bytes.IndexByte(host, ':')]
	}
	host = bytes.TrimSuffix(host, []byte{'.'})
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' {
			sc.hostLower = append(sc.hostLower[:0], host...)
			for j := i; j < len(sc.hostLower); j++ {
				if c := sc.hostLower[j]; 'A' <= c && c <= 'Z' {
					sc.hostLower[j] = c + 'a' - 'A'
				}
			}
			return sc.hostLower
		}
	}
	return host
}

// proxy admits the request to rv and proxies it; served is false if rv
// was forgotten before the request was counted.
func (sc *serverConn) proxy(t *target, rv *revision, cfg RevisionConfig, start time.Time) (keep, served bool) {
	r := sc.r
	h := &sc.head
	wait := r.wait
	if wait == 0 {
		wait = cfg.Timeout
	}
	if wait <= 0 {
		wait = DefaultActivationTimeout
	}
	sc.ctx.reset()
	sc.waited = false
	ep, cold, err := rv.acquire(&sc.ctx, start, nil, true, wait, r.maxQueue, sc.queueHook)
	gone := sc.stopWatch()
	if errors.Is(err, errForgotten) {
		return false, false
	}
	fc := &fastCall{rv: rv, ep: ep, cfg: cfg, cold: cold, keep: true, start: start, now: start,
		isHead: sc.isHead, bodyEnd: sc.rpos + h.size, host: t.rewriteHost}
	if sc.waited {
		fc.now = time.Now()
		fc.queued = fc.now.Sub(start)
	}
	if r.observer != nil {
		sc.info(&sc.pendingInfo, t, rv, start)
	}
	defer func() {
		if fc.end.IsZero() {
			fc.end = time.Now()
		}
		sc.lastEnd = fc.end
		rv.finishAt(fc.ep, fc.status, fc.end)
		sc.observeCall(fc)
	}()
	if err != nil {
		if gone || sc.ctx.Err() != nil {
			return false, true // the client went away while waiting
		}
		return sc.admissionError(fc, wait, err), true
	}
	var tried []*endpoint
	for attempt := 1; ; attempt++ {
		sc.attempt(fc)
		if !fc.retry {
			return fc.keep, true
		}
		fc.retry = false
		tried = append(tried, fc.ep)
		rv.suspect(fc.ep)
		rv.release(fc.ep)
		fc.ep = nil
		if attempt == maxAttempts || fc.bodyRead {
			break
		}
		ep, _, err := rv.acquire(&sc.ctx, time.Now(), tried, false, wait, r.maxQueue, sc.queueHook)
		gone := sc.stopWatch()
		if errors.Is(err, errNoOther) {
			break
		}
		if err != nil {
			if gone || sc.ctx.Err() != nil {
				return false, true
			}
			return sc.admissionError(fc, wait, err), true
		}
		fc.ep = ep
	}
	sc.debug(fc, "no instance accepted the connection", "error", fc.dialErr, "attempts", len(tried))
	return sc.fail(fc, http.StatusBadGateway, "knbox: could not connect to an instance of revision "+rv.String()+"\n"), true
}

// admissionError answers a request that got no slot.
func (sc *serverConn) admissionError(fc *fastCall, wait time.Duration, err error) bool {
	if errors.Is(err, errQueueFull) {
		sc.debug(fc, "queue full")
		return sc.fail(fc, http.StatusServiceUnavailable, "knbox: too many requests are waiting for revision "+fc.rv.String()+"\n")
	}
	sc.debug(fc, "no slot in time", "wait", wait)
	return sc.fail(fc, http.StatusServiceUnavailable, "knbox: no instance of revision "+fc.rv.String()+" could take the request within "+wait.String()+"\n")
}

// fail answers with a short text, unless an answer has started.
func (sc *serverConn) fail(fc *fastCall, code int, text string) bool {
	if fc.status != 0 {
		return false
	}
	fc.status = code
	if fc.bodyRead {
		// The body was partly sent: the connection cannot go on.
		sc.head.close = true
	}
	return sc.answer(code, text)
}

func (sc *serverConn) debug(fc *fastCall, msg string, args ...any) {
	r := sc.r
	if !r.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	args = append(args, "namespace", fc.rv.key.namespace, "revision", fc.rv.key.name)
	if fc.ep != nil {
		args = append(args, "instance", fc.ep.ID)
	}
	r.log.Debug(msg, args...)
}

// answer writes a short text answer to the request in sc.head and skips
// its body; it reports whether the connection goes on (it does not if the
// body cannot be skipped within the buffer).
func (sc *serverConn) answer(code int, text string) bool {
	h := &sc.head
	keep := !h.close && !sc.s.closing.Load()
	end := sc.rpos + h.size
	switch {
	case h.chunked:
		keep = false
	case h.contentLength > 0:
		if int64(sc.wpos-end) >= h.contentLength {
			end += int(h.contentLength)
		} else {
			keep = false
		}
	}
	b := appendStatusLine(sc.out[:0], code)
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nDate: "...)
	b = appendDate(b)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(text)), 10)
	b = append(b, "\r\n"...)
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !sc.isHead {
		b = append(b, text...)
	}
	_, err := sc.io.Write(b)
	sc.out = b[:0]
	sc.rpos = end
	return keep && err == nil
}

// attempt proxies the request to fc.ep once.
func (sc *serverConn) attempt(fc *fastCall) {
	ep := fc.ep
	if ep.pool == nil {
		sc.attemptHTTP(fc)
		return
	}
	h := &sc.head
	replayable := !h.hasBody() && idempotent(h.method)
	if fc.now.IsZero() {
		fc.now = time.Now()
	}
	uc := ep.pool.get(fc.now)
	if uc != nil && !replayable && !uc.alive() {
		uc.close()
		uc = nil
	}
	for {
		if uc == nil {
			c, err := dialInstance(&sc.ctx, ep.Dial)
			if err != nil {
				fc.retry, fc.dialErr = true, err
				return
			}
			uc = newUpConn(c)
			uc.take()
		}
		if !sc.exchange(fc, uc, replayable) {
			return
		}
		// A kept connection the instance had closed: once more on a
		// new one, as net/http's transport does.
		uc = nil
	}
}

// idempotent reports whether a request with this method and no body may
// be sent again (net/http's rule, without the Idempotency-Key headers).
func idempotent(method []byte) bool {
	switch string(method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// Body framings of a response.
const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyClose // until the instance closes the connection
)

// exchange sends the request over uc and forwards the response. It
// returns true only when uc was a kept connection that failed before
// anything came back and the request may be sent again.
func (sc *serverConn) exchange(fc *fastCall, uc *upConn, replayable bool) (again bool) {
	h := &sc.head
	bodyStart := sc.rpos + h.size
	out := sc.appendRequest(sc.out[:0], fc.host)
	inline := false
	switch {
	case h.chunked:
	case h.contentLength <= 0:
		inline = true
	case int64(sc.wpos-bodyStart) >= h.contentLength:
		out = append(out, sc.buf[bodyStart:bodyStart+int(h.contentLength)]...)
		fc.bodyEnd = bodyStart + int(h.contentLength)
		inline = true
	}
	fc.reqBytes = max(h.contentLength, 0)
	sc.out = out[:0]
	wantClose := h.close

	now := fc.now // of the attempt's start; read again for the next exchange
	fc.now = time.Time{}
	if now.IsZero() {
		now = time.Now()
	}
	var deadline time.Time // of the first byte
	if d := firstByteTimeout(fc.cfg); d > 0 {
		deadline = now.Add(d)
	}
	watchAt := now.Add(watchAfter)
	// readDeadline is the instance connection's read deadline while the
	// response head is awaited: the first byte's, or sooner the time to
	// start watching the client.
	readDeadline := func(bc *bodyCopy) time.Time {
		rd := deadline
		if !watchAt.IsZero() && bc == nil && (rd.IsZero() || watchAt.Before(rd)) {
			// The watch may start up to half of watchAfter early: a
			// kept connection's deadline of a request a moment ago
			// stays, instead of a timer change per request.
			if dl := uc.dl; !dl.After(watchAt) && dl.After(watchAt.Add(-watchAfter/2)) {
				rd = dl
			} else {
				rd = watchAt
			}
		}
		return rd
	}
	var werr error
	if inline {
		// The whole request in one write, then a wait for the answer
		// without a read that would find nothing yet.
		uc.setReadDeadline(readDeadline(nil))
		var n int
		if n, werr = uc.io.writeThenAwait(out); werr == nil && n < len(out) {
			_, werr = uc.io.Write(out[n:])
		}
	} else {
		_, werr = uc.io.Write(out)
	}
	if werr != nil {
		uc.close()
		if uc.reused && replayable {
			return true
		}
		sc.debug(fc, "instance failed", "error", werr)
		fc.keep = sc.fail(fc, http.StatusBadGateway, failedText(fc))
		return false
	}
	var bc *bodyCopy
	if !inline {
		// From here on the head's bytes may be overwritten.
		fc.bodyRead = true
		bc = sc.startBody(uc, bodyStart)
	}

	// The response head, and the informational responses before it.
	rh := &sc.resp
	n1xx := 0
	for {
		uc.setReadDeadline(readDeadline(bc))
		res := headIncomplete
		if uc.w > uc.r {
			res = parseResponseHead(uc.buf[uc.r:uc.w], rh)
		}
		if res == headOK && rh.status/100 == 1 && rh.status != http.StatusSwitchingProtocols {
			if n1xx++; n1xx > max1xx {
				res = headBad
			} else {
				sc.out = sc.appendResponseHead(sc.out[:0], rh, bodyNone, true)
				if _, err := sc.io.Write(sc.out); err != nil {
					return sc.clientGone(fc, uc, bc)
				}
				uc.r += rh.size
				continue
			}
		}
		if res == headOK && rh.status == http.StatusSwitchingProtocols {
			res = headBad // no upgrade was asked for
		}
		if res == headBad {
			sc.stopWatch()
			sc.debug(fc, "instance sent a malformed response")
			sc.abortBody(bc, uc)
			fc.keep = sc.fail(fc, http.StatusBadGateway, failedText(fc))
			return false
		}
		if res == headOK {
			break
		}
		if uc.w == len(uc.buf) {
			if !uc.grow() {
				sc.stopWatch()
				sc.debug(fc, "instance response head too large")
				sc.abortBody(bc, uc)
				fc.keep = sc.fail(fc, http.StatusBadGateway, failedText(fc))
				return false
			}
		}
		n, err := uc.io.Read(uc.buf[uc.w:])
		uc.w += n
		if n > 0 || err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				sc.stopWatch()
				sc.debug(fc, "instance did not answer in time", "timeout", firstByteTimeout(fc.cfg))
				sc.abortBody(bc, uc)
				fc.keep = sc.fail(fc, http.StatusGatewayTimeout, "knbox: revision "+fc.rv.String()+" did not start its response within "+firstByteTimeout(fc.cfg).String()+"\n")
				return false
			}
			if sc.watch == nil && bc == nil {
				c := uc.c
				sc.startWatch(func() { c.Close() })
			}
			watchAt = time.Time{}
			continue
		}
		if sc.stopWatch() {
			return sc.clientGone(fc, uc, bc)
		}
		if bc != nil {
			<-bc.done
			if bc.clientErr {
				return sc.clientGone(fc, uc, bc)
			}
		}
		uc.close()
		if uc.reused && replayable && uc.w == 0 {
			return true
		}
		sc.debug(fc, "instance failed", "error", err)
		sc.stopBody(true)
		fc.keep = sc.fail(fc, http.StatusBadGateway, failedText(fc))
		return false
	}
	if sc.stopWatch() {
		return sc.clientGone(fc, uc, bc)
	}
	uc.r += rh.size

	kind := bodyNone
	switch {
	case bodyless(fc.isHead, rh.status):
	case rh.chunked:
		kind = bodyChunked
	case rh.contentLength >= 0:
		kind = bodyLength
	default:
		kind = bodyClose
	}
	if kind == bodyLength && rh.contentLength == 0 {
		kind = bodyNone
	}
	if wantClose || sc.s.closing.Load() {
		fc.keep = false
	}
	fc.status = rh.status
	out = sc.appendResponseHead(sc.out[:0], rh, kind, fc.keep)
	reusable := !rh.close

	var err error
	idle := fc.cfg.IdleTimeout
	switch kind {
	case bodyNone:
		_, err = sc.io.Write(out)
		reusable = reusable && uc.r == uc.w
		if err != nil {
			sc.out = out[:0]
			return sc.clientGone(fc, uc, bc)
		}
	case bodyLength:
		var upErr error
		err, upErr = sc.copyLengthResponse(fc, uc, out, rh.contentLength, idle)
		if err != nil || upErr != nil {
			if upErr != nil {
				sc.debug(fc, "instance failed mid-response", "error", upErr)
			}
			return sc.abortResponse(fc, uc, bc)
		}
		reusable = reusable && uc.r == uc.w
	case bodyChunked, bodyClose:
		var upErr error
		err, upErr = sc.copyChunkedResponse(fc, uc, out, kind == bodyClose, idle)
		if err != nil || upErr != nil {
			if upErr != nil {
				sc.debug(fc, "instance failed mid-response", "error", upErr)
			}
			return sc.abortResponse(fc, uc, bc)
		}
		reusable = reusable && kind == bodyChunked && uc.r == uc.w
	}
	sc.out = sc.out[:0]
	if bc != nil {
		select {
		case <-bc.done:
		default:
			// The copy may be about to end (the instance read the
			// body, then answered); if it does not end soon, the
			// instance answered without reading the whole body: neither
			// connection can go on.
			t := time.NewTimer(bodyGrace)
			select {
			case <-bc.done:
			case <-t.C:
				reusable, fc.keep = false, false
			}
			t.Stop()
		}
		if !reusable {
			uc.c.Close()
		}
		if !sc.stopBody(true) {
			reusable, fc.keep = false, false
		}
		fc.reqBytes = bc.n
	} else {
		sc.rpos = fc.bodyEnd
	}
	if reusable && fc.ep.pool != nil {
		// One clock reading for the pool and the in-flight count.
		fc.end = time.Now()
		fc.ep.pool.put(uc, fc.end)
	} else {
		uc.close()
	}
	return false
}

// failedText is the answer when an instance failed before its response.
func failedText(fc *fastCall) string {
	return "knbox: the instance of revision " + fc.rv.String() + " failed before it answered\n"
}

// firstByteTimeout is how long the instance has to start its response.
func firstByteTimeout(cfg RevisionConfig) time.Duration {
	return (&call{cfg: cfg}).firstByteDeadline()
}

// clientGone ends an exchange whose client went away.
func (sc *serverConn) clientGone(fc *fastCall, uc *upConn, bc *bodyCopy) bool {
	sc.stopWatch()
	uc.close()
	if bc != nil {
		sc.stopBody(true)
	}
	fc.keep = false
	return false
}

// abortBody stops a request body copy whose exchange failed.
func (sc *serverConn) abortBody(bc *bodyCopy, uc *upConn) {
	uc.close()
	if bc != nil {
		sc.stopBody(true)
	}
}

// abortResponse ends a response that failed after it started: the client
// connection is closed, so the client sees an incomplete response.
func (sc *serverConn) abortResponse(fc *fastCall, uc *upConn, bc *bodyCopy) bool {
	sc.out = sc.out[:0]
	uc.close()
	sc.stopBody(true)
	fc.keep = false
	return false
}

// copyLengthResponse writes the head in out, then the body of n bytes:
// what is buffered, then the rest spliced from socket to socket (or read
// and written with the idle timeout).
func (sc *serverConn) copyLengthResponse(fc *fastCall, uc *upConn, out []byte, n int64, idle time.Duration) (clientErr, upErr error) {
	k := min(int64(uc.w-uc.r), n)
	out = append(out, uc.buf[uc.r:uc.r+int(k)]...)
	uc.r += int(k)
	_, err := sc.io.Write(out)
	sc.out = out[:0]
	fc.resBytes = k
	if err != nil {
		return err, nil
	}
	left := n - k
	if left == 0 {
		return nil, nil
	}
	if idle <= 0 && sc.tcp != nil && uc.tcp != nil {
		uc.setReadDeadline(time.Time{})
		lr := &io.LimitedReader{R: uc.tcp, N: left}
		m, err := sc.tcp.ReadFrom(lr)
		fc.resBytes += m
		switch {
		case err != nil && isReadSideErr(err):
			return nil, err
		case err != nil:
			return err, nil
		case lr.N > 0:
			return nil, io.ErrUnexpectedEOF
		}
		return nil, nil
	}
	for left > 0 {
		if idle > 0 {
			uc.setReadDeadline(time.Now().Add(idle))
		} else {
			uc.setReadDeadline(time.Time{})
		}
		m, err := uc.io.Read(uc.buf[:min(int64(len(uc.buf)), left)])
		if m > 0 {
			if _, werr := sc.io.Write(uc.buf[:m]); werr != nil {
				return werr, nil
			}
			left -= int64(m)
			fc.resBytes += int64(m)
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	uc.r, uc.w = 0, 0
	return nil, nil
}

// copyChunkedResponse writes the head in out, then a chunked body,
// decoded from the instance's chunked body (or, with untilEOF, taken as
// it comes until the instance closes) and chunked again.
func (sc *serverConn) copyChunkedResponse(fc *fastCall, uc *upConn, out []byte, untilEOF bool, idle time.Duration) (clientErr, upErr error) {
	var dec chunkedDecoder
	dec.reset(true)
	var data [][]byte
	uc.setReadDeadline(time.Time{})
	for {
		if uc.r < uc.w {
			if untilEOF {
				out = appendChunk(out, uc.buf[uc.r:uc.w])
				fc.resBytes += int64(uc.w - uc.r)
				uc.r = uc.w
			} else {
				n, d, err := dec.decode(uc.buf[uc.r:uc.w], data[:0])
				if err != nil {
					return nil, err
				}
				for _, p := range d {
					out = appendChunk(out, p)
					fc.resBytes += int64(len(p))
				}
				data = d[:0]
				uc.r += n
				if dec.done() {
					out = append(out, "0\r\n"...)
					out = append(out, dec.trailer...)
					out = append(out, "\r\n"...)
				}
			}
		}
		if len(out) > 0 {
			_, err := sc.io.Write(out)
			out = out[:0]
			if err != nil {
				sc.out = out
				return err, nil
			}
		}
		if dec.done() {
			sc.out = out
			return nil, nil
		}
		if uc.r == uc.w {
			uc.r, uc.w = 0, 0
		} else if uc.w == len(uc.buf) {
			uc.w = copy(uc.buf, uc.buf[uc.r:uc.w])
			uc.r = 0
		}
		if idle > 0 {
			uc.setReadDeadline(time.Now().Add(idle))
		}
		n, err := uc.io.Read(uc.buf[uc.w:])
		uc.w += n
		if n == 0 && err != nil {
			if untilEOF && err == io.EOF {
				out = append(out, "0\r\n\r\n"...)
				_, err := sc.io.Write(out)
				sc.out = out[:0]
				return err, nil
			}
			sc.out = out
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// grow enlarges the read buffer for a large response head, up to
// maxResponseHeaderBytes.
func (uc *upConn) grow() bool {
	if len(uc.buf) >= maxResponseHeaderBytes {
		return false
	}
	nb := make([]byte, min(2*len(uc.buf), maxResponseHeaderBytes))
	uc.w = copy(nb, uc.buf[uc.r:uc.w])
	uc.r = 0
	uc.release()
	uc.buf = nb
	return true
}

// appendRequest appends the request head for the instance: the client's,
// without hop-by-hop headers and the client's forwarding headers, with
// knbox's; host, when set, replaces the client's Host header.
func (sc *serverConn) appendRequest(b []byte, host string) []byte {
	h := &sc.head
	b = append(b, h.method...)
	b = append(b, ' ')
	b = append(b, h.target...)
	b = append(b, " HTTP/1.1\r\n"...)
	for i := range h.headers {
		hd := &h.headers[i]
		switch hd.kind {
		case hXForwardedFor, hXForwardedProto, hXForwardedHost, hForwarded:
			continue
		}
		if hd.kind.hopByHop() {
			continue
		}
		if hd.kind == hHost && host != "" {
			b = append(b, "Host: "...)
			b = append(b, host...)
			b = append(b, "\r\n"...)
			continue
		}
		b = append(b, hd.name...)
		b = append(b, ": "...)
		b = append(b, hd.value...)
		b = append(b, "\r\n"...)
	}
	if sc.ip != "" {
		b = append(b, "X-Forwarded-For: "...)
		b = append(b, sc.ip...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "X-Forwarded-Proto: http\r\nForwarded: "...)
	b = appendForwarded(b, sc.ip, h.host, "http")
	b = append(b, "\r\n"...)
	if !h.traceparent {
		b = append(b, "Traceparent: "...)
		n := len(b)
		b = appendTraceparent(b)
		if sc.r.observeDetails {
			sc.pendingInfo.Traceparent = string(b[n:])
			sc.pendingInfo.TraceStarted = true
		}
		b = append(b, "\r\n"...)
	}
	if h.teTrailers {
		b = append(b, "Te: trailers\r\n"...)
	}
	if h.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendResponseHead appends the response head for the client: the
// instance's status and headers without hop-by-hop ones, with the framing
// of kind.
func (sc *serverConn) appendResponseHead(b []byte, rh *resHead, kind int, keep bool) []byte {
	b = appendStatusLine(b, rh.status)
	chunked := kind == bodyChunked || kind == bodyClose
	for i := range rh.headers {
		hd := &rh.headers[i]
		switch {
		case hd.kind == hTrailer && kind == bodyChunked:
			// Announces the trailers that are forwarded.
		case hd.kind.hopByHop():
			continue
		case hd.kind == hContentLength && chunked:
			continue
		}
		b = append(b, hd.name...)
		b = append(b, ": "...)
		b = append(b, hd.value...)
		b = append(b, "\r\n"...)
	}
	if rh.status/100 == 1 {
		return append(b, "\r\n"...)
	}
	if !rh.hasDate {
		b = append(b, "Date: "...)
		b = appendDate(b)
		b = append(b, "\r\n"...)
	}
	if chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// appendStatusLine appends an HTTP/1.1 status line as net/http writes it.
func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	if code < 100 || code > 999 {
		code = 500
	}
	b = append(b, byte('0'+code/100), byte('0'+code/10%10), byte('0'+code%10), ' ')
	b = append(b, statusText(code)...)
	return append(b, "\r\n"...)
}

// dateCache holds the Date header value of the current second.
var dateCache atomic.Pointer[cachedDate]

type cachedDate struct {
	sec int64
	b   []byte
}

func appendDate(b []byte) []byte {
	now := time.Now()
	s := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == s {
		return append(b, d.b...)
	}
	d := &cachedDate{sec: s, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return append(b, d.b...)
}

// attemptHTTP proxies the request through the net/http proxy (instances
// that speak h2c): the request is made an *http.Request, and the answer
// written to the client as HTTP/1.1.
func (sc *serverConn) attemptHTTP(fc *fastCall) {
	h := &sc.head
	r := sc.r
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := sc.httpRequest(ctx)
	if err != nil {
		fc.keep = sc.fail(fc, http.StatusBadRequest, "knbox: "+err.Error()+"\n")
		return
	}
	w := &h1Writer{sc: sc, head: fc.isHead, keep: !h.close && !sc.s.closing.Load()}
	c := &call{w: w, rv: fc.rv, ep: fc.ep, cfg: fc.cfg, client: ctx, host: fc.host}
	if req.Body != http.NoBody {
		c.body = &trackingBody{rc: req.Body}
		w.keep = false // the body was read from the connection in a stream of its own
	} else if sc.startWatch(cancel) != nil {
		defer sc.stopWatch()
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if p != http.ErrAbortHandler {
					panic(p)
				}
				w.broken = true
			}
		}()
		r.attempt(c, req)
	}()
	fc.retry, fc.dialErr = c.retry, c.dialErr
	fc.bodyRead = c.body.read()
	if fc.retry {
		return
	}
	fc.status = c.status
	w.finish()
	fc.resBytes = w.n
	fc.keep = w.keep && !w.broken && w.err == nil
	if req.Body == http.NoBody {
		sc.rpos = fc.bodyEnd
	}
}

// httpRequest makes the request in sc.head an *http.Request whose body
// reads from the connection.
func (sc *serverConn) httpRequest(ctx context.Context) (*http.Request, error) {
	h := &sc.head
	u, err := url.ParseRequestURI(string(h.target))
	if err != nil {
		return nil, errors.New("invalid request target")
	}
	hdr := make(http.Header, len(h.headers))
	for i := range h.headers {
		hd := &h.headers[i]
		if hd.kind == hHost {
			continue
		}
		hdr.Add(string(hd.name), string(hd.value))
	}
	req := (&http.Request{
		Method:     string(h.method),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       string(h.host),
		RequestURI: string(h.target),
		RemoteAddr: sc.c.RemoteAddr().String(),
		Body:       http.NoBody,
	}).WithContext(ctx)
	bodyStart := sc.rpos + h.size
	buffered := bytes.NewReader(append([]byte(nil), sc.buf[bodyStart:sc.wpos]...))
	switch {
	case h.chunked:
		req.Body = io.NopCloser(httputil.NewChunkedReader(io.MultiReader(buffered, sc.c)))
		req.ContentLength = -1
	case h.contentLength > 0:
		req.Body = io.NopCloser(io.LimitReader(io.MultiReader(buffered, sc.c), h.contentLength))
		req.ContentLength = h.contentLength
	}
	return req, nil
}

// h1Writer is an http.ResponseWriter that writes HTTP/1.1 to a fast-path
// connection, for the responses of the net/http proxy.
type h1Writer struct {
	sc      *serverConn
	hdr     http.Header
	head    bool // the request was HEAD
	keep    bool
	wrote   bool
	chunked bool
	broken  bool
	err     error
	n       int64
	buf     []byte
}

func (w *h1Writer) Header() http.Header {
	if w.hdr == nil {
		w.hdr = http.Header{}
	}
	return w.hdr
}

func (w *h1Writer) WriteHeader(code int) {
	if w.wrote || w.err != nil {
		return
	}
	h := w.Header()
	b := appendStatusLine(w.buf[:0], code)
	if code/100 == 1 {
		if code == http.StatusSwitchingProtocols {
			return
		}
		var hb bytes.Buffer
		_ = h.Write(&hb)
		b = append(b, hb.Bytes()...)
		b = append(b, "\r\n"...)
		_, w.err = w.sc.io.Write(b)
		return
	}
	w.wrote = true
	_, hasLength := h["Content-Length"]
	if !hasLength && !bodyless(w.head, code) {
		w.chunked = true
	}
	for _, k := range []string{"Connection", "Transfer-Encoding", "Keep-Alive"} {
		delete(h, k)
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{string(appendDate(nil))}
	}
	var hb bytes.Buffer
	_ = h.Write(&hb)
	b = append(b, hb.Bytes()...)
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if !w.keep {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	_, w.err = w.sc.io.Write(b)
	w.buf = b[:0]
}

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.head || len(p) == 0 {
		return len(p), nil
	}
	if w.chunked {
		w.buf = appendChunk(w.buf[:0], p)
		_, w.err = w.sc.io.Write(w.buf)
	} else {
		_, w.err = w.sc.io.Write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.n += int64(len(p))
	return len(p), nil
}

// Flush does nothing: nothing is buffered.
func (w *h1Writer) Flush() {}

// finish ends the response.
func (w *h1Writer) finish() {
	if !w.wrote && w.err == nil && !w.broken {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && w.err == nil && !w.broken {
		_, w.err = w.sc.io.Write([]byte("0\r\n\r\n"))
	}
}

var _ http.Flusher = (*h1Writer)(nil)

// queueHook is what acquire calls when a fast-path request starts to
// wait: the client is watched so that a client that leaves leaves the
// queue too.
func (sc *serverConn) onQueueWait() {
	sc.waited = true
	sc.startWatch(sc.ctx.cancel)
}

// remoteAddr is the client's address for the observer, formatted once
// per connection.
func (sc *serverConn) remoteAddr() string {
	if sc.raddr == "" {
		if a := sc.c.RemoteAddr(); a != nil {
			sc.raddr = a.String()
		}
	}
	return sc.raddr
}

var _ net.Conn = (*replayConn)(nil)
