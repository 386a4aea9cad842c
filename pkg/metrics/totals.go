package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RevisionTotals are one revision's request and instance metrics at one
// moment, as a scrape of /metrics would read them: what the console
// samples for its graphs.
type RevisionTotals struct {
	Namespace, Revision string
	// Requests is revision_request_count summed over the response codes.
	Requests float64
	// Latency is revision_request_latencies (milliseconds) summed over the
	// response codes: cumulative counts by upper bound, in the order of
	// LatencyBounds, the last being +Inf; nil when the revision has served
	// no request.
	Latency []uint64
	// Instances is autoscaler_actual_pods; -1 when the autoscaler has no
	// decision for the revision.
	Instances float64
}

// LatencyBounds are the upper bounds (milliseconds) of the latency
// buckets of RevisionTotals, +Inf excluded.
func LatencyBounds() []float64 { return append([]float64(nil), latencyBuckets...) }

// Totals returns each revision's totals. It reads the two request series
// and the autoscaler's decisions directly, not by gathering the registry:
// the console samples every few seconds, and a gather builds every
// revision's autoscaler gauges and every other collector's series (some
// 5 KiB per idle revision per sample, nearly all that a server at rest
// allocated).
func (m *Metrics) Totals() ([]RevisionTotals, error) {
	type key struct{ ns, rev string }
	byRev := map[key]*RevisionTotals{}
	get := func(k key) *RevisionTotals {
		t := byRev[k]
		if t == nil {
			t = &RevisionTotals{Namespace: k.ns, Revision: k.rev, Instances: -1}
			byRev[k] = t
		}
		return t
	}
	var errs []error
	each := func(c prometheus.Collector, f func(*RevisionTotals, *dto.Metric)) {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for mt := range ch {
			var d dto.Metric
			if err := mt.Write(&d); err != nil {
				errs = append(errs, err)
				continue
			}
			var k key
			for _, lp := range d.GetLabel() {
				switch lp.GetName() {
				case labelNamespace:
					k.ns = lp.GetValue()
				case labelRevision:
					k.rev = lp.GetValue()
				}
			}
			if k.rev != "" {
				f(get(k), &d)
			}
		}
	}
	each(m.requests, func(t *RevisionTotals, d *dto.Metric) { t.Requests += d.GetCounter().GetValue() })
	each(m.latencies, func(t *RevisionTotals, d *dto.Metric) {
		h := d.GetHistogram()
		if t.Latency == nil {
			t.Latency = make([]uint64, len(latencyBuckets)+1)
		}
		for i, b := range h.GetBucket() {
			if i < len(latencyBuckets) {
				t.Latency[i] += b.GetCumulativeCount()
			}
		}
		t.Latency[len(latencyBuckets)] += h.GetSampleCount()
	})
	if scale := m.scale.Load(); scale != nil {
		for _, s := range (*scale)() {
			get(key{s.Namespace, s.Revision}).Instances = float64(s.Actual)
		}
	}
	out := make([]RevisionTotals, 0, len(byRev))
	for _, t := range byRev {
		out = append(out, *t)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("read the request metrics: %w", errors.Join(errs...))
	}
	return out, nil
}
