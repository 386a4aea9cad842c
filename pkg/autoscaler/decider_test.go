package autoscaler

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

// step is one decision: advance the clock, then decide on the given averages.
type step struct {
	after         time.Duration
	stable, panic float64 // of the spec's metric; panic < 0 means "same as stable"
	ready         int32
	unreachable   bool

	want       int32
	wantPanic  bool
	wantReason Reason // checked when set
	wantActive *bool  // checked when set
}

func stats(metric string, v float64) WindowStats {
	if metric == MetricRPS {
		return WindowStats{RPS: v}
	}
	return WindowStats{Concurrency: v}
}

func runSteps(t *testing.T, d *Decider, clk *testingclock.FakePassiveClock, steps []step) {
	t.Helper()
	metric := d.Spec().Metric
	for i, st := range steps {
		clk.SetTime(clk.Now().Add(st.after))
		p := st.panic
		if p < 0 {
			p = st.stable
		}
		got := d.Decide(Input{
			Stable:      stats(metric, st.stable),
			Panic:       stats(metric, p),
			Ready:       st.ready,
			Unreachable: st.unreachable,
		})
		at := clk.Now().Sub(t0)
		if got.Desired != st.want || got.Panic != st.wantPanic {
			t.Errorf("step %d (t=%v, stable=%v, panic=%v, ready=%d): desired=%d panic=%v (%s), want desired=%d panic=%v",
				i, at, st.stable, p, st.ready, got.Desired, got.Panic, got.Reason, st.want, st.wantPanic)
		}
		if st.wantReason != "" && got.Reason != st.wantReason {
			t.Errorf("step %d (t=%v): reason %q, want %q", i, at, got.Reason, st.wantReason)
		}
		if st.wantActive != nil && got.Active != *st.wantActive {
			t.Errorf("step %d (t=%v): active=%v, want %v", i, at, got.Active, *st.wantActive)
		}
	}
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

// TestDecider runs Knative's documented cases (the KPA's decider and
// scaler tests and the autoscaling docs) against the Decider, step by step
// on a fake clock. Unless a case says otherwise the Spec is Knative's default
// one: target 100 × 70% = 70 concurrent requests, stable window 60s, panic
// threshold 200%, scale-up rate 1000, scale-down rate 2, grace period 30s.
func TestDecider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   map[string]string
		ann   map[string]string
		cc    int64
		edit  func(*Spec)
		steps []step
	}{{
		name: "steady load 350 at target 70 is 5 instances",
		steps: []step{
			{stable: 350, panic: -1, ready: 5, want: 5, wantReason: ReasonStable},
			{after: 2 * time.Second, stable: 350, panic: -1, ready: 5, want: 5, wantReason: ReasonStable},
		},
	}, {
		name: "stable mode no change and decrease",
		ann:  map[string]string{as + "target": "10", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 50, panic: -1, ready: 1, want: 5, wantPanic: true}, // 5/1 >= 2: panic
			{after: 61 * time.Second, stable: 50, panic: -1, ready: 5, want: 5},
			{after: 2 * time.Second, stable: 30, panic: -1, ready: 5, want: 3},
		},
	}, {
		name: "burst: panic scales up at once and never down while in panic",
		steps: []step{
			{stable: 10, panic: -1, ready: 1, want: 1, wantReason: ReasonStable},
			// The panic window sees 200 in flight: ceil(200/70)=3 >= 2×1 ready.
			{after: 2 * time.Second, stable: 30, panic: 200, ready: 1, want: 3, wantPanic: true, wantReason: ReasonPanic},
			// Demand falls back: still 3, panic mode does not scale down.
			{after: 2 * time.Second, stable: 20, panic: 10, ready: 3, want: 3, wantPanic: true},
			{after: 30 * time.Second, stable: 10, panic: 10, ready: 3, want: 3, wantPanic: true},
			// A stable window after the panic threshold was last crossed: out,
			// and the rate-limited scale down may begin.
			{after: 28 * time.Second, stable: 10, panic: 10, ready: 3, want: 3, wantPanic: true},
			{after: 2 * time.Second, stable: 10, panic: 10, ready: 3, want: 1, wantReason: ReasonStable},
		},
	}, {
		name: "panic uses the stable recommendation when it is larger",
		ann:  map[string]string{as + "target": "1", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 5, panic: 5, ready: 1, want: 5, wantPanic: true},
			{after: 5 * time.Second, stable: 50, panic: 30, ready: 5, want: 50, wantPanic: true},
		},
	}, {
		// Knative's TestAutoscalerUnpanicAfterSlowIncrease.
		name: "leave panic after a stable window without crossing the threshold",
		ann:  map[string]string{as + "target": "1", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 11, panic: 25, ready: 10, want: 25, wantPanic: true},
			{after: 30 * time.Second, stable: 30, panic: 41, ready: 40, want: 41, wantPanic: true},
			{after: 32 * time.Second, stable: 50, panic: 56, ready: 55, want: 50, wantPanic: false},
		},
	}, {
		// Knative's TestAutoscalerExtendPanicWindow: still surging extends panic.
		name: "panic extends while the threshold is crossed",
		ann:  map[string]string{as + "target": "1", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 11, panic: 25, ready: 10, want: 25, wantPanic: true},
			{after: 30 * time.Second, stable: 30, panic: 80, ready: 40, want: 80, wantPanic: true},
			{after: 32 * time.Second, stable: 50, panic: 56, ready: 80, want: 80, wantPanic: true},
			{after: 28 * time.Second, stable: 50, panic: 56, ready: 80, want: 80, wantPanic: true},
			{after: 2 * time.Second, stable: 50, panic: 56, ready: 80, want: 50, wantPanic: false},
		},
	}, {
		// Knative's TestAutoscalerPanicModeExponentialTrackAndStabilize.
		name: "panic tracks exponential growth",
		ann:  map[string]string{as + "target": "1", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 6, panic: 6, ready: 1, want: 6, wantPanic: true},
			{after: time.Second, stable: 36, panic: 36, ready: 6, want: 36, wantPanic: true},
			{after: time.Second, stable: 216, panic: 216, ready: 36, want: 216, wantPanic: true},
			{stable: 1296, panic: 1296, ready: 216, want: 1296, wantPanic: true},
			{after: time.Second, stable: 1296, panic: 1296, ready: 1296, want: 1296, wantPanic: true},
		},
	}, {
		name: "scale-up rate 1000 from one instance",
		steps: []step{
			{stable: 700_000, panic: -1, ready: 1, want: 1000, wantPanic: true},
			{after: 2 * time.Second, stable: 700_000, panic: -1, ready: 1000, want: 10_000, wantPanic: true},
		},
	}, {
		// Knative's TestAutoscalerRateLimitScaleUp.
		name: "scale-up rate 10",
		cfg:  map[string]string{"max-scale-up-rate": "10"},
		ann:  map[string]string{as + "target": "10", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 1000, panic: 1001, ready: 1, want: 10, wantPanic: true},
			{after: 2 * time.Second, stable: 1000, panic: 1001, ready: 10, want: 100, wantPanic: true},
		},
	}, {
		// Knative's "AutoscalerStableModeIncreaseWithSmallScaleUpRate": the
		// rate still lets one more instance in.
		name: "scale-up rate 1.1 still adds an instance",
		cfg:  map[string]string{"max-scale-up-rate": "1.1"},
		ann:  map[string]string{as + "target": "1", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 3, panic: 3.1, ready: 2, want: 3, wantPanic: true},
		},
	}, {
		name: "scale-down rate 2: 10, 5, 2, 1",
		steps: []step{
			{stable: 0, panic: -1, ready: 10, want: 5},
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 5, want: 2},
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 2, want: 1},
			// Active for less than a stable window: one stays.
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 1, want: 1, wantReason: ReasonIdle, wantActive: yes},
		},
	}, {
		// Knative's TestAutoscalerRateLimitScaleDown.
		name: "scale-down rate 10",
		cfg:  map[string]string{"max-scale-down-rate": "10"},
		ann:  map[string]string{as + "target": "10", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 1, panic: 1, ready: 100, want: 10},
			{after: 2 * time.Second, stable: 1, panic: 1, ready: 10, want: 1},
		},
	}, {
		// Knative's "AutoscalerStableModeDecreaseNonReachable".
		name: "unreachable revision scales down without the rate limit",
		cfg:  map[string]string{"max-scale-down-rate": "1.1"},
		ann:  map[string]string{as + "target": "10", as + "target-utilization-percentage": "100"},
		steps: []step{
			{stable: 1, panic: 1, ready: 100, want: 90},
			{after: 2 * time.Second, stable: 1, panic: 1, ready: 100, unreachable: true, want: 1},
		},
	}, {
		name: "min-scale and max-scale clamp",
		ann:  map[string]string{as + "min-scale": "2", as + "max-scale": "4"},
		steps: []step{
			{stable: 0, panic: -1, ready: 1, want: 2, wantReason: ReasonMinScale},
			{after: 2 * time.Second, stable: 700, panic: -1, ready: 2, want: 4, wantPanic: true, wantReason: ReasonMaxScale},
			{after: 2 * time.Second, stable: 700, panic: 70, ready: 4, want: 4, wantPanic: true, wantReason: ReasonMaxScale},
			{after: 61 * time.Second, stable: 0, panic: 0, ready: 4, want: 2, wantReason: ReasonStable},
			{after: 2 * time.Second, stable: 0, panic: 0, ready: 2, want: 2, wantReason: ReasonMinScale, wantActive: yes},
			{after: 5 * time.Minute, stable: 0, panic: 0, ready: 2, want: 2, wantReason: ReasonMinScale, wantActive: yes},
		},
	}, {
		name: "min-scale applies only while reachable",
		ann:  map[string]string{as + "min-scale": "3"},
		steps: []step{
			{stable: 0, panic: -1, ready: 3, want: 3, wantReason: ReasonMinScale},
			{after: 61 * time.Second, stable: 0, panic: -1, ready: 3, want: 3, wantReason: ReasonMinScale},
			// No Route any more: min-scale is ignored; the revision goes inactive
			// and keeps its instances for the grace period (no retention: unreachable).
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 3, unreachable: true, want: 3,
				wantReason: ReasonScaleToZeroGrace, wantActive: no},
			{after: 30 * time.Second, stable: 0, panic: -1, ready: 3, unreachable: true, want: 0,
				wantReason: ReasonNoTraffic, wantActive: no},
		},
	}, {
		name: "max-scale 0 is unlimited",
		ann:  map[string]string{as + "max-scale": "0"},
		steps: []step{
			{stable: 70_000, panic: -1, ready: 500, want: 1000, wantPanic: true},
		},
	}, {
		name: "initial-scale 3 until first reached",
		ann:  map[string]string{as + "initial-scale": "3"},
		steps: []step{
			{stable: 0, panic: -1, ready: 0, want: 3, wantReason: ReasonInitialScale, wantActive: yes},
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 2, want: 3, wantReason: ReasonInitialScale},
			// Reached: from here the usual rules, rate-limited scale down.
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 3, want: 1, wantReason: ReasonStable},
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 1, want: 1, wantReason: ReasonIdle},
		},
	}, {
		name: "initial-scale below min-scale is moot",
		ann:  map[string]string{as + "initial-scale": "2", as + "min-scale": "4"},
		steps: []step{
			{stable: 0, panic: -1, ready: 0, want: 4, wantReason: ReasonMinScale},
		},
	}, {
		name: "initial-scale 0: starts at zero, inactive",
		cfg:  map[string]string{"allow-zero-initial-scale": "true"},
		ann:  map[string]string{as + "initial-scale": "0"},
		steps: []step{
			{stable: 0, panic: -1, ready: 0, want: 0, wantReason: ReasonNoTraffic, wantActive: no},
			{after: 2 * time.Second, stable: 0, panic: -1, ready: 0, want: 0, wantActive: no},
			// The first request.
			{after: 2 * time.Second, stable: 0.1, panic: 1, ready: 0, want: 1, wantActive: yes},
		},
	}, {
		// Knative's TestAutoscalerActivationScale.
		name: "activation-scale 2",
		ann:  map[string]string{as + "activation-scale": "2"},
		steps: []step{
			{stable: 1, panic: 1, ready: 0, want: 2, wantReason: ReasonActivationScale},
			{after: 2 * time.Second, stable: 1, panic: 1, ready: 2, want: 2, wantReason: ReasonActivationScale},
			{after: 2 * time.Second, stable: 200, panic: 200, ready: 2, want: 3},
			{after: 2 * time.Second, stable: 0, panic: 0, ready: 3, want: 1},
		},
	}, {
		name: "scale-down-delay 30s holds the maximum",
		ann:  map[string]string{as + "scale-down-delay": "30s"},
		steps: []step{
			{stable: 350, panic: -1, ready: 5, want: 5},
			{after: 2 * time.Second, stable: 70, panic: -1, ready: 5, want: 5, wantReason: ReasonScaleDownDelay},
			{after: 26 * time.Second, stable: 70, panic: -1, ready: 5, want: 5, wantReason: ReasonScaleDownDelay},
			// 30s after the recommendation of 5: it leaves the window.
			{after: 2 * time.Second, stable: 70, panic: -1, ready: 5, want: 2, wantReason: ReasonStable},
			// Scale up is never delayed.
			{after: 2 * time.Second, stable: 700, panic: 140, ready: 2, want: 10},
		},
	}, {
		// Knative's TestAutoscalerStableModeIncreaseWithRPS and the rps docs.
		name: "rps metric: 200 × 70% per instance",
		ann:  map[string]string{as + "metric": "rps"},
		steps: []step{
			{stable: 700, panic: -1, ready: 5, want: 5},
			{after: 2 * time.Second, stable: 1400, panic: 700, ready: 5, want: 10},
		},
	}, {
		name: "containerConcurrency 1: target 0.7",
		cc:   1,
		steps: []step{
			{stable: 7, panic: -1, ready: 10, want: 10},
			// 7.7/0.7 is 11.000000000000002 in floating point: still 11.
			{after: 2 * time.Second, stable: 7.7, panic: -1, ready: 10, want: 11},
			{after: 2 * time.Second, stable: 7.71, panic: -1, ready: 11, want: 12},
		},
	}, {
		name: "bad annotations fall back to the defaults",
		ann: map[string]string{as + "target": "-5", as + "metric": "memory", as + "min-scale": "x",
			as + "panic-threshold-percentage": "1", as + "window": "1s"},
		steps: []step{
			{stable: 350, panic: -1, ready: 5, want: 5},
		},
	}, {
		name: "scale to zero disabled keeps one",
		cfg:  map[string]string{"enable-scale-to-zero": "false"},
		steps: []step{
			{stable: 0, panic: -1, ready: 1, want: 1},
			{after: 10 * time.Minute, stable: 0, panic: -1, ready: 1, want: 1, wantReason: ReasonScaleToZeroDisabled, wantActive: yes},
		},
	}, {
		name: "negative and NaN-free inputs are clamped",
		steps: []step{
			{stable: -5, panic: -1, ready: -3, want: 1, wantReason: ReasonInitialScale},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := mustConfig(t, tc.cfg)
			spec, _ := SpecFor(cfg, tc.ann, tc.cc) // some cases are meant to be ignored
			if tc.edit != nil {
				tc.edit(&spec)
			}
			clk := testingclock.NewFakePassiveClock(t0)
			runSteps(t, NewDecider(spec, clk), clk, tc.steps)
		})
	}
}

// The revision goes inactive a stable window after it last became active
// without traffic and is scaled to zero a grace period later; the pod
// retention period, if longer, replaces the grace period.
func TestDeciderScaleToZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		cfg, ann     map[string]string
		wantInactive time.Duration // first decision reporting inactive
		wantZero     time.Duration // first decision at zero
	}{
		{name: "defaults: 60s + 30s", wantInactive: 60 * time.Second, wantZero: 90 * time.Second},
		{name: "window 10s, grace 5s", cfg: map[string]string{"scale-to-zero-grace-period": "5s"},
			ann: map[string]string{as + "window": "10s"}, wantInactive: 10 * time.Second, wantZero: 16 * time.Second},
		{name: "retention 2m", ann: map[string]string{as + "scale-to-zero-pod-retention-period": "2m"},
			wantInactive: 60 * time.Second, wantZero: 180 * time.Second},
		{name: "retention shorter than grace", ann: map[string]string{as + "scale-to-zero-pod-retention-period": "10s"},
			wantInactive: 60 * time.Second, wantZero: 90 * time.Second},
		{name: "scale-down-delay first", ann: map[string]string{as + "scale-down-delay": "20s"},
			wantInactive: 60 * time.Second, wantZero: 90 * time.Second},
		{name: "min-scale 1: never", ann: map[string]string{as + "min-scale": "1"}},
		{name: "scale to zero disabled: never", cfg: map[string]string{"enable-scale-to-zero": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := testingclock.NewFakePassiveClock(t0)
			d := NewDecider(mustSpec(t, mustConfig(t, tc.cfg), tc.ann, 0), clk)
			var inactiveAt, zeroAt time.Duration
			ready := int32(0)
			for at := time.Duration(0); at <= 10*time.Minute; at += 2 * time.Second {
				clk.SetTime(t0.Add(at))
				got := d.Decide(Input{Ready: ready})
				if !got.Active && inactiveAt == 0 {
					inactiveAt = at
				}
				if got.Active && inactiveAt != 0 {
					t.Fatalf("t=%v: active again without traffic", at)
				}
				if got.Desired == 0 && zeroAt == 0 {
					zeroAt = at
					if got.Reason != ReasonNoTraffic {
						t.Errorf("reason at zero = %q", got.Reason)
					}
				}
				if got.Desired > 1 {
					t.Fatalf("t=%v: desired %d without traffic", at, got.Desired)
				}
				ready = got.Desired
			}
			if inactiveAt != tc.wantInactive || zeroAt != tc.wantZero {
				t.Errorf("inactive at %v, zero at %v; want %v and %v", inactiveAt, zeroAt, tc.wantInactive, tc.wantZero)
			}
		})
	}
}

// A request during the grace period makes the revision active again and keeps its instance.
func TestDeciderReactivatesInGrace(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	d := NewDecider(mustSpec(t, nil, nil, 0), clk)
	clk.SetTime(t0.Add(60 * time.Second))
	if got := d.Decide(Input{Ready: 1}); got.Active || got.Desired != 1 || got.Reason != ReasonScaleToZeroGrace {
		t.Fatalf("after a stable window: %+v", got)
	}
	clk.SetTime(t0.Add(70 * time.Second))
	got := d.Decide(Input{Ready: 1, Stable: WindowStats{Concurrency: 0.01}, Panic: WindowStats{Concurrency: 0.1}})
	if !got.Active || got.Desired != 1 {
		t.Fatalf("on a request: %+v", got)
	}
	// The next idle stretch counts from the reactivation.
	clk.SetTime(t0.Add(129 * time.Second))
	if got := d.Decide(Input{Ready: 1}); !got.Active || got.Desired != 1 || got.Reason != ReasonIdle {
		t.Fatalf("59s after: %+v", got)
	}
	clk.SetTime(t0.Add(130 * time.Second))
	if got := d.Decide(Input{Ready: 1}); got.Active {
		t.Fatalf("60s after: %+v", got)
	}
}

// After a restart with instances already running, the decider holds them in
// panic mode for a stable window instead of scaling down on no history.
func TestDeciderResume(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	d := NewDecider(mustSpec(t, nil, nil, 0), clk)
	d.Resume(10)
	runSteps(t, d, clk, []step{
		{stable: 0, panic: -1, ready: 10, want: 10, wantPanic: true, wantReason: ReasonPanic},
		{after: 60 * time.Second, stable: 0, panic: -1, ready: 10, want: 10, wantPanic: true},
		{after: 2 * time.Second, stable: 0, panic: -1, ready: 10, want: 5},
	})
	// One instance is no reason to panic.
	d2 := NewDecider(mustSpec(t, nil, nil, 0), clk)
	d2.Resume(1)
	if got := d2.Decide(Input{Ready: 1}); got.Panic {
		t.Errorf("Resume(1) panics: %+v", got)
	}
}

// Update keeps the state: a lower max-scale applies at once, panic mode stays.
func TestDeciderUpdate(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakePassiveClock(t0)
	d := NewDecider(mustSpec(t, nil, nil, 0), clk)
	runSteps(t, d, clk, []step{{stable: 70, panic: 700, ready: 1, want: 10, wantPanic: true}})
	d.Update(mustSpec(t, nil, map[string]string{as + "max-scale": "4"}, 0))
	runSteps(t, d, clk, []step{{after: 2 * time.Second, stable: 70, panic: 70, ready: 10, want: 4, wantPanic: true, wantReason: ReasonMaxScale}})
}

func TestMaxWindow(t *testing.T) {
	t.Parallel()
	w := maxWindow{window: 10 * time.Second}
	for i, tc := range []struct {
		at   time.Duration
		v    int32
		want int32
	}{
		{0, 5, 5}, {2 * time.Second, 3, 5}, {4 * time.Second, 4, 5}, {9 * time.Second, 1, 5},
		{10 * time.Second, 1, 4}, {14 * time.Second, 2, 2}, {15 * time.Second, 7, 7}, {30 * time.Second, 0, 0},
	} {
		if got := w.record(t0.Add(tc.at), tc.v); got != tc.want {
			t.Errorf("%d: record(%v, %d) = %d, want %d", i, tc.at, tc.v, got, tc.want)
		}
	}
	if len(w.entries) != 1 {
		t.Errorf("entries = %v, want one", w.entries)
	}
}
