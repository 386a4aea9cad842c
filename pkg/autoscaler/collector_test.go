package autoscaler

import (
	"math"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

const (
	stableW = 60 * time.Second
	panicW  = 6 * time.Second
)

// feed records one sample per second for n seconds starting at the clock's
// now, the way the router does (the second's sample is reported as it ends),
// and leaves the clock at the end.
func feed(clk *testingclock.FakePassiveClock, c *Collector, rev string, n int, conc, reqs float64) {
	for range n {
		at := clk.Now()
		clk.SetTime(at.Add(time.Second))
		c.Record(rev, at, conc, reqs)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestCollectorAverages(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)

	if s, p := c.Windows("r", stableW, panicW); s != (WindowStats{}) || p != (WindowStats{}) {
		t.Errorf("no data: %+v %+v", s, p)
	}

	// A fresh revision is judged on the seconds it has, not diluted by a
	// window of nothing: one second of 10 in flight averages 10.
	feed(clk, c, "r", 1, 10, 4)
	if s, p := c.Windows("r", stableW, panicW); s.Concurrency != 10 || p.Concurrency != 10 || s.RPS != 4 {
		t.Errorf("after 1s: %+v %+v", s, p)
	}

	// 60 seconds of 350: both windows say 350.
	feed(clk, c, "r", 60, 350, 100)
	s, p := c.Windows("r", stableW, panicW)
	if s.Concurrency != 350 || p.Concurrency != 350 || s.RPS != 100 || p.RPS != 100 {
		t.Errorf("steady: %+v %+v", s, p)
	}

	// 6 seconds of 50: the panic window follows at once, the stable one slowly.
	feed(clk, c, "r", 6, 50, 10)
	s, p = c.Windows("r", stableW, panicW)
	if p.Concurrency != 50 || !near(s.Concurrency, (54*350+6*50)/60.0) {
		t.Errorf("after a drop: %+v %+v", s, p)
	}

	// The router stops reporting (no instances, no requests): after two
	// seconds of slack the missing seconds count as zero.
	clk.SetTime(clk.Now().Add(time.Second))
	if _, p := c.Windows("r", stableW, panicW); p.Concurrency != 50 {
		t.Errorf("a report late by a second counted as idle: %+v", p)
	}
	clk.SetTime(clk.Now().Add(2 * time.Second))
	if _, p := c.Windows("r", stableW, panicW); !near(p.Concurrency, 4*50/6.0) {
		t.Errorf("3s without reports: panic %+v, want %v", p, 4*50/6.0)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if s, p := c.Windows("r", stableW, panicW); s != (WindowStats{}) || p != (WindowStats{}) {
		t.Errorf("a window without reports: %+v %+v", s, p)
	}
}

func TestCollectorSameSecondAddsUp(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)
	// Per-instance reports for the same second add up.
	c.Record("r", t0, 2, 1)
	c.Record("r", t0.Add(500*time.Millisecond), 3, 2)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 5 || s.RPS != 3 {
		t.Errorf("same second: %+v", s)
	}
	// Garbage counts as nothing.
	c.Record("r", t0, math.NaN(), math.Inf(1))
	c.Record("r", t0, -4, -1)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 5 || s.RPS != 3 {
		t.Errorf("after garbage: %+v", s)
	}
	// From the future: dropped, and later samples still count.
	c.Record("r", t0.Add(time.Hour), 100, 100)
	c.Record("r", t0.Add(time.Second), 1, 1)
	clk.SetTime(t0.Add(time.Second))
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 3 || s.RPS != 2 {
		t.Errorf("after a sample from the future: %+v", s)
	}
	// Too old for the history: dropped.
	c.Record("r", t0.Add(-2*time.Minute), 100, 100)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 3 {
		t.Errorf("after a stale sample: %+v", s)
	}
}

func TestCollectorPoke(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)

	// Idle for long, then a request for a revision without instances: the
	// second counts as one in flight, at once.
	feed(clk, c, "r", 5, 0, 0)
	clk.SetTime(clk.Now().Add(5 * time.Minute))
	c.Poke("r", clk.Now())
	s, p := c.Windows("r", stableW, panicW)
	if s.Concurrency != 1 || p.Concurrency != 1 || s.RPS != 1 {
		t.Errorf("poked: %+v %+v", s, p)
	}
	// The router's own sample for that second does not double count it...
	c.Record("r", clk.Now(), 0.4, 1)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 1 || s.RPS != 1 {
		t.Errorf("poked and recorded low: %+v", s)
	}
	// ...and wins when it says more.
	c.Record("r", clk.Now(), 2.6, 2)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 3 || s.RPS != 3 {
		t.Errorf("poked and recorded high: %+v", s)
	}

	// A poke for a revision never seen starts its history.
	c.Poke("new", clk.Now())
	if s, _ := c.Windows("new", stableW, panicW); s.Concurrency != 1 {
		t.Errorf("poke of a new revision: %+v", s)
	}
}

// PokeN counts the most requests waiting in a second, never a sum of pokes.
func TestCollectorPokeN(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)
	c.PokeN("r", clk.Now(), 3)
	c.PokeN("r", clk.Now(), 7)
	c.PokeN("r", clk.Now(), 2)
	c.PokeN("r", clk.Now(), -5) // counts as one
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 7 || s.RPS != 7 {
		t.Errorf("poked 3, 7, 2, -5: %+v", s)
	}
	c.Record("r", clk.Now(), 9, 9)
	if s, _ := c.Windows("r", stableW, panicW); s.Concurrency != 9 || s.RPS != 9 {
		t.Errorf("poked 7 and recorded 9: %+v", s)
	}
}

func TestCollectorWindowsGrowAndForget(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)
	feed(clk, c, "r", 60, 10, 1)
	// Asking for a 2-minute window grows the history and keeps what it has.
	s, _ := c.Windows("r", 2*time.Minute, panicW)
	if s.Concurrency != 10 {
		t.Errorf("grown: %+v", s)
	}
	feed(clk, c, "r", 60, 20, 1)
	s, _ = c.Windows("r", 2*time.Minute, panicW)
	if !near(s.Concurrency, 15) {
		t.Errorf("two minutes: %+v, want 15", s)
	}
	// Windows are whole seconds and at least one.
	if _, p := c.Windows("r", 2*time.Minute, 0); p.Concurrency != 20 {
		t.Errorf("zero panic window: %+v", p)
	}
	if s, _ := c.Windows("r", 100*time.Hour, time.Hour); !near(s.Concurrency, 15) {
		t.Errorf("huge window: %+v", s)
	}
	c.Forget("r")
	if s, _ := c.Windows("r", stableW, panicW); s != (WindowStats{}) {
		t.Errorf("forgotten: %+v", s)
	}
}
