package autoscaler

import (
	"math"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
	"knative.dev/serving/pkg/apis/autoscaling"
)

// FuzzSpecFor feeds arbitrary annotation values to SpecFor and the resulting
// Spec to a Decider: SpecFor never panics and always returns a usable Spec
// within Knative's bounds, and every decision respects max-scale, and
// min-scale while the revision is reachable.
func FuzzSpecFor(f *testing.F) {
	f.Add("1", "10", "3", "70", "80", "concurrency", "60s", "10", "200", "0s", "2", "0s", int64(0), 350.0, uint16(1), false)
	f.Add("0", "0", "0", "0.01", "100", "rps", "6s", "1", "110", "1h", "5", "1h", int64(1), 1e9, uint16(0), true)
	f.Add("-1", "x", "", "NaN", "-Inf", "cpu", "1ns", "1e400", "0x10", "-1s", "1", "2h", int64(-5), math.Inf(1), uint16(65535), false)
	f.Add("5", "3", "9", "1e308", "1", "", "3600s", "100", "1000", "1.5s", "99", "1m", int64(1000), -3.0, uint16(7), false)
	f.Fuzz(func(t *testing.T, minS, maxS, initS, target, util, metric, window, panicPct, threshold, sdd, act, retention string,
		cc int64, load float64, ready uint16, unreachable bool) {
		ann := map[string]string{
			autoscaling.MinScaleAnnotationKey:                 minS,
			autoscaling.MaxScaleAnnotationKey:                 maxS,
			autoscaling.InitialScaleAnnotationKey:             initS,
			autoscaling.TargetAnnotationKey:                   target,
			autoscaling.TargetUtilizationPercentageKey:        util,
			autoscaling.MetricAnnotationKey:                   metric,
			autoscaling.WindowAnnotationKey:                   window,
			autoscaling.PanicWindowPercentageAnnotationKey:    panicPct,
			autoscaling.PanicThresholdPercentageAnnotationKey: threshold,
			autoscaling.ScaleDownDelayAnnotationKey:           sdd,
			autoscaling.ActivationScaleKey:                    act,
			autoscaling.ScaleToZeroPodRetentionPeriodKey:      retention,
		}
		s, _ := SpecFor(nil, ann, cc)
		checkSpec(t, s)
		if n := s.Normalize(); n != s {
			t.Fatalf("Normalize changed a SpecFor spec:\n%+v\n%+v", s, n)
		}

		clk := testingclock.NewFakePassiveClock(t0)
		d := NewDecider(s, clk)
		r := int32(ready)
		for i := range 80 {
			clk.SetTime(clk.Now().Add(time.Second * time.Duration(1+i%7)))
			// A load that rises, bursts and stops.
			l := load
			switch {
			case i%20 == 3:
				l = load * 10
			case i > 50:
				l = 0
			}
			w := WindowStats{Concurrency: l, RPS: l}
			got := d.Decide(Input{Stable: w, Panic: w, Ready: r, Unreachable: unreachable})
			if got.Desired < 0 {
				t.Fatalf("step %d: desired %d", i, got.Desired)
			}
			if s.MaxScale > 0 && got.Desired > s.MaxScale {
				t.Fatalf("step %d: desired %d above max-scale %d (%s)", i, got.Desired, s.MaxScale, got.Reason)
			}
			if !unreachable && got.Desired < s.MinScale {
				t.Fatalf("step %d: desired %d below min-scale %d (%s)", i, got.Desired, s.MinScale, got.Reason)
			}
			if got.Reason == "" {
				t.Fatalf("step %d: no reason", i)
			}
			r = got.Desired
		}
	})
}

// checkSpec fails unless s is within the bounds Knative's validation allows.
func checkSpec(t *testing.T, s Spec) {
	t.Helper()
	switch {
	case s.Metric != MetricConcurrency && s.Metric != MetricRPS:
		t.Fatalf("metric %q", s.Metric)
	case !(s.Target >= autoscaling.TargetMin) || math.IsInf(s.Target, 0) || s.Total < s.Target || math.IsInf(s.Total, 0):
		t.Fatalf("target %v total %v", s.Target, s.Total)
	case s.StableWindow < autoscaling.WindowMin || s.StableWindow > autoscaling.WindowMax:
		t.Fatalf("stable window %v", s.StableWindow)
	case s.PanicWindow < time.Second || s.PanicWindow > s.StableWindow:
		t.Fatalf("panic window %v", s.PanicWindow)
	case s.PanicThreshold < 1.1 || s.PanicThreshold > 10:
		t.Fatalf("panic threshold %v", s.PanicThreshold)
	case !(s.MaxScaleUpRate > 1) || !(s.MaxScaleDownRate > 1):
		t.Fatalf("rates %v %v", s.MaxScaleUpRate, s.MaxScaleDownRate)
	case s.ScaleDownDelay < 0 || s.ScaleDownDelay > autoscaling.WindowMax:
		t.Fatalf("scale-down-delay %v", s.ScaleDownDelay)
	case s.ScaleToZeroPodRetention < 0 || s.ScaleToZeroPodRetention > autoscaling.WindowMax || s.ScaleToZeroGracePeriod <= 0:
		t.Fatalf("retention %v grace %v", s.ScaleToZeroPodRetention, s.ScaleToZeroGracePeriod)
	case s.MinScale < 0 || s.MaxScale < 0 || (s.MaxScale > 0 && s.MinScale > s.MaxScale):
		t.Fatalf("min %d max %d", s.MinScale, s.MaxScale)
	case s.InitialScale < 1:
		t.Fatalf("initial scale %d without allow-zero-initial-scale", s.InitialScale)
	case s.ActivationScale != 0 && (s.ActivationScale < 2 || s.ActivationScale < s.MinScale ||
		(s.MaxScale > 0 && s.ActivationScale > s.MaxScale)):
		t.Fatalf("activation scale %d (min %d, max %d)", s.ActivationScale, s.MinScale, s.MaxScale)
	}
}

// FuzzCollector replays arbitrary reports, pokes and clock moves: the
// collector never panics and its averages are never negative or NaN, and
// never above the sum of all samples (a poke counting one).
func FuzzCollector(f *testing.F) {
	f.Add([]byte{0, 10, 1, 1, 2, 3, 0, 200, 3, 90})
	f.Add([]byte{3, 255, 0, 1, 0, 2, 2, 2, 1, 0, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clk := testingclock.NewFakePassiveClock(t0)
		c := NewCollector(clk)
		total := 0.0
		for i := 0; i+1 < len(ops); i += 2 {
			arg := ops[i+1]
			switch ops[i] % 4 {
			case 0: // a report for a second around now
				at := clk.Now().Add(time.Duration(int(arg%16)-10) * time.Second)
				v := float64(arg) * 1.5
				c.Record("r", at, v, v/2)
				total += v
			case 1:
				c.Poke("r", clk.Now())
				total++
			case 2:
				clk.SetTime(clk.Now().Add(time.Duration(arg) * time.Second))
			case 3:
				w := time.Duration(arg) * time.Second * 10
				s, p := c.Windows("r", w, w/10)
				for _, v := range []float64{s.Concurrency, s.RPS, p.Concurrency, p.RPS} {
					if !(v >= 0) || v > total+1e-9 {
						t.Fatalf("op %d: average %v (all samples: %v)", i, v, total)
					}
				}
			}
		}
	})
}
