package autoscaler

import (
	"math"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// WindowStats are the averages of one revision's samples over one window.
type WindowStats struct {
	// Concurrency is the average number of in-flight requests.
	Concurrency float64
	// RPS is the average number of requests that arrived per second.
	RPS float64
}

// defaultHistory is how many seconds a revision's history holds until a
// longer window is asked for: Knative's default stable window.
const defaultHistory = 60

// maxHistory bounds a revision's history: Knative's longest window.
const maxHistory = 3600

// avgPrecision is the number of decimal places the averages keep, as
// Knative's buckets do: it keeps float noise from adding an instance.
const avgPrecision = 1e6

// Collector keeps per-second samples of each revision and averages them over
// the stable and the panic window.
//
// The router reports, for every revision that has instances or requests,
// once a second: the time-weighted average number of requests in flight
// during that second (requests waiting for an instance included) and the
// number of requests that arrived in it. Several reports for the same second
// add up, so the router may equally report per instance.
//
// The average over a window of W seconds is the plain mean of the last W
// one-second buckets, as Knative's default (linear) aggregation: seconds
// without a report count as zero, except that the average ends at the last
// reported second while that is at most two seconds old (so a report still on
// its way does not count as an idle second), and it starts no earlier than
// the first report after a silence longer than the history (so a revision
// woken from zero is judged on its new traffic, not diluted by a window of
// nothing).
//
// A Collector is safe for concurrent use. Record and Poke do not allocate
// once a revision has a history.
type Collector struct {
	clk clock.PassiveClock

	mu     sync.Mutex
	series map[string]*series
}

// series is one revision's history: a ring of one-second buckets indexed by
// the Unix second modulo its length; each bucket carries its second, so
// stale buckets are recognised without clearing them.
type series struct {
	ring    []bucket
	written bool
	first   int64 // first second of the current run of reports
	last    int64 // latest second reported
}

type bucket struct {
	sec         int64
	concurrency float64
	requests    float64
	poked       float64 // the most requests that waited for a revision without instances in this second
}

// NewCollector returns an empty Collector that reads the time from clk.
func NewCollector(clk clock.PassiveClock) *Collector {
	return &Collector{clk: clk, series: map[string]*series{}}
}

// maxSkew is how far ahead of the collector's clock a sample may be: one
// from further in the future would make every later sample look stale.
const maxSkew = 5 * time.Second

// Record adds one second's sample of revision rev: concurrency is the
// time-weighted average of in-flight requests during the second that starts
// at (or contains) at, requests the number that arrived in it. Negative or
// non-finite values count as zero; samples older than the history, or more
// than a few seconds ahead of the collector's clock, are dropped.
func (c *Collector) Record(rev string, at time.Time, concurrency, requests float64) {
	if at.Sub(c.clk.Now()) > maxSkew {
		return
	}
	c.mu.Lock()
	if b := c.bucketLocked(rev, at.Unix()); b != nil {
		b.concurrency += clean(concurrency)
		b.requests += clean(requests)
	}
	c.mu.Unlock()
}

// Poke records that a request for rev arrived at at while rev had no ready
// instance: PokeN with one request waiting.
func (c *Collector) Poke(rev string, at time.Time) { c.PokeN(rev, at, 1) }

// PokeN records that waiting requests for rev waited at at while rev had no
// ready instance (less than one counts as one). Until the router's own
// sample for that second says more, the second counts as that many
// requests in flight and arrivals: enough for any window average to be
// non-zero, so a decision taken right away scales from zero. It never
// double counts: a poked second is max(sample, the most waiting poked in
// it), not a sum.
func (c *Collector) PokeN(rev string, at time.Time, waiting int) {
	w := float64(max(waiting, 1))
	c.mu.Lock()
	if b := c.bucketLocked(rev, at.Unix()); b != nil {
		b.poked = max(b.poked, w)
	}
	c.mu.Unlock()
}

// bucketLocked returns rev's bucket for second sec, creating the series or
// resetting a stale bucket as needed; nil if sec is older than the history.
func (c *Collector) bucketLocked(rev string, sec int64) *bucket {
	s := c.series[rev]
	if s == nil {
		s = &series{ring: make([]bucket, defaultHistory)}
		c.series[rev] = s
	}
	n := int64(len(s.ring))
	switch {
	case !s.written || sec-s.last > n:
		// First report, or the first after a silence longer than the
		// history: a new run starts here.
		s.written, s.first, s.last = true, sec, sec
	case sec <= s.last-n:
		return nil
	case sec > s.last:
		s.last = sec
	case sec < s.first:
		s.first = sec
	}
	b := &s.ring[mod(sec, n)]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	return b
}

// Windows returns rev's averages over its stable and its panic window, as of
// the collector clock's now. Windows are whole seconds (rounded up), from one
// second to an hour; asking for a window longer than the history grows it
// (the history then fills over time).
func (c *Collector) Windows(rev string, stable, panic time.Duration) (WindowStats, WindowStats) {
	sw, pw := windowSeconds(stable), windowSeconds(panic)
	now := c.clk.Now().Unix()

	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.series[rev]
	if s == nil || !s.written {
		return WindowStats{}, WindowStats{}
	}
	if int(sw) > len(s.ring) || int(pw) > len(s.ring) {
		s.grow(int(max(sw, pw)))
	}
	end := max(s.last, now-2)
	return s.average(end, sw), s.average(end, pw)
}

// average is the mean over the w seconds that end at end (inclusive), not
// counting seconds before the current run started.
func (s *series) average(end, w int64) WindowStats {
	start := max(end-w+1, s.first)
	if start > end {
		return WindowStats{}
	}
	n := int64(len(s.ring))
	var conc, reqs float64
	for sec := start; sec <= end; sec++ {
		b := &s.ring[mod(sec, n)]
		if b.sec != sec {
			continue
		}
		cc, rq := b.concurrency, b.requests
		cc, rq = max(cc, b.poked), max(rq, b.poked)
		conc += cc
		reqs += rq
	}
	secs := float64(end - start + 1)
	return WindowStats{Concurrency: round(conc / secs), RPS: round(reqs / secs)}
}

// grow resizes the ring to n seconds, keeping the buckets it holds.
func (s *series) grow(n int) {
	old := s.ring
	s.ring = make([]bucket, n)
	for _, b := range old {
		// Every bucket holds true data for its own second; where two land
		// on one slot, the newer wins.
		if dst := &s.ring[mod(b.sec, int64(n))]; b.sec >= dst.sec {
			*dst = b
		}
	}
}

// Forget drops rev's history.
func (c *Collector) Forget(rev string) {
	c.mu.Lock()
	delete(c.series, rev)
	c.mu.Unlock()
}

// windowSeconds is w in whole seconds, rounded up, within [1, maxHistory].
func windowSeconds(w time.Duration) int64 {
	switch {
	case w <= time.Second:
		return 1
	case w >= maxHistory*time.Second:
		return maxHistory
	}
	return int64((w + time.Second - 1) / time.Second)
}

func mod(a, n int64) int64 {
	m := a % n
	if m < 0 {
		m += n
	}
	return m
}

// clean turns negative, NaN and infinite samples into zero.
func clean(f float64) float64 {
	if !(f > 0) || math.IsInf(f, 1) {
		return 0
	}
	return f
}

// round truncates f to avgPrecision, as Knative's buckets do.
func round(f float64) float64 {
	return math.Floor(f*avgPrecision) / avgPrecision
}
