package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/knbox/knbox/pkg/routing"
)

// Defaults of [Options].
const (
	// DefaultMaxQueuedPerRevision is Knative's activator queue depth per
	// revision.
	DefaultMaxQueuedPerRevision = 10000
	// DefaultActivationTimeout bounds the wait for a slot when the revision
	// has no timeoutSeconds: Knative's default revision timeout.
	DefaultActivationTimeout = 5 * time.Minute
	// maxAttempts bounds the tries of one request on different instances
	// when connections cannot be made.
	maxAttempts = 3
)

// Endpoint is one ready instance of a revision.
type Endpoint struct {
	// ID names the instance; it is unique among the revision's instances
	// and not reused for another instance.
	ID string
	// Dial connects to the instance's port (the runtime dials into the
	// instance's network namespace; tests dial loopback).
	Dial func(ctx context.Context) (net.Conn, error)
	// H2C says the containerPort is named h2c: the router speaks HTTP/2
	// cleartext to it (prior knowledge) instead of HTTP/1.1.
	H2C bool
}

// RevisionConfig is what the router needs to know about a revision.
type RevisionConfig struct {
	// ContainerConcurrency is the most requests in flight per instance; 0
	// is unlimited.
	ContainerConcurrency int
	// Timeout, ResponseStartTimeout and IdleTimeout are Knative's
	// timeoutSeconds, responseStartTimeoutSeconds and idleTimeoutSeconds;
	// 0 is none. See the package documentation for what they cut.
	Timeout, ResponseStartTimeout, IdleTimeout time.Duration
}

// Instances is how the router learns about revisions and their instances.
// The runtime glue implements it; tests use a fake. The router never calls
// it with a lock of its own held, so an implementation may call back into
// the router.
type Instances interface {
	// Config returns the revision's config; false if the revision is
	// unknown (its requests get 503).
	Config(namespace, revision string) (RevisionConfig, bool)
	// Endpoints returns the ready instances of a revision right now.
	Endpoints(namespace, revision string) []Endpoint
	// Subscribe registers f, to be called with (namespace, revision)
	// whenever a revision's endpoints change. f does not block and does not
	// call back into Instances.
	Subscribe(f func(namespace, revision string))
	// Drained is called once when an endpoint that is no longer in
	// Endpoints has no requests in flight any more, so the runtime can stop
	// it (orderly: SIGTERM, grace, SIGKILL). It must not block.
	Drained(namespace, revision, endpointID string)
}

// Options configures a Router. Zero values are the documented defaults;
// Table and Instances are required.
type Options struct {
	// Table is the routing table the Route controller publishes.
	Table *routing.Table
	// Instances tells the router about revisions and instances.
	Instances Instances

	// Stats receives, once a second per revision with traffic or
	// instances, the time-weighted average number of requests in flight
	// during the second that starts at at (requests waiting for a slot or
	// an instance included) and the number of requests that arrived in it:
	// this feeds autoscaler.Autoscaler.Record. Called by Run, never with a
	// lock held. Nil: not reported.
	Stats func(namespace, revision string, at time.Time, concurrency, requests float64)
	// Poke is called when a request starts waiting for a revision with no
	// ready instance, with the number of requests waiting for it: at once,
	// again whenever more requests wait than the last call said (a burst of
	// n requests at zero is known as n before the first instance is ready),
	// then once a second while requests wait. This feeds
	// autoscaler.Autoscaler.PokeN, which scales a revision from zero, and
	// is the router's only say in a revision's scale. It must not block.
	// Nil: not called.
	Poke func(namespace, revision string, waiting int)

	// ActivationTimeout bounds how long a request waits for a slot on an
	// instance, whether the revision is scaling from zero or its instances
	// are busy; then it gets 503. 0: the revision's Timeout, or
	// DefaultActivationTimeout when the revision has none.
	ActivationTimeout time.Duration
	// MaxQueuedPerRevision bounds the requests waiting per revision; more
	// get 503. 0: DefaultMaxQueuedPerRevision.
	MaxQueuedPerRevision int

	// External says this listener serves external clients: cluster-local
	// Routes are not served (404) and cluster-local addresses are not
	// answered.
	External bool

	// ClusterDomain is the cluster domain of Routes' cluster-local
	// addresses, name.namespace.svc.<ClusterDomain> ("":
	// DefaultClusterDomain).
	ClusterDomain string

	// Observer, if not nil, is told about every request once it has
	// ended (metrics, access logs, spans).
	Observer Observer

	// Logger receives debug logs of failed requests and of draining.
	// Nothing is logged per request unless debug is enabled. Nil: discard.
	Logger *slog.Logger
}

// Router is the data plane's HTTP handler. It is safe for concurrent use.
type Router struct {
	table    *routing.Table
	inst     Instances
	stats    func(string, string, time.Time, float64, float64)
	poke     func(string, string, int)
	wait     time.Duration
	maxQueue int
	external bool
	// clusterDomain is Options.ClusterDomain, lower case.
	clusterDomain string
	log           *slog.Logger
	observer      Observer
	// observeDetails: the observer reads RequestInfo's strings.
	observeDetails bool

	hostsMu sync.Mutex                // serialises rebuilds of hosts
	hosts   atomic.Pointer[hostIndex] // the listener's own clients
	local   atomic.Pointer[hostIndex] // instances' calls (Server.Namespace)

	mu   sync.RWMutex
	revs map[revKey]*revision

	proxy      *httputil.ReverseProxy
	unknown    atomic.Uint64 // requests for unknown hosts
	suspectFor time.Duration // how long an endpoint that refused a connection is avoided
}

var _ http.Handler = (*Router)(nil)

// DefaultClusterDomain is Knative's cluster domain.
const DefaultClusterDomain = "cluster.local"

// New returns a Router serving opts.Table. It subscribes to the table and to
// opts.Instances; call Run to report statistics.
func New(opts Options) (*Router, error) {
	if opts.Table == nil {
		return nil, errors.New("router: Options.Table is required")
	}
	if opts.Instances == nil {
		return nil, errors.New("router: Options.Instances is required")
	}
	if opts.ActivationTimeout < 0 || opts.MaxQueuedPerRevision < 0 {
		return nil, errors.New("router: ActivationTimeout and MaxQueuedPerRevision must not be negative")
	}
	r := &Router{
		table:          opts.Table,
		inst:           opts.Instances,
		stats:          opts.Stats,
		poke:           opts.Poke,
		wait:           opts.ActivationTimeout,
		maxQueue:       opts.MaxQueuedPerRevision,
		external:       opts.External,
		log:            opts.Logger,
		observer:       opts.Observer,
		observeDetails: wantsDetails(opts.Observer),
		revs:           map[revKey]*revision{},

		suspectFor: suspectFor,
	}
	if r.maxQueue == 0 {
		r.maxQueue = DefaultMaxQueuedPerRevision
	}
	r.clusterDomain = canonicalHost(opts.ClusterDomain)
	if r.clusterDomain == "" {
		r.clusterDomain = DefaultClusterDomain
	}
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      roundTripper{},
		FlushInterval:  -1,
		BufferPool:     bufferPool{},
		ModifyResponse: modifyResponse,
		ErrorHandler:   r.proxyError,
		ErrorLog:       slog.NewLogLogger(r.log.Handler(), slog.LevelDebug),
	}
	r.rebuildHosts()
	r.table.Subscribe(r.rebuildHosts)
	r.inst.Subscribe(r.endpointsChanged)
	return r, nil
}

// ServeHTTP routes, admits and proxies one request.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var start time.Time
	if r.observer != nil {
		start = time.Now()
	}
	scope, _ := req.Context().Value(scopeKey{}).(string)
	t := r.find(canonicalHost(req.Host), scope)
	if t == nil {
		r.unknown.Add(1)
		if r.log.Enabled(req.Context(), slog.LevelDebug) {
			r.log.DebugContext(req.Context(), "no route for host", "host", req.Host)
		}
		writeText(w, http.StatusNotFound, "knbox: no route for host "+quoteHost(req.Host)+"\n")
		r.observeAnswer(req, nil, http.StatusNotFound, start)
		return
	}
	name := t.pick()
	if name == "" {
		writeText(w, http.StatusServiceUnavailable, "knbox: route "+t.namespace+"/"+t.route+" has no traffic target\n")
		r.observeAnswer(req, t, http.StatusServiceUnavailable, start)
		return
	}
	for {
		rv := r.revision(t.namespace, name)
		rv.ensureLoaded()
		cfg, ok := rv.config()
		if !ok {
			rv.count(http.StatusServiceUnavailable)
			writeText(w, http.StatusServiceUnavailable, "knbox: revision "+t.namespace+"/"+name+" is not available\n")
			r.observeAnswer(req, t, http.StatusServiceUnavailable, start)
			return
		}
		if r.serve(t, rv, cfg, w, req, start) {
			return
		}
		// rv was forgotten between lookup and admission: look it up again.
	}
}

// observeAnswer reports a request answered without admission.
func (r *Router) observeAnswer(req *http.Request, t *target, code int, start time.Time) {
	if r.observer != nil {
		r.observeHTTP(req, t, nil, code, start, 0, false)
	}
}

// serve admits req to rv and proxies it; false if rv was forgotten before
// the request was counted.
func (r *Router) serve(t *target, rv *revision, cfg RevisionConfig, w http.ResponseWriter, req *http.Request, start time.Time) bool {
	wait := r.wait
	if wait == 0 {
		wait = cfg.Timeout
	}
	if wait <= 0 {
		wait = DefaultActivationTimeout
	}
	ctx := req.Context()
	ep, cold, err := rv.acquire(ctx, time.Now(), nil, true, wait, r.maxQueue, nil)
	if errors.Is(err, errForgotten) {
		return false
	}
	c := &call{w: w, rv: rv, ep: ep, cfg: cfg, client: ctx, host: t.rewriteHost}
	var queued time.Duration
	if r.observer != nil {
		queued = time.Since(start)
	}
	defer func() {
		rv.finish(c.ep, c.status)
		if r.observer != nil {
			r.observeHTTP(req, t, c, 0, start, queued, cold)
		}
	}()
	if err != nil {
		r.admissionError(c, req, wait, err)
		return true
	}
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
		c.body = &trackingBody{rc: req.Body}
	}
	var tried []*endpoint
	for attempt := 1; ; attempt++ {
		r.attempt(c, req)
		if !c.retry {
			return true
		}
		c.retry = false
		tried = append(tried, c.ep)
		rv.suspect(c.ep)
		rv.release(c.ep)
		c.ep = nil
		if attempt == maxAttempts || c.body.read() {
			break
		}
		ep, _, err := rv.acquire(ctx, time.Now(), tried, false, wait, r.maxQueue, nil)
		if errors.Is(err, errNoOther) {
			break
		}
		if err != nil {
			r.admissionError(c, req, wait, err)
			return true
		}
		c.ep = ep
	}
	r.debug(c, req, "no instance accepted the connection", "error", c.dialErr, "attempts", len(tried))
	c.fail(http.StatusBadGateway, "knbox: could not connect to an instance of revision "+rv.String()+"\n")
	return true
}

// attempt proxies req to c.ep once, with the revision's timeouts.
func (r *Router) attempt(c *call, req *http.Request) {
	ctx := c.begin()
	defer c.end()
	out := req.WithContext(ctx)
	if c.body != nil {
		out.Body = c.body
	}
	r.proxy.ServeHTTP(c, out)
}

// admissionError answers a request that got no slot.
func (r *Router) admissionError(c *call, req *http.Request, wait time.Duration, err error) {
	switch {
	case errors.Is(err, errQueueFull):
		r.debug(c, req, "queue full")
		c.fail(http.StatusServiceUnavailable, "knbox: too many requests are waiting for revision "+c.rv.String()+"\n")
	case errors.Is(err, errWaitTimeout):
		r.debug(c, req, "no slot in time", "wait", wait)
		c.fail(http.StatusServiceUnavailable, "knbox: no instance of revision "+c.rv.String()+" could take the request within "+wait.String()+"\n")
	default:
		// The client went away while waiting: nobody to answer.
		r.debug(c, req, "client gone while waiting", "error", err)
	}
}

func (r *Router) debug(c *call, req *http.Request, msg string, args ...any) {
	if !r.log.Enabled(req.Context(), slog.LevelDebug) {
		return
	}
	args = append(args, "namespace", c.rv.key.namespace, "revision", c.rv.key.name, "host", req.Host, "path", req.URL.Path)
	if c.ep != nil {
		args = append(args, "instance", c.ep.ID)
	}
	r.log.DebugContext(req.Context(), msg, args...)
}

// revision returns the state of a revision, creating it.
func (r *Router) revision(namespace, name string) *revision {
	k := revKey{namespace, name}
	r.mu.RLock()
	rv := r.revs[k]
	r.mu.RUnlock()
	if rv != nil {
		return rv
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rv = r.revs[k]; rv == nil {
		rv = newRevision(r, k)
		r.revs[k] = rv
	}
	return rv
}

// revisions returns the revisions known now.
func (r *Router) revisions() []*revision {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*revision, 0, len(r.revs))
	for _, rv := range r.revs {
		out = append(out, rv)
	}
	return out
}

// endpointsChanged is the Instances subscription: it refreshes the
// revision's endpoints in the background, at most one refresh running and
// one pending per revision.
func (r *Router) endpointsChanged(namespace, name string) {
	rv := r.revision(namespace, name)
	if rv.dirty.CompareAndSwap(false, true) {
		go rv.refresh(true)
	}
}

// activate pokes the autoscaler: waiting requests wait for the revision.
func (r *Router) activate(k revKey, waiting int) {
	if r.poke != nil {
		r.poke(k.namespace, k.name, waiting)
	}
}

// drained closes an endpoint's idle connections and tells the runtime.
func (r *Router) drained(k revKey, ep *endpoint) {
	ep.closeIdle()
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("instance drained", "namespace", k.namespace, "revision", k.name, "instance", ep.ID)
	}
	r.inst.Drained(k.namespace, k.name, ep.ID)
}

// Run reports statistics once a second, at the turn of each wall-clock
// second, until ctx ends. It also repeats Poke for revisions
// whose requests still wait for a first instance, and forgets revisions
// that are gone and idle.
func (r *Router) Run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		t.Reset(now.Truncate(time.Second).Add(time.Second).Sub(now))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.report(time.Now())
	}
}

// report ends the current period of every revision at now.
func (r *Router) report(now time.Time) {
	for _, rv := range r.revisions() {
		s := rv.sample(now)
		if s.report && r.stats != nil {
			r.stats(rv.key.namespace, rv.key.name, s.at, s.concurrency, s.requests)
		}
		if s.activate > 0 {
			r.activate(rv.key, s.activate)
		}
		if s.idleCheck {
			if _, ok := r.inst.Config(rv.key.namespace, rv.key.name); !ok {
				r.forget(rv)
			}
		}
	}
}

// forget drops the state of a revision that is gone, if it is still idle.
func (r *Router) forget(rv *revision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revs[rv.key] == rv && rv.markForgotten() {
		delete(r.revs, rv.key)
	}
}

// writeText writes a short plain-text answer.
func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

// quoteHost quotes a client's Host for an error body, bounded in length.
func quoteHost(h string) string {
	const maxLen = 256
	if len(h) > maxLen {
		h = h[:maxLen] + "..."
	}
	b := make([]byte, 0, len(h)+2)
	b = append(b, '"')
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
