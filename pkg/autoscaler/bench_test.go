package autoscaler

import (
	"strconv"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// BenchmarkDecide is one tick's decision for one revision, with and without
// a scale-down delay window to maintain.
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name string
		ann  map[string]string
	}{
		{"default", nil},
		{"scale-down-delay", map[string]string{as + "scale-down-delay": "5m"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clk := testingclock.NewFakePassiveClock(t0)
			d := NewDecider(mustSpec(b, nil, bc.ann, 0), clk)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				clk.SetTime(t0.Add(time.Duration(i) * DefaultTick))
				load := float64(300 + 100*(i%7))
				d.Decide(Input{
					Stable: WindowStats{Concurrency: load},
					Panic:  WindowStats{Concurrency: load * 1.1},
					Ready:  int32(5 + i%3),
				})
			}
		})
	}
}

// BenchmarkRecord is the router's per-second report for one revision among many.
func BenchmarkRecord(b *testing.B) {
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)
	revs := make([]string, 100)
	for i := range revs {
		revs[i] = "ns/rev-" + strconv.Itoa(i)
		c.Record(revs[i], t0, 1, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		at := t0.Add(time.Duration(i/len(revs)) * time.Second)
		if i%len(revs) == 0 {
			clk.SetTime(at)
		}
		c.Record(revs[i%len(revs)], at, 12.5, 3)
	}
}

// BenchmarkWindows is the collector's part of a decision: both averages.
func BenchmarkWindows(b *testing.B) {
	clk := testingclock.NewFakePassiveClock(t0)
	c := NewCollector(clk)
	feed(clk, c, "r", 120, 10, 2)
	b.ReportAllocs()
	for b.Loop() {
		c.Windows("r", stableW, panicW)
	}
}

// BenchmarkTick decides 100 revisions, as one tick of the Autoscaler does.
func BenchmarkTick(b *testing.B) {
	clk := testingclock.NewFakeClock(t0)
	a := New(Options{Clock: clk})
	spec := mustSpec(b, nil, nil, 0)
	for i := range 100 {
		rev := "ns/rev-" + strconv.Itoa(i)
		a.Upsert(rev, spec, true)
		for s := range 60 {
			a.Record(rev, t0.Add(time.Duration(s)*time.Second), float64(i), 1)
		}
	}
	clk.SetTime(t0.Add(time.Minute))
	b.ReportAllocs()
	for b.Loop() {
		a.Tick()
	}
}
