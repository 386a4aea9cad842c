package console

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Totals are one revision's request and instance metrics at one moment,
// as a scrape of /metrics reads them (package metrics' RevisionTotals).
type Totals struct {
	Namespace, Revision string
	// Requests is revision_request_count summed over the response codes.
	Requests float64
	// Latency are the cumulative counts of revision_request_latencies by
	// upper bound (Options.LatencyBounds, then +Inf); empty when the
	// revision has served no request.
	Latency []uint64
	// Instances is autoscaler_actual_pods; -1: unknown.
	Instances float64
}

// Point is one sample of a revision's graphs. The graphs place points by
// their order (one per sample interval), so a point has no time.
type Point struct {
	Instances float64 // -1: unknown
	Rate      float64 // requests per second since the previous sample
	P50, P95  float64 // latency in milliseconds since the previous sample; NaN: no request
}

// point is a Point as a ring keeps it, in 16 bytes rather than 56 with
// its time: every revision keeps Samples of them, idle or not (120 each,
// 500 idle revisions: 1 MiB rather than 4). float32 holds more
// precision than a graph 300 pixels wide and a value shown with a few
// digits use, and NaN.
type point struct{ instances, rate, p50, p95 float32 }

func (p point) Point() Point {
	return Point{Instances: float64(p.instances), Rate: float64(p.rate), P50: float64(p.p50), P95: float64(p.p95)}
}

// ring keeps the last points of one revision, and the totals of the last
// sample to difference the next against.
type ring struct {
	points []point // oldest first, at most Samples
	last   Totals
	at     time.Time
	seen   uint64 // the sampling round that last saw the revision
}

// sampler samples the metrics every interval into a bounded ring per
// revision. Revisions that leave the metrics leave the sampler.
type sampler struct {
	totals   func() ([]Totals, error)
	bounds   []float64
	samples  int
	interval time.Duration

	mu    sync.Mutex
	rings map[revKey]*ring
	round uint64
}

func newSampler(totals func() ([]Totals, error), bounds []float64, interval time.Duration, samples int) *sampler {
	return &sampler{totals: totals, bounds: bounds, samples: samples, interval: interval, rings: map[revKey]*ring{}}
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample takes one sample of every revision.
func (s *sampler) sample(now time.Time) {
	if s.totals == nil {
		return
	}
	ts, err := s.totals()
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.round++
	for _, t := range ts {
		k := revKey{t.Namespace, t.Revision}
		r := s.rings[k]
		if r == nil {
			r = &ring{}
			s.rings[k] = r
		}
		r.seen = s.round
		p := Point{Instances: t.Instances, P50: math.NaN(), P95: math.NaN()}
		if !r.at.IsZero() {
			if dt := now.Sub(r.at).Seconds(); dt > 0 && t.Requests >= r.last.Requests {
				p.Rate = (t.Requests - r.last.Requests) / dt
			}
			if len(t.Latency) > 0 && len(r.last.Latency) == len(t.Latency) {
				d := make([]uint64, len(t.Latency))
				for i := range d {
					if t.Latency[i] >= r.last.Latency[i] {
						d[i] = t.Latency[i] - r.last.Latency[i]
					}
				}
				p.P50, p.P95 = quantile(0.5, s.bounds, d), quantile(0.95, s.bounds, d)
			}
		}
		r.last, r.at = t, now
		if len(r.points) == s.samples {
			copy(r.points, r.points[1:])
			r.points = r.points[:len(r.points)-1]
		}
		r.points = append(r.points, point{instances: float32(p.Instances), rate: float32(p.Rate), p50: float32(p.P50), p95: float32(p.P95)})
	}
	for k, r := range s.rings {
		if r.seen != s.round {
			delete(s.rings, k)
		}
	}
}

// revKey names a revision: namespace, name.
type revKey struct{ namespace, revision string }

// series returns a copy of a revision's points, oldest first.
func (s *sampler) series(namespace, revision string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rings[revKey{namespace, revision}]
	if r == nil {
		return nil
	}
	out := make([]Point, len(r.points))
	for i, p := range r.points {
		out[i] = p.Point()
	}
	return out
}

// quantile estimates the q-quantile from cumulative bucket counts (the
// last one +Inf) by linear interpolation within the bucket, as
// Prometheus' histogram_quantile does; NaN when there are no counts.
func quantile(q float64, bounds []float64, cum []uint64) float64 {
	if len(cum) == 0 || len(cum) != len(bounds)+1 {
		return math.NaN()
	}
	total := cum[len(cum)-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	for i, c := range cum {
		if float64(c) < rank {
			continue
		}
		if i == len(bounds) {
			return bounds[len(bounds)-1] // in +Inf: the highest finite bound
		}
		lo, prev := 0.0, uint64(0)
		if i > 0 {
			lo, prev = bounds[i-1], cum[i-1]
		}
		in := c - prev
		if in == 0 {
			return bounds[i]
		}
		return lo + (bounds[i]-lo)*(rank-float64(prev))/float64(in)
	}
	return bounds[len(bounds)-1]
}

// Graph is one series drawn as an SVG polyline in a W x H box.
type Graph struct {
	Title, Unit string
	Name        string // the series' name, for the page's tests and styles
	Points      string // the polyline's points
	Count       int    // samples drawn
	Max         float64
	Last        string // the latest value, formatted
}

const graphW, graphH = 300.0, 80.0

// graph draws f of points; NaN values are left out.
func graph(name, title, unit string, points []Point, f func(Point) float64) Graph {
	g := Graph{Name: name, Title: title, Unit: unit}
	if len(points) == 0 {
		return g
	}
	for _, p := range points {
		if v := f(p); !math.IsNaN(v) && v > g.Max {
			g.Max = v
		}
	}
	top := g.Max
	if top <= 0 {
		top = 1
	}
	var b strings.Builder
	last := math.NaN()
	for i, p := range points {
		v := f(p)
		if math.IsNaN(v) || v < 0 {
			continue
		}
		x := graphW
		if len(points) > 1 {
			x = float64(i) * graphW / float64(len(points)-1)
		}
		y := graphH - v/top*(graphH-4) - 2
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64))
		g.Count++
		last = v
	}
	g.Points = b.String()
	if !math.IsNaN(last) {
		g.Last = format(last) + " " + unit
	} else {
		g.Last = "–"
	}
	return g
}

func format(v float64) string {
	switch {
	case v == math.Trunc(v) && v < 1e6:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// graphs are a revision's four graphs.
func graphs(points []Point) []Graph {
	return []Graph{
		graph("instances", "Instances", "", points, func(p Point) float64 { return p.Instances }),
		graph("rate", "Requests", "req/s", points, func(p Point) float64 { return p.Rate }),
		graph("p50", "Latency p50", "ms", points, func(p Point) float64 { return p.P50 }),
		graph("p95", "Latency p95", "ms", points, func(p Point) float64 { return p.P95 }),
	}
}
