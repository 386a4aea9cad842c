package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Scale is one revision's autoscaler state, as the autoscaler gauges
// report it.
type Scale struct {
	Namespace, Revision string
	// Desired is the autoscaler's decision; Requested what the revision
	// manager was asked for (the same in knbox: it applies the decision);
	// Actual the ready instances.
	Desired, Requested, Actual int32
	// StableConcurrency and PanicConcurrency are the averages over the
	// stable and the panic window; TargetConcurrency the per-instance
	// target.
	StableConcurrency, PanicConcurrency, TargetConcurrency float64
	Panic                                                  bool
}

var (
	desiredDesc   = revisionDesc("autoscaler_desired_pods", "Number of pods autoscaler wants to allocate")
	requestedDesc = revisionDesc("autoscaler_requested_pods", "Number of pods autoscaler requested from Kubernetes")
	actualDesc    = revisionDesc("autoscaler_actual_pods", "Number of pods that are allocated currently")
	stableDesc    = revisionDesc("autoscaler_stable_request_concurrency", "Average of requests count per observed pod over the stable window")
	panicConcDesc = revisionDesc("autoscaler_panic_request_concurrency", "Average of requests count per observed pod over the panic window")
	targetDesc    = revisionDesc("autoscaler_target_concurrency_per_pod", "The desired number of concurrent requests for each pod")
	panicDesc     = revisionDesc("autoscaler_panic_mode", "1 if autoscaler is in panic mode, 0 otherwise")
	queueDesc     = revisionDesc("revision_queue_depth", "The current number of items in the serving and waiting queue (requests in flight, the waiting ones included).")
)

func revisionDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, revisionLabels, nil)
}

// scaleCollector reads the autoscaler gauges when scraped.
type scaleCollector struct {
	m     *Metrics
	scale func() []Scale
}

// AddAutoscaler registers the autoscaler gauges, read from scale at each
// scrape; revisions that scale no longer returns are gone from them.
func (m *Metrics) AddAutoscaler(scale func() []Scale) error {
	if err := m.reg.Register(scaleCollector{m, scale}); err != nil {
		return err
	}
	m.scale.Store(&scale)
	return nil
}

func (c scaleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{desiredDesc, requestedDesc, actualDesc, stableDesc, panicConcDesc, targetDesc, panicDesc} {
		ch <- d
	}
}

func (c scaleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.scale() {
		svc, cfg := c.m.labels(s.Namespace, s.Revision)
		lv := []string{s.Namespace, svc, cfg, s.Revision}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		gauge(desiredDesc, float64(s.Desired))
		gauge(requestedDesc, float64(s.Requested))
		gauge(actualDesc, float64(s.Actual))
		gauge(stableDesc, s.StableConcurrency)
		gauge(panicConcDesc, s.PanicConcurrency)
		gauge(targetDesc, s.TargetConcurrency)
		p := 0.0
		if s.Panic {
			p = 1
		}
		gauge(panicDesc, p)
	}
}

// Queue is one revision's load in the router.
type Queue struct {
	Namespace, Revision string
	// Depth counts the requests in flight, the waiting ones included, as
	// queue-proxy's revision_queue_depth does.
	Depth int
}

type queueCollector struct {
	m      *Metrics
	queues func() []Queue
}

// AddQueues registers revision_queue_depth, read from queues at each
// scrape.
func (m *Metrics) AddQueues(queues func() []Queue) error {
	return m.reg.Register(queueCollector{m, queues})
}

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDesc }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.queues() {
		svc, cfg := c.m.labels(q.Namespace, q.Revision)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(q.Depth), q.Namespace, svc, cfg, q.Revision)
	}
}
