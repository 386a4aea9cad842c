package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	requestsDesc = prometheus.NewDesc("knbox_router_requests_total",
		"Requests the router finished, by revision and response code class (none: the client went away before an answer). Unknown hosts count with empty namespace and revision.",
		[]string{"namespace", "revision", "code"}, nil)
	inFlightDesc = prometheus.NewDesc("knbox_router_requests_in_flight",
		"Requests in flight per revision, the waiting ones included.",
		[]string{"namespace", "revision"}, nil)
	queueDesc = prometheus.NewDesc("knbox_router_queue_depth",
		"Requests waiting for a slot on an instance (or for a first instance) per revision.",
		[]string{"namespace", "revision"}, nil)
	instancesDesc = prometheus.NewDesc("knbox_router_instances",
		"Ready instances per revision as the router sees them.",
		[]string{"namespace", "revision"}, nil)
)

// Collector returns the router's Prometheus metrics, to be registered by the
// caller. They are read from the router's own counters when scraped, so the
// request path does no metric work beyond counting.
func (r *Router) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Router }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- requestsDesc
	ch <- inFlightDesc
	ch <- queueDesc
	ch <- instancesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	if n := c.r.unknown.Load(); n > 0 {
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(n), "", "", "4xx")
	}
	for _, rv := range c.r.revisions() {
		ns, name := rv.key.namespace, rv.key.name
		for i := range rv.codes {
			if n := rv.codes[i].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(n), ns, name, codeClasses[i])
			}
		}
		rv.mu.Lock()
		inflight, queued, ready := rv.inflight, rv.queue.n, len(rv.ready)
		rv.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(inflight), ns, name)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(queued), ns, name)
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(ready), ns, name)
	}
}

// Load calls f with the load of every revision the router knows: requests
// in flight (the waiting ones included), requests waiting for a slot on an
// instance (the queue depth), and ready instances. It is for metrics read
// when scraped; f must be quick.
func (r *Router) Load(f func(namespace, revision string, inflight, queued, ready int)) {
	for _, rv := range r.revisions() {
		rv.mu.Lock()
		inflight, queued, ready := rv.inflight, rv.queue.n, len(rv.ready)
		rv.mu.Unlock()
		f(rv.key.namespace, rv.key.name, inflight, queued, ready)
	}
}
