package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/knbox/knbox/pkg/router"
)

// DefaultQueueLength is how many observed requests may wait for the
// access log and trace goroutine (Run) before more are dropped.
const DefaultQueueLength = 4096

// Knative's label names.
const (
	labelNamespace     = "namespace_name"
	labelService       = "service_name"
	labelConfiguration = "configuration_name"
	labelRevision      = "revision_name"
	labelCode          = "response_code"
	labelCodeClass     = "response_code_class"
)

var (
	revisionLabels = []string{labelNamespace, labelService, labelConfiguration, labelRevision}
	requestLabels  = append(revisionLabels[:len(revisionLabels):len(revisionLabels)], labelCode, labelCodeClass)
	// latencyBuckets are queue-proxy's and the activator's, in milliseconds.
	latencyBuckets = []float64{5, 10, 20, 40, 60, 80, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 700, 800, 900,
		1000, 2000, 5000, 10000, 20000, 50000, 100000}
)

// Options configure Metrics. Zero values are documented defaults.
type Options struct {
	// Labels returns the Service and Configuration of a revision (the
	// Revision's serving.knative.dev labels); nil or unknown: empty.
	Labels func(namespace, revision string) (service, configuration string)
	// AccessLog, if not nil, receives one JSON line per request (see
	// AccessLogFields); nil: no access log.
	AccessLog io.Writer
	// QueueLength bounds the observed requests waiting for Run (access
	// log and Trace only); 0 means DefaultQueueLength.
	QueueLength int
	// Trace, if not nil, is given each observed request on the metrics
	// goroutine, after it was counted (to make its spans off the request
	// path).
	Trace func(*router.RequestInfo)
}

// Metrics is knbox's registry. Create it with New, run Run, give it to the
// router as its Observer, add the collectors of the other parts and serve
// Handler.
type Metrics struct {
	reg    *prometheus.Registry
	labels func(namespace, revision string) (string, string)
	access *slog.Logger
	trace  func(*router.RequestInfo)
	queue  chan item
	// labelsFixed says the Service and Configuration labels cannot change
	// (Options.Labels was nil): handles with empty ones are kept too.
	labelsFixed bool

	// handles are the label-bound series of each revision and response
	// code, resolved once so that counting a request is a few atomic adds.
	handlesMu sync.RWMutex
	handles   map[handleKey]*seriesHandles

	dropped                          prometheus.Counter
	requests, appRequests, activator *prometheus.CounterVec
	latencies, appLatencies, actLat  *prometheus.HistogramVec
	coldStarts                       *prometheus.HistogramVec
	apiRequests                      *prometheus.CounterVec
	apiLatencies                     *prometheus.HistogramVec

	commits     prometheus.Histogram
	pullSeconds prometheus.Histogram
	pullBytes   prometheus.Counter

	starts starts

	// scale is what AddAutoscaler registered, for Totals.
	scale atomic.Pointer[func() []Scale]
}

// handleKey names the series of one revision and response code.
type handleKey struct {
	namespace, revision string
	code                int
}

// seriesHandles are one revision's request series for one response code.
// The app and activator series are resolved at their first request, so
// that they appear in /metrics only once counted, as before the cache.
type seriesHandles struct {
	lv        []string
	requests  prometheus.Counter
	latencies prometheus.Observer
	app, act  atomic.Pointer[seriesPair]
}

// seriesPair is a request count and its latency histogram.
type seriesPair struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// pair returns the series of p, resolving them from c and o the first time.
func (h *seriesHandles) pair(p *atomic.Pointer[seriesPair], c *prometheus.CounterVec, o *prometheus.HistogramVec) *seriesPair {
	if sp := p.Load(); sp != nil {
		return sp
	}
	sp := &seriesPair{c.WithLabelValues(h.lv...), o.WithLabelValues(h.lv...)}
	if !p.CompareAndSwap(nil, sp) {
		return p.Load()
	}
	return sp
}

// item is one entry of the queue: a request, or a revision to forget.
type item struct {
	info   *router.RequestInfo
	forget [2]string // namespace, revision
}

// New returns Metrics with the request, cold start and API metrics and the
// Go runtime and process collectors registered.
func New(o Options) *Metrics {
	if o.QueueLength <= 0 {
		o.QueueLength = DefaultQueueLength
	}
	m := &Metrics{reg: prometheus.NewRegistry(), labels: o.Labels, trace: o.Trace, queue: make(chan item, o.QueueLength),
		starts: starts{since: time.Now(), pending: map[string]bool{}}, handles: map[handleKey]*seriesHandles{}}
	if m.labels == nil {
		m.labels = func(string, string) (string, string) { return "", "" }
		m.labelsFixed = true
	}
	if o.AccessLog != nil {
		m.access = slog.New(slog.NewJSONHandler(o.AccessLog, nil))
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, requestLabels)
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, requestLabels)
	}
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "knbox_observer_dropped_total",
		Help: "Requests left out of the access log and the spans because the observer's queue was full."})
	m.requests = counter("revision_request_count", "The number of requests that are routed to a revision (queue-proxy's).")
	m.latencies = histogram("revision_request_latencies", "The response time in milliseconds, queue wait included (queue-proxy's).")
	m.appRequests = counter("revision_app_request_count", "The number of requests that reached an instance of the revision.")
	m.appLatencies = histogram("revision_app_request_latencies", "The response time in milliseconds of the instance, queue wait excluded.")
	m.activator = counter("activator_request_count", "The number of requests that waited for capacity: a cold start or a full revision (what the activator would have buffered).")
	m.actLat = histogram("activator_request_latencies", "The response time in milliseconds of requests that waited for capacity.")
	m.coldStarts = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "knbox_instance_cold_start_seconds",
		Help:    "Time from the creation of an instance to its first readiness (image pull, sandbox, start, probe).",
		Buckets: prometheus.ExponentialBuckets(0.025, 2, 14)}, revisionLabels)
	m.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "apiserver_request_total",
		Help: "Counter of apiserver requests broken out for each verb, group, version, resource, subresource, scope, component, and HTTP response code."},
		[]string{"verb", "group", "version", "resource", "subresource", "scope", "component", "code"})
	m.apiLatencies = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "apiserver_request_duration_seconds",
		Help: "Response latency distribution in seconds for each verb, group, version, resource, subresource, scope and component (watches excluded).",
		Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
			4, 5, 6, 8, 10, 15, 20, 30, 45, 60}},
		[]string{"verb", "group", "version", "resource", "subresource", "scope", "component"})
	m.commits = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "knbox_store_commit_duration_seconds",
		Help:    "Duration of the store's write transactions, fsync included (as etcd_disk_backend_commit_duration_seconds).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)})
	m.pullSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "knbox_image_pull_duration_seconds",
		Help:    "Time to fetch and unpack an image from its registry (cached images are not counted).",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)})
	m.pullBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "knbox_image_pull_bytes_total",
		Help: "Compressed bytes of the images fetched from registries, as their manifests list them."})
	m.reg.MustRegister(m.commits, m.pullSeconds, m.pullBytes)
	m.reg.MustRegister(m.dropped, m.requests, m.latencies, m.appRequests, m.appLatencies, m.activator, m.actLat, m.coldStarts,
		m.apiRequests, m.apiLatencies,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds a collector to the registry (the router's own, say).
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// Handler serves the registry in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4})
}

// ObserveRequest is router.Observer. It counts info in the request
// metrics on the caller's goroutine (atomic adds on series resolved once
// per revision and response code: no allocation, no hand-off); with an
// access log or a trace hook it also queues a copy of info for Run, or
// drops that copy when the queue is full. It never blocks.
func (m *Metrics) ObserveRequest(info *router.RequestInfo) {
	m.count(info)
	if m.access == nil && m.trace == nil {
		return
	}
	c := new(router.RequestInfo)
	*c = *info
	select {
	case m.queue <- item{info: c}:
	default:
		m.dropped.Inc()
	}
}

// WantsDetails is router.DetailsObserver: the router fills the request's
// strings (method, host, target, user agent...) only for the access log
// and the trace hook, which read them.
func (m *Metrics) WantsDetails() bool { return m.access != nil || m.trace != nil }

// Forget removes a deleted revision's series, after the access log lines
// and spans queued before it were written. It waits for room in the queue,
// at most until ctx ends.
func (m *Metrics) Forget(ctx context.Context, namespace, revision string) {
	select {
	case m.queue <- item{forget: [2]string{namespace, revision}}:
	case <-ctx.Done():
	}
}

// Run writes the access log lines, gives the observed requests to the
// trace hook and forgets revisions until ctx ends.
func (m *Metrics) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-m.queue:
			if it.info != nil {
				if m.access != nil {
					m.logRequest(it.info)
				}
				if m.trace != nil {
					m.trace(it.info)
				}
			} else {
				m.forget(it.forget[0], it.forget[1])
			}
		}
	}
}

// forget drops a revision's handles, then its series. A request counted
// on a handle taken before adds to a series no longer registered.
func (m *Metrics) forget(namespace, revision string) {
	m.handlesMu.Lock()
	for k := range m.handles {
		if k.namespace == namespace && k.revision == revision {
			delete(m.handles, k)
		}
	}
	match := prometheus.Labels{labelNamespace: namespace, labelRevision: revision}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.requests, m.appRequests, m.activator, m.latencies, m.appLatencies, m.actLat, m.coldStarts} {
		v.DeletePartialMatch(match)
	}
	m.handlesMu.Unlock()
}

// seriesFor returns the series of a revision and response code, resolving
// them the first time. Series whose Service and Configuration labels came
// out empty are not kept (the revision may not be in the informer's cache
// yet), unless Options.Labels was nil.
func (m *Metrics) seriesFor(namespace, revision string, code int) *seriesHandles {
	k := handleKey{namespace, revision, code}
	m.handlesMu.RLock()
	h := m.handles[k]
	m.handlesMu.RUnlock()
	if h != nil {
		return h
	}
	svc, cfg := m.labels(namespace, revision)
	cl, class := codeLabels(code)
	lv := []string{namespace, svc, cfg, revision, cl, class}
	h = &seriesHandles{lv: lv, requests: m.requests.WithLabelValues(lv...), latencies: m.latencies.WithLabelValues(lv...)}
	if svc == "" && cfg == "" && !m.labelsFixed {
		return h
	}
	m.handlesMu.Lock()
	if old := m.handles[k]; old != nil {
		h = old
	} else if len(m.handles) < maxHandles {
		m.handles[k] = h
	}
	m.handlesMu.Unlock()
	return h
}

// maxHandles bounds the handle cache; beyond it series are resolved per
// request (what counting cost before the cache), never dropped.
const maxHandles = 1 << 16

// count adds one request to the request metrics.
func (m *Metrics) count(info *router.RequestInfo) {
	if info.Revision == "" {
		return // unknown host: the router's knbox_router_requests_total counts it
	}
	code := info.Code
	if code < 100 || code > 599 {
		code = 0
	}
	h := m.seriesFor(info.Namespace, info.Revision, code)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	h.requests.Inc()
	h.latencies.Observe(ms(info.Duration))
	if info.Instance != "" {
		p := h.pair(&h.app, m.appRequests, m.appLatencies)
		p.count.Inc()
		p.latency.Observe(ms(max(info.Duration-info.QueueWait, 0)))
	}
	if info.ColdStart || info.QueueWait > 0 {
		p := h.pair(&h.act, m.activator, m.actLat)
		p.count.Inc()
		p.latency.Observe(ms(info.Duration))
	}
}

// codeLabels are response_code and response_code_class: "0" and "none"
// when no status was sent or it is outside 100-599.
func codeLabels(code int) (string, string) {
	if code < 100 || code > 599 {
		return "0", "none"
	}
	return strconv.Itoa(code), strconv.Itoa(code/100) + "xx"
}

// ObserveColdStart records the time an instance of a revision took from
// its creation to its first readiness.
func (m *Metrics) ObserveColdStart(namespace, revision string, d time.Duration) {
	svc, cfg := m.labels(namespace, revision)
	m.coldStarts.WithLabelValues(namespace, svc, cfg, revision).Observe(d.Seconds())
}

// ObserveStoreCommit records the duration of one write transaction of the
// store.
func (m *Metrics) ObserveStoreCommit(d time.Duration) { m.commits.Observe(d.Seconds()) }

// ObserveImagePull records one image fetched from a registry: how long it
// took and its compressed size.
func (m *Metrics) ObserveImagePull(d time.Duration, bytes int64) {
	m.pullSeconds.Observe(d.Seconds())
	m.pullBytes.Add(float64(bytes))
}

// AddStore registers knbox_store_watchers, the store's open watches, read
// from watchers at each scrape.
func (m *Metrics) AddStore(watchers func() int) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "knbox_store_watchers",
		Help: "Watches open on the store (API watches and the informers of knbox's own controllers)."},
		func() float64 { return float64(watchers()) }))
}

// APIRequest is one API server request, with labels from bounded sets
// (apiserver.RequestRecord).
type APIRequest struct {
	Verb, Group, Version, Resource, Subresource, Scope string
	Code                                               int
	Duration                                           time.Duration
}

// ObserveAPIRequest counts an API request; watches are left out of the
// latency histogram (their duration is the client's choice).
func (m *Metrics) ObserveAPIRequest(r APIRequest) {
	m.apiRequests.WithLabelValues(r.Verb, r.Group, r.Version, r.Resource, r.Subresource, r.Scope, "apiserver", strconv.Itoa(r.Code)).Inc()
	if r.Verb != "WATCH" {
		m.apiLatencies.WithLabelValues(r.Verb, r.Group, r.Version, r.Resource, r.Subresource, r.Scope, "apiserver").Observe(r.Duration.Seconds())
	}
}

var _ router.DetailsObserver = (*Metrics)(nil)
