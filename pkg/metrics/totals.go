package metrics

import (
	"fmt"

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
	// LatencyBounds, the last being +Inf.
	Latency []uint64
	// Instances is autoscaler_actual_pods; -1 when the autoscaler has no
	// decision for the revision.
	Instances float64
}

// LatencyBounds are the upper bounds (milliseconds) of the latency
// buckets of RevisionTotals, +Inf excluded.
func LatencyBounds() []float64 { return append([]float64(nil), latencyBuckets...) }

// Totals gathers the registry and returns each revision's totals.
func (m *Metrics) Totals() ([]RevisionTotals, error) {
	mfs, err := m.reg.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	type key struct{ ns, rev string }
	byRev := map[key]*RevisionTotals{}
	get := func(lps []*dto.LabelPair) *RevisionTotals {
		var k key
		for _, lp := range lps {
			switch lp.GetName() {
			case labelNamespace:
				k.ns = lp.GetValue()
			case labelRevision:
				k.rev = lp.GetValue()
			}
		}
		if k.rev == "" {
			return nil
		}
		t := byRev[k]
		if t == nil {
			t = &RevisionTotals{Namespace: k.ns, Revision: k.rev, Instances: -1, Latency: make([]uint64, len(latencyBuckets)+1)}
			byRev[k] = t
		}
		return t
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "revision_request_count":
			for _, mt := range mf.GetMetric() {
				if t := get(mt.GetLabel()); t != nil {
					t.Requests += mt.GetCounter().GetValue()
				}
			}
		case "revision_request_latencies":
			for _, mt := range mf.GetMetric() {
				t := get(mt.GetLabel())
				if t == nil {
					continue
				}
				h := mt.GetHistogram()
				for i, b := range h.GetBucket() {
					if i < len(latencyBuckets) {
						t.Latency[i] += b.GetCumulativeCount()
					}
				}
				t.Latency[len(latencyBuckets)] += h.GetSampleCount()
			}
		case "autoscaler_actual_pods":
			for _, mt := range mf.GetMetric() {
				if t := get(mt.GetLabel()); t != nil {
					t.Instances = mt.GetGauge().GetValue()
				}
			}
		}
	}
	out := make([]RevisionTotals, 0, len(byRev))
	for _, t := range byRev {
		out = append(out, *t)
	}
	return out, nil
}
