package router

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

var (
	errQueueFull   = errors.New("queue full")
	errWaitTimeout = errors.New("no slot in time")
	errNoOther     = errors.New("no other instance")
	errForgotten   = errors.New("revision forgotten")
)

const (
	// maxIdlePerEndpoint bounds the idle connections kept to one instance.
	maxIdlePerEndpoint = 100
	// idleConnTimeout closes connections to an instance idle for longer.
	idleConnTimeout = 60 * time.Second
	// maxResponseHeaderBytes bounds the response headers of an instance.
	maxResponseHeaderBytes = 1 << 20
	// suspectFor is how long an endpoint that refused a connection is
	// avoided.
	suspectFor = time.Second
	// activateEvery spaces the repeated Poke calls.
	activateEvery = time.Second
	// forgetCheckEvery is how many idle seconds pass between the checks
	// whether an idle revision still exists.
	forgetCheckEvery = 60
)

// Code classes counted per revision: index 0 is "no response".
var codeClasses = [...]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

func codeClass(code int) int {
	if code < 100 || code > 599 {
		return 0
	}
	return code / 100
}

type revKey struct{ namespace, name string }

// revision is the router's state of one revision: its endpoints, its
// queue, and its in-flight accounting.
type revision struct {
	r   *Router
	key revKey

	refreshMu sync.Mutex  // serialises refreshes
	loaded    atomic.Bool // a refresh has completed
	dirty     atomic.Bool // a refresh is pending
	cfg       atomic.Pointer[RevisionConfig]

	codes [len(codeClasses)]atomic.Uint64 // finished requests by code class

	mu        sync.Mutex
	forgotten bool
	cc        int                  // containerConcurrency, 0 unlimited
	ready     []*endpoint          // ready endpoints, in Endpoints order
	byID      map[string]*endpoint // ready endpoints by ID
	draining  map[string]*endpoint // removed endpoints with requests in flight
	queue     waitQueue
	inflight  int // requests admitted and not finished, waiting ones included
	// Statistics of the current period.
	periodStart, lastChange time.Time
	area                    float64 // integral of inflight over the period, in request-seconds
	arrivals                int
	lastActivate            time.Time
	pokedWaiting            int // the number of waiting requests the last poke said
	idleSeconds             int
}

func newRevision(r *Router, k revKey) *revision {
	now := time.Now()
	return &revision{
		r:           r,
		key:         k,
		byID:        map[string]*endpoint{},
		draining:    map[string]*endpoint{},
		periodStart: now,
		lastChange:  now,
	}
}

func (rv *revision) String() string { return rv.key.namespace + "/" + rv.key.name }

// config returns the revision's config, asking Instances until it is known.
func (rv *revision) config() (RevisionConfig, bool) {
	if c := rv.cfg.Load(); c != nil {
		return *c, true
	}
	c, ok := rv.r.inst.Config(rv.key.namespace, rv.key.name)
	if ok {
		rv.setConfig(c)
	}
	return c, ok
}

func (rv *revision) setConfig(c RevisionConfig) {
	if c.ContainerConcurrency < 0 {
		c.ContainerConcurrency = 0
	}
	rv.mu.Lock()
	rv.cc = c.ContainerConcurrency
	rv.cfg.Store(&c)
	rv.dispatchLocked()
	rv.mu.Unlock()
}

// ensureLoaded makes sure the endpoints were read at least once.
func (rv *revision) ensureLoaded() {
	if !rv.loaded.Load() {
		rv.refresh(false)
	}
}

// refresh reads the revision's endpoints and applies them: new ones take
// waiting requests, removed ones drain. With force false it does nothing if
// a refresh has completed already.
func (rv *revision) refresh(force bool) {
	rv.refreshMu.Lock()
	defer rv.refreshMu.Unlock()
	if !force && rv.loaded.Load() {
		return
	}
	rv.dirty.Store(false)
	eps := rv.r.inst.Endpoints(rv.key.namespace, rv.key.name)
	if rv.cfg.Load() == nil {
		if c, ok := rv.r.inst.Config(rv.key.namespace, rv.key.name); ok {
			rv.setConfig(c)
		}
	}

	var drained []*endpoint
	rv.mu.Lock()
	next := make(map[string]*endpoint, len(eps))
	ready := make([]*endpoint, 0, len(eps))
	for _, e := range eps {
		if e.Dial == nil || next[e.ID] != nil {
			continue
		}
		ep := rv.byID[e.ID]
		if ep == nil {
			if ep = rv.draining[e.ID]; ep != nil {
				// Back before it drained: serve it again.
				delete(rv.draining, e.ID)
				ep.removed = false
			}
		}
		if ep == nil {
			ep = newEndpoint(e)
		}
		next[e.ID] = ep
		ready = append(ready, ep)
	}
	for id, ep := range rv.byID {
		if next[id] != nil {
			continue
		}
		ep.removed = true
		if ep.inflight == 0 {
			ep.drained = true
			drained = append(drained, ep)
		} else {
			rv.draining[id] = ep
		}
	}
	rv.byID, rv.ready = next, ready
	rv.dispatchLocked()
	rv.loaded.Store(true)
	rv.mu.Unlock()

	for _, ep := range drained {
		rv.r.drained(rv.key, ep)
	}
}

// acquire takes a slot on an endpoint not in exclude, waiting up to wait in
// the revision's queue. With arrive it also counts the request in (the
// caller then calls finish exactly once, unless the error is errForgotten).
// onWait, if not nil, is called when the request starts to wait; cold
// says it waited for a revision with no ready instance.
func (rv *revision) acquire(ctx context.Context, now time.Time, exclude []*endpoint, arrive bool, wait time.Duration, maxQueue int, onWait func()) (_ *endpoint, cold bool, _ error) {
	rv.mu.Lock()
	if rv.forgotten {
		rv.mu.Unlock()
		return nil, false, errForgotten
	}
	if arrive {
		rv.advanceLocked(now)
		rv.inflight++
		rv.arrivals++
	}
	if ep := rv.pickLocked(exclude); ep != nil {
		ep.inflight++
		rv.mu.Unlock()
		return ep, false, nil
	}
	if len(exclude) > 0 && !rv.hasOtherLocked(exclude) {
		rv.mu.Unlock()
		return nil, false, errNoOther
	}
	if rv.queue.n >= maxQueue {
		rv.mu.Unlock()
		return nil, false, errQueueFull
	}
	w := &waiter{ch: make(chan *endpoint, 1), exclude: exclude}
	rv.queue.push(w)
	cold = len(rv.ready) == 0
	// Poke at once, and again as soon as more requests wait than the last
	// poke said: the autoscaler then counts a burst whole in its first
	// decisions instead of one request now and the rest a tick later.
	// Bounded: at most one poke per waiting request.
	activate := 0
	if cold && (rv.lastActivate.IsZero() || now.Sub(rv.lastActivate) >= activateEvery || rv.queue.n > rv.pokedWaiting) {
		rv.lastActivate, rv.pokedWaiting = now, rv.queue.n
		activate = rv.queue.n
	}
	rv.mu.Unlock()
	if activate > 0 {
		rv.r.activate(rv.key, activate)
	}
	if onWait != nil {
		onWait()
	}

	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case ep := <-w.ch:
		return ep, cold, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errWaitTimeout
	}
	rv.mu.Lock()
	ep := w.ep
	if ep == nil {
		rv.queue.remove(w)
		rv.mu.Unlock()
		return nil, cold, err
	}
	rv.mu.Unlock()
	if err == errWaitTimeout {
		// Handed a slot just as the wait ended: take it.
		return ep, cold, nil
	}
	rv.release(ep)
	return nil, cold, err
}

// release gives back a slot taken by acquire (the request stays counted).
func (rv *revision) release(ep *endpoint) {
	rv.mu.Lock()
	d := rv.releaseLocked(ep)
	rv.mu.Unlock()
	if d != nil {
		rv.r.drained(rv.key, d)
	}
}

// finish ends a request counted in by acquire: it gives back ep's slot
// (if any) and counts the request out with its status code.
func (rv *revision) finish(ep *endpoint, code int) { rv.finishAt(ep, code, time.Now()) }

// finishAt is finish at a time read by the caller.
func (rv *revision) finishAt(ep *endpoint, code int, now time.Time) {
	rv.mu.Lock()
	var d *endpoint
	if ep != nil {
		d = rv.releaseLocked(ep)
	}
	rv.advanceLocked(now)
	rv.inflight--
	rv.mu.Unlock()
	rv.codes[codeClass(code)].Add(1)
	if d != nil {
		rv.r.drained(rv.key, d)
	}
}

// count counts a request that was answered without admission.
func (rv *revision) count(code int) { rv.codes[codeClass(code)].Add(1) }

// releaseLocked frees a slot of ep and hands it on; it returns ep if ep has
// just drained (the caller calls drained without the lock).
func (rv *revision) releaseLocked(ep *endpoint) *endpoint {
	ep.inflight--
	if ep.removed {
		if ep.inflight == 0 && !ep.drained {
			ep.drained = true
			delete(rv.draining, ep.ID)
			return ep
		}
		return nil
	}
	rv.dispatchLocked()
	return nil
}

// pickLocked returns the ready endpoint with spare capacity and the fewest
// requests in flight (ties at random) that is not in exclude; nil if none.
// An endpoint that refused a connection lately is taken only when no other
// has spare capacity: with the fewest requests in flight, it would
// otherwise be everybody's first choice.
func (rv *revision) pickLocked(exclude []*endpoint) *endpoint {
	var best *endpoint
	var bestLoad, ties int
	var now time.Time
	for _, ep := range rv.ready {
		if rv.cc > 0 && ep.inflight >= rv.cc {
			continue
		}
		if len(exclude) > 0 && contains(exclude, ep) {
			continue
		}
		load := ep.inflight
		if !ep.suspectUntil.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if now.Before(ep.suspectUntil) {
				load += suspectPenalty
			} else {
				ep.suspectUntil = time.Time{}
			}
		}
		switch {
		case best == nil || load < bestLoad:
			best, bestLoad, ties = ep, load, 1
		case load == bestLoad:
			// Reservoir sampling keeps each tied endpoint with equal odds.
			ties++
			if rand.IntN(ties) == 0 {
				best = ep
			}
		}
	}
	return best
}

// suspectPenalty is added to the load of an endpoint that refused a
// connection lately: more than any real number of requests in flight.
const suspectPenalty = 1 << 30

// suspect marks ep as having refused a connection just now.
func (rv *revision) suspect(ep *endpoint) {
	rv.mu.Lock()
	ep.suspectUntil = time.Now().Add(rv.r.suspectFor)
	rv.mu.Unlock()
}

// hasOtherLocked reports whether a ready endpoint outside exclude exists.
func (rv *revision) hasOtherLocked(exclude []*endpoint) bool {
	for _, ep := range rv.ready {
		if !contains(exclude, ep) {
			return true
		}
	}
	return false
}

// dispatchLocked hands free slots to waiting requests, first come first
// served (a waiter that excludes every free endpoint is passed over).
func (rv *revision) dispatchLocked() {
	for w := rv.queue.head; w != nil; {
		next := w.next
		ep := rv.pickLocked(w.exclude)
		if ep == nil {
			if len(w.exclude) == 0 {
				return // no free slot for anyone
			}
			w = next
			continue
		}
		ep.inflight++
		rv.queue.remove(w)
		w.ep = ep
		w.ch <- ep // buffered, sent at most once
		w = next
	}
}

// advanceLocked adds the in-flight count since the last change to the
// period's integral.
func (rv *revision) advanceLocked(now time.Time) {
	if d := now.Sub(rv.lastChange); d > 0 {
		rv.area += float64(rv.inflight) * d.Seconds()
		rv.lastChange = now
	}
}

// sample is one period's statistics of a revision.
type sample struct {
	at                    time.Time
	concurrency, requests float64
	report                bool // the revision had traffic or instances
	activate              int  // requests that wait for a first instance, to poke with
	idleCheck             bool // idle long enough to check it still exists
}

// sample ends the current period at now.
func (rv *revision) sample(now time.Time) sample {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.advanceLocked(now)
	var s sample
	if d := now.Sub(rv.periodStart).Seconds(); d > 0 {
		s.concurrency = rv.area / d
	}
	s.at = rv.periodStart.Truncate(time.Second)
	s.requests = float64(rv.arrivals)
	s.report = rv.inflight > 0 || rv.arrivals > 0 || rv.area > 0 || len(rv.ready) > 0
	rv.periodStart, rv.lastChange, rv.area, rv.arrivals = now, now, 0, 0

	if rv.queue.n > 0 && len(rv.ready) == 0 && now.Sub(rv.lastActivate) >= activateEvery {
		rv.lastActivate, rv.pokedWaiting = now, rv.queue.n
		s.activate = rv.queue.n
	}
	if s.report || len(rv.draining) > 0 || rv.queue.n > 0 {
		rv.idleSeconds = 0
	} else {
		rv.idleSeconds++
		s.idleCheck = rv.idleSeconds%forgetCheckEvery == 0
	}
	return s
}

// markForgotten marks the revision forgotten if it is still idle.
func (rv *revision) markForgotten() bool {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.inflight > 0 || len(rv.ready) > 0 || len(rv.draining) > 0 || rv.queue.n > 0 {
		return false
	}
	rv.forgotten = true
	return true
}

func contains(eps []*endpoint, ep *endpoint) bool {
	for _, e := range eps {
		if e == ep {
			return true
		}
	}
	return false
}

// endpoint is one instance as the router tracks it. It owns the
// connections to the instance.
type endpoint struct {
	Endpoint
	rt        http.RoundTripper // the net/http path's
	closeIdle func()
	pool      *connPool // the fast path's connections; nil for h2c

	// Guarded by the revision's mu.
	inflight     int
	removed      bool      // no longer in Endpoints
	drained      bool      // Drained was called
	suspectUntil time.Time // refused a connection: avoided until then
}

func newEndpoint(e Endpoint) *endpoint {
	ep := &endpoint{Endpoint: e}
	dial := e.Dial
	if e.H2C {
		t := &http2.Transport{
			AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
				return dialInstance(ctx, dial)
			},
			DisableCompression: true,
			MaxHeaderListSize:  maxResponseHeaderBytes,
		}
		ep.rt, ep.closeIdle = t, t.CloseIdleConnections
		return ep
	}
	ep.pool = &connPool{}
	t := &http.Transport{
		Proxy: nil, // never a proxy from the environment
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialInstance(ctx, dial)
		},
		MaxIdleConnsPerHost:    maxIdlePerEndpoint,
		IdleConnTimeout:        idleConnTimeout,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	ep.rt = t
	ep.closeIdle = func() {
		t.CloseIdleConnections()
		ep.pool.closeIdle(true)
	}
	return ep
}

// dialError marks a failure to connect: nothing reached the instance.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect to instance: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func dialInstance(ctx context.Context, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, &dialError{err}
	}
	return c, nil
}

// waiter is one request waiting for a slot.
type waiter struct {
	prev, next *waiter
	ch         chan *endpoint
	exclude    []*endpoint
	ep         *endpoint // the slot handed over, guarded by the revision's mu
}

// waitQueue is a FIFO of waiters with removal from the middle.
type waitQueue struct {
	head, tail *waiter
	n          int
}

func (q *waitQueue) push(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
}

func (q *waitQueue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}
