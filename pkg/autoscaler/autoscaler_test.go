package autoscaler

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// recorder collects the hook calls of an Autoscaler.
type recorder struct {
	mu     sync.Mutex
	events []string
	ready  map[string]int32 // nil: Options.Ready stays nil
}

func (r *recorder) options(clk *testingclock.FakeClock, t *testing.T) Options {
	o := Options{
		Clock:  clk,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		SetScale: func(rev string, n int32) {
			r.add(fmt.Sprintf("%s scale %d", rev, n))
		},
		SetActive: func(rev string, active bool, reason, message string) {
			r.add(fmt.Sprintf("%s active %v %s", rev, active, reason))
			if !active && message != NoTrafficMessage {
				t.Errorf("message %q", message)
			}
		},
	}
	if r.ready != nil {
		o.Ready = func(rev string) int32 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.ready[rev]
		}
	}
	return o
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// take returns and clears the events so far.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// drive runs the router's side and the ticker for n seconds: each second a
// sample of conc in flight and rps arrivals, each second tick a decision.
func drive(clk *testingclock.FakeClock, a *Autoscaler, rev string, n int, conc, rps float64) {
	for range n {
		at := clk.Now()
		clk.Step(time.Second)
		a.Record(rev, at, conc, rps)
		if clk.Now().Sub(t0)%DefaultTick == 0 {
			a.Tick()
		}
	}
}

func TestAutoscalerLifecycle(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{}
	a := New(rec.options(clk, t))
	const rev = "default/hello-00001"

	// A new revision starts at its initial scale, active.
	a.Upsert(rev, mustSpec(t, nil, nil, 0), true)
	if got, want := rec.take(), []string{rev + " scale 1", rev + " active true "}; !slices.Equal(got, want) {
		t.Fatalf("on Upsert: %q, want %q", got, want)
	}

	// Steady load of 350 in flight: 5 instances, reached through panic
	// (5 is over 2 × 1 ready), then held.
	drive(clk, a, rev, 120, 350, 100)
	if got := rec.take(); !slices.Equal(got, []string{rev + " scale 5"}) {
		t.Errorf("under load: %q", got)
	}
	if st, _ := a.Status(rev); st.Desired != 5 || st.Panic || !st.Active {
		t.Errorf("status under load: %+v", st)
	}

	// Traffic stops: down by the scale-down rate as the stable average decays,
	// one instance kept, inactive a stable window after the last request,
	// zero a grace period later.
	stop := clk.Now()
	var inactiveAt, zeroAt time.Duration
	for range 150 {
		drive(clk, a, rev, 1, 0, 0)
		for _, e := range rec.take() {
			switch e {
			case rev + " active false NoTraffic":
				inactiveAt = clk.Now().Sub(stop)
			case rev + " scale 0":
				zeroAt = clk.Now().Sub(stop)
			}
		}
	}
	if inactiveAt < 60*time.Second || inactiveAt > 64*time.Second {
		t.Errorf("inactive %v after the last request, want a stable window (60s) and a tick or two", inactiveAt)
	}
	if zeroAt-inactiveAt != 30*time.Second {
		t.Errorf("zero %v after inactive, want the grace period", zeroAt-inactiveAt)
	}

	// A request arrives: decided at once, without waiting for a tick.
	clk.Step(300 * time.Millisecond)
	a.Poke(rev)
	if got, want := rec.take(), []string{rev + " scale 1", rev + " active true "}; !slices.Equal(got, want) {
		t.Fatalf("on Poke: %q, want %q", got, want)
	}
	// More pokes while it starts: nothing new to decide.
	a.Poke(rev)
	if got := rec.take(); len(got) != 0 {
		t.Errorf("second Poke: %q", got)
	}

	// Delete forgets it.
	a.Delete(rev)
	if _, ok := a.Status(rev); ok {
		t.Error("Status after Delete")
	}
	a.Poke(rev)
	a.Tick()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("after Delete: %q", got)
	}
}

// A burst on a revision at zero with activation-scale 2 and a ready count
// from the runtime.
func TestAutoscalerPokeFromZero(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{ready: map[string]int32{}}
	a := New(rec.options(clk, t))
	const rev = "ns/r"
	a.Upsert(rev, mustSpec(t, mustConfig(t, map[string]string{"allow-zero-initial-scale": "true"}),
		map[string]string{as + "initial-scale": "0", as + "activation-scale": "2"}, 0), true)
	if got, want := rec.take(), []string{rev + " scale 0", rev + " active false NoTraffic"}; !slices.Equal(got, want) {
		t.Fatalf("on Upsert: %q, want %q", got, want)
	}
	a.Tick()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("idle tick: %q", got)
	}
	a.Poke(rev)
	if got, want := rec.take(), []string{rev + " scale 2", rev + " active true "}; !slices.Equal(got, want) {
		t.Fatalf("on Poke: %q, want %q", got, want)
	}
	// The router's in-flight count includes the requests that wait: 300
	// of them while nothing is ready yet. One tick later: panic, 5 instances.
	clk.Step(time.Second)
	a.Record(rev, t0, 300, 300)
	a.Tick()
	if st, _ := a.Status(rev); st.Desired != 5 || !st.Panic {
		t.Errorf("after the burst: %+v", st)
	}
}

// A burst of 10 requests at zero with containerConcurrency 1 (target 1 per
// instance) is scaled for 10 in one decision, whether the router pokes with
// the whole queue or first with one request and then with more; a recent
// idle history does not dilute it.
func TestAutoscalerPokeBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		pokes []int
		want  []string
	}{
		{"whole queue", []int{10}, []string{"scale 10", "active true "}},
		{"growing queue", []int{1, 4, 10, 10, 3}, []string{"scale 1", "active true ", "scale 4", "scale 10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := testingclock.NewFakeClock(t0)
			rec := &recorder{ready: map[string]int32{}}
			a := New(rec.options(clk, t))
			const rev = "ns/burst"
			cfg := mustConfig(t, map[string]string{"allow-zero-initial-scale": "true",
				"stable-window": "10s", "panic-window-percentage": "60", "scale-to-zero-grace-period": "6s"})
			a.Upsert(rev, mustSpec(t, cfg, map[string]string{as + "initial-scale": "0", as + "target-utilization-percentage": "100"}, 1), true)
			// One request, then back to zero: the history is not empty, so
			// the panic window (6s) would average the burst over idle seconds.
			drive(clk, a, rev, 1, 1, 1)
			drive(clk, a, rev, 30, 0, 0)
			if got := rec.take(); !slices.Contains(got, rev+" scale 0") {
				t.Fatalf("not back at zero: %q", got)
			}
			for _, n := range tc.pokes {
				a.PokeN(rev, n)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, rev+" "+w)
			}
			if got := rec.take(); !slices.Equal(got, want) {
				t.Fatalf("on pokes %v: %q, want %q", tc.pokes, got, want)
			}
			// Ticks while the instances start (the router reports the 10
			// in flight): held at 10, in panic.
			for range 5 {
				at := clk.Now()
				clk.Step(time.Second)
				a.Record(rev, at, 10, 0)
				a.Tick()
			}
			if st, _ := a.Status(rev); st.Desired != 10 || !st.Panic {
				t.Errorf("after the burst: %+v", st)
			}
		})
	}
}

// Upsert of a known revision updates its Spec and reachability; a revision
// found already running after a restart is held.
func TestAutoscalerUpsert(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{ready: map[string]int32{"ns/running": 4, "ns/r": 1}}
	a := New(rec.options(clk, t))

	a.Upsert("ns/running", mustSpec(t, nil, nil, 0), true)
	if st, _ := a.Status("ns/running"); st.Desired != 4 || !st.Panic {
		t.Errorf("recovered revision: %+v", st)
	}

	a.Upsert("ns/r", mustSpec(t, nil, nil, 0), true)
	rec.take()
	a.Upsert("ns/r", mustSpec(t, nil, map[string]string{as + "min-scale": "3"}, 0), true)
	a.Tick()
	if got := rec.take(); !slices.Contains(got, "ns/r scale 3") {
		t.Errorf("after min-scale 3: %q", got)
	}
	// Unreachable: min-scale no longer applies.
	a.Upsert("ns/r", mustSpec(t, nil, map[string]string{as + "min-scale": "3"}, 0), false)
	a.Tick()
	if st, _ := a.Status("ns/r"); st.Desired != 1 || st.Reason != ReasonIdle {
		t.Errorf("unreachable: %+v", st)
	}
}

func TestAutoscalerRun(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{}
	a := New(rec.options(clk, t))
	const rev = "ns/r"
	a.Upsert(rev, mustSpec(t, nil, nil, 0), true)
	rec.take()
	a.Record(rev, t0, 700, 10)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	eventually(t, clk.HasWaiters, 5*time.Second)
	clk.Step(DefaultTick)
	eventually(t, func() bool {
		st, _ := a.Status(rev)
		return st.Desired == 10
	}, 5*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	a := New(Options{})
	if a.tick != DefaultTick || a.clk == nil || a.log == nil || a.Collector() == nil {
		t.Errorf("New(Options{}) = %+v", a)
	}
	a.Upsert("r", Spec{}, true) // hooks nil: no calls, no panic
	a.Poke("r")
	a.Tick()
}

// eventually waits for cond, failing the test after timeout.
func eventually(t *testing.T, cond func() bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAutoscalerEach: every decided revision with its spec and last
// decision, for metrics; a deleted one is gone.
func TestAutoscalerEach(t *testing.T) {
	t.Parallel()
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{ready: map[string]int32{"ns/a": 4}}
	a := New(rec.options(clk, t))
	a.Upsert("ns/a", mustSpec(t, nil, nil, 0), true)
	a.Upsert("ns/b", mustSpec(t, nil, map[string]string{as + "target": "7"}, 0), true)
	seen := map[string]Decision{}
	targets := map[string]float64{}
	a.Each(func(rev string, spec Spec, d Decision) {
		seen[rev], targets[rev] = d, spec.Target
	})
	if len(seen) != 2 || seen["ns/a"].Desired != 4 || !seen["ns/a"].Panic || math.Abs(targets["ns/b"]-4.9) > 1e-9 {
		t.Errorf("Each: %+v targets %v", seen, targets)
	}
	a.Delete("ns/a")
	n := 0
	a.Each(func(rev string, _ Spec, _ Decision) {
		n++
		if rev != "ns/b" {
			t.Errorf("Each after Delete: %s", rev)
		}
	})
	if n != 1 {
		t.Errorf("Each after Delete: %d revisions", n)
	}
}
