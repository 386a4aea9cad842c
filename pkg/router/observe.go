package router

import (
	"net/http"
	"time"
)

// Observer is told about every request the router answered, once, when it
// has ended: the hook for request metrics, access logs and spans. It is
// called on the request's goroutine, so it must be quick and must not
// block; the RequestInfo is valid only during the call (the router reuses
// it for the connection's next request): an observer that keeps it keeps a
// copy. With no Observer (nil in Options) the router does no work for it.
type Observer interface {
	ObserveRequest(info *RequestInfo)
}

// DetailsObserver is an Observer that may not read the request's own
// strings: when WantsDetails (asked once, by New) is false, the router
// leaves Method, Host, Target, RemoteAddr, UserAgent, Referer and
// Traceparent empty (and TraceStarted false) on its fast path, which then allocates nothing to
// observe a request. Namespace, Route, Revision, Instance, the status, the
// sizes and the times are always filled.
type DetailsObserver interface {
	Observer
	WantsDetails() bool
}

// wantsDetails says whether o reads RequestInfo's strings.
func wantsDetails(o Observer) bool {
	if d, ok := o.(DetailsObserver); ok {
		return d.WantsDetails()
	}
	return o != nil
}

// RequestInfo describes one request the router answered.
type RequestInfo struct {
	// Namespace, Route and Revision say where the request went; empty
	// when its host is unknown (Route empty) or no revision was chosen.
	Namespace, Route, Revision string
	// Instance is the ID of the instance that answered; empty if none did.
	Instance string

	Method, Host, Target, Proto string
	RemoteAddr                  string // the client's address, host:port
	UserAgent, Referer          string
	// Traceparent is the W3C trace context sent to the instance (the
	// client's, or the one knbox started); empty if the request was not
	// proxied.
	Traceparent string
	// TraceStarted says knbox started Traceparent: the client sent none.
	TraceStarted bool

	// Code is the status sent to the client; 0 if none was (the client
	// went away, or the instance failed before answering and the
	// connection was cut).
	Code int
	// RequestBytes and ResponseBytes count body bytes.
	RequestBytes, ResponseBytes int64
	// Start is when the request's head had been read; Duration runs from
	// it to the end of the response.
	Start    time.Time
	Duration time.Duration
	// QueueWait is the time spent waiting for a slot on an instance (in
	// the revision's queue, or for a first instance).
	QueueWait time.Duration
	// ColdStart says the request waited for a revision with no ready
	// instance.
	ColdStart bool
}

// observe reports a fast-path request that was answered without an
// instance.
func (sc *serverConn) observe(t *target, rv *revision, instance string, code int, start time.Time, queued time.Duration, cold bool) {
	o := sc.r.observer
	if o == nil {
		return
	}
	info := &sc.doneInfo
	sc.info(info, t, rv, start)
	info.Duration = time.Since(start)
	info.Instance, info.Code, info.QueueWait, info.ColdStart = instance, code, queued, cold
	o.ObserveRequest(info)
	*info = RequestInfo{}
}

// observeCall reports a fast-path request that was admitted; proxy
// described it in sc.pendingInfo before its body could overwrite its head.
func (sc *serverConn) observeCall(fc *fastCall) {
	o := sc.r.observer
	if o == nil {
		return
	}
	info := &sc.pendingInfo
	if fc.ep != nil {
		info.Instance = fc.ep.ID
	}
	info.Code, info.QueueWait, info.ColdStart = fc.status, fc.queued, fc.cold
	info.RequestBytes, info.ResponseBytes = fc.reqBytes, fc.resBytes
	info.Duration = fc.end.Sub(fc.start)
	o.ObserveRequest(info)
	*info = RequestInfo{}
}

// info describes the request in sc.head in *info; the request's own
// strings only if the observer wants them.
func (sc *serverConn) info(info *RequestInfo, t *target, rv *revision, start time.Time) {
	*info = RequestInfo{Proto: "HTTP/1.1", Start: start}
	if t != nil {
		info.Namespace, info.Route = t.namespace, t.route
	}
	if rv != nil {
		info.Revision = rv.key.name
	}
	if !sc.r.observeDetails {
		return
	}
	h := &sc.head
	info.Method, info.Host, info.Target = string(h.method), string(h.host), string(h.target)
	info.RemoteAddr = sc.remoteAddr()
	for i := range h.headers {
		switch hd := &h.headers[i]; {
		case asciiEqualFold(hd.name, "user-agent"):
			info.UserAgent = string(hd.value)
		case asciiEqualFold(hd.name, "referer"):
			info.Referer = string(hd.value)
		case hd.kind == hTraceparent:
			info.Traceparent = string(hd.value)
		}
	}
}

// observeHTTP reports a request served by ServeHTTP.
// Without a call (the request was answered without admission) code is
// the status it got.
func (r *Router) observeHTTP(req *http.Request, t *target, c *call, code int, start time.Time, queued time.Duration, cold bool) {
	info := &RequestInfo{
		Method: req.Method, Host: req.Host, Target: req.RequestURI, Proto: req.Proto,
		RemoteAddr: req.RemoteAddr, UserAgent: req.UserAgent(), Referer: req.Referer(),
		Start: start, Duration: time.Since(start), QueueWait: queued, ColdStart: cold, Code: code,
	}
	if t != nil {
		info.Namespace, info.Route = t.namespace, t.route
	}
	if c != nil {
		info.Revision = c.rv.key.name
		if c.ep != nil {
			info.Instance = c.ep.ID
		}
		info.Code = c.status
		info.ResponseBytes = c.written
		info.Traceparent = c.traceparent
		info.TraceStarted = c.traceparent != "" && req.Header.Get("Traceparent") == ""
		if c.body != nil {
			info.RequestBytes = c.body.n.Load()
		}
	}
	r.observer.ObserveRequest(info)
}
