package autoscaler

import (
	"math"
	"time"

	"k8s.io/utils/clock"
)

// Reason says what settled a Decision's desired scale.
type Reason string

// The reasons of a Decision, in the order the decision applies them.
const (
	// ReasonStable: ceil(stable average / target), within the rate limits.
	ReasonStable Reason = "stable"
	// ReasonActivationScale: raised to activation-scale, the least non-zero scale.
	ReasonActivationScale Reason = "activation-scale"
	// ReasonPanic: in panic mode, the larger of the stable and the panic
	// recommendation and never less than the panic peak.
	ReasonPanic Reason = "panic"
	// ReasonScaleDownDelay: held at the maximum of the scale-down-delay window.
	ReasonScaleDownDelay Reason = "scale-down-delay"
	// ReasonInitialScale: held at initial-scale, not yet reached once.
	ReasonInitialScale Reason = "initial-scale"
	// ReasonMinScale: raised to min-scale.
	ReasonMinScale Reason = "min-scale"
	// ReasonMaxScale: lowered to max-scale.
	ReasonMaxScale Reason = "max-scale"
	// ReasonScaleToZeroDisabled: kept at one, enable-scale-to-zero is false.
	ReasonScaleToZeroDisabled Reason = "scale-to-zero disabled"
	// ReasonIdle: no traffic, but the revision has been active for less than
	// a stable window: kept at one.
	ReasonIdle Reason = "idle"
	// ReasonScaleToZeroGrace: inactive, keeping the last instances for the
	// scale-to-zero grace (or pod retention) period.
	ReasonScaleToZeroGrace Reason = "scale-to-zero grace"
	// ReasonNoTraffic: scaled to zero.
	ReasonNoTraffic Reason = "no traffic"
)

// Input is what one decision is taken on.
type Input struct {
	// Stable and Panic are the averages over the stable and the panic window.
	Stable, Panic WindowStats
	// Ready is the number of ready instances.
	Ready int32
	// Unreachable says that no Route sends traffic to the revision (Knative's
	// PodAutoscaler reachability "Unreachable"). Then min-scale does not
	// apply, the scale-down rate is not limited and the pod retention period
	// is skipped. The zero value is reachable, as Knative treats a revision
	// whose reachability is not yet known.
	Unreachable bool
	// Waiting is the number of requests that wait right now for a revision
	// with no ready instance (the router's queue when it poked, see
	// [Autoscaler.PokeN]). They are in flight at this instant, so the panic
	// window's observation (concurrency, or requests per second: they
	// arrived within the last second) is at least Waiting: a burst at zero
	// is counted whole at once, as panic mode is meant for, instead of
	// averaged over a panic window of earlier idle seconds.
	Waiting float64
}

// Decision is the outcome of one decision.
type Decision struct {
	// Desired is the number of instances the revision should have.
	Desired int32
	// Active is false once the revision is being scaled to zero for lack of
	// traffic (the Revision's Active condition, reason NoTraffic).
	Active bool
	// Panic says whether the decider is in panic mode.
	Panic bool
	// Reason is what settled Desired.
	Reason Reason
	// ObservedStable and ObservedPanic are the averages of the scaling
	// metric the decision was taken on.
	ObservedStable, ObservedPanic float64
}

// Decider takes one revision's scaling decisions, as Knative's KPA does:
// the decider of knative.dev/serving/pkg/autoscaler/scaling followed by the
// PodAutoscaler reconciler's bounds and scale-to-zero handling. In order:
//
//  1. Recommendations: ceil(average / target) over the stable and over the
//     panic window, each clamped to [floor(ready/max-scale-down-rate),
//     ceil(ready × max-scale-up-rate)] with ready counted as at least one
//     (so from zero ready, one decision may ask for up to
//     max-scale-up-rate instances); an unreachable revision may drop to
//     zero at once. A non-zero recommendation is at least activation-scale.
//  2. Panic: entered when ceil(panic average / target) is at least
//     panic-threshold × ready (again at least one); while in it, desired is the larger of the two
//     recommendations and never less than the highest it has been (no scale
//     down); left once a whole stable window has passed since demand was last
//     over the threshold.
//  3. Scale-down delay: the maximum recommendation over the last
//     scale-down-delay.
//  4. Bounds: min-scale (only while reachable; raised to initial-scale until
//     the revision first has initial-scale ready instances), then max-scale.
//  5. Scale to zero: a desired scale of zero is applied only after the
//     revision has been active for a stable window (else one instance is
//     kept) and then inactive for the grace period (or the pod retention
//     period if longer, while reachable); meanwhile the last scale is kept.
//     The revision goes inactive at the start of that period, and active
//     again at the next non-zero decision.
//
// Differences from Knative on a cluster: Knative skips the rest of the grace
// period once the activator has been in the request path that long; the
// router is always in the path, but knbox keeps the full grace period as a
// keep-warm time, so scale to zero comes a stable window plus the grace
// period after the last request. Knative reports a revision that is being
// scaled up from zero as Activating (Active Unknown); the Decider reports it
// active, and leaves readiness to the Revision controller. Knative's excess
// burst capacity is not computed: with the router always in the path there
// is no activator to put in or take out of it. The quotient observed/target
// is rounded to six decimal places before it is rounded up, so that
// floating-point noise does not add an instance (Knative rounds only the
// averages).
//
// A Decider is not safe for concurrent use; [Autoscaler] serialises its calls.
type Decider struct {
	spec Spec
	clk  clock.PassiveClock

	panicSince time.Time // last time the panic threshold was crossed; zero: not panicking
	maxPanic   int32     // the highest desired scale in this panic
	delay      maxWindow

	initialReached bool
	active         bool
	since          time.Time // when the revision last became active or inactive
	last           int32     // the last desired scale
}

// NewDecider returns a Decider for spec (normalised, see [Spec.Normalize])
// that reads the time from clk. The revision starts at its initial scale,
// active unless the initial scale is zero.
func NewDecider(spec Spec, clk clock.PassiveClock) *Decider {
	d := &Decider{clk: clk}
	d.Update(spec)
	d.active = d.spec.InitialScale > 0
	d.since = clk.Now()
	d.last = d.bounded(d.spec.InitialScale)
	return d
}

// Update replaces the Spec, keeping the decider's state (panic mode, delay
// window, activity).
func (d *Decider) Update(spec Spec) {
	d.spec = spec.Normalize()
	d.delay.window = d.spec.ScaleDownDelay
}

// Spec returns the normalised Spec the Decider works with.
func (d *Decider) Spec() Spec { return d.spec }

// Resume tells a new Decider that ready instances were already running when
// it was created (the daemon restarted and recovered them). Having no history
// yet, it then starts in panic mode holding them, as Knative's autoscaler
// does after a restart, rather than scaling down on an empty window.
func (d *Decider) Resume(ready int32) {
	if ready > 1 {
		d.panicSince = d.clk.Now()
		d.maxPanic = ready
	}
}

// Decide takes one decision at the clock's now.
func (d *Decider) Decide(in Input) Decision {
	now := d.clk.Now()
	s := &d.spec
	ready := max(in.Ready, 0)
	if !d.initialReached && ready >= s.InitialScale {
		d.initialReached = true
	}

	stable, panicV := in.Stable.Concurrency, in.Panic.Concurrency
	if s.Metric == MetricRPS {
		stable, panicV = in.Stable.RPS, in.Panic.RPS
	}
	stable, panicV = nonNegative(stable), max(nonNegative(panicV), nonNegative(in.Waiting))

	// 1. Recommendations within the rate limits.
	readyF := math.Max(1, float64(ready))
	upTo := math.Ceil(s.MaxScaleUpRate * readyF)
	downTo := 0.0
	if !in.Unreachable {
		downTo = math.Floor(readyF / s.MaxScaleDownRate)
	}
	wantStable := instances(stable, s.Target)
	wantPanic := instances(panicV, s.Target)
	stableN := toInt32(math.Min(math.Max(wantStable, downTo), upTo))
	panicN := toInt32(math.Min(math.Max(wantPanic, downTo), upTo))
	stableReason := ReasonStable
	if s.ActivationScale > 1 {
		if wantStable > 0 && stableN < s.ActivationScale {
			stableN, stableReason = s.ActivationScale, ReasonActivationScale
		}
		if wantPanic > 0 && panicN < s.ActivationScale {
			panicN = s.ActivationScale
		}
	}

	// 2. Panic mode.
	switch {
	case wantPanic/readyF >= s.PanicThreshold:
		d.panicSince = now // enter, or extend
	case !d.panicSince.IsZero() && now.Sub(d.panicSince) > s.StableWindow:
		d.panicSince, d.maxPanic = time.Time{}, 0
	}
	desired, reason := stableN, stableReason
	panicking := !d.panicSince.IsZero()
	if panicking {
		d.maxPanic = max(d.maxPanic, stableN, panicN)
		desired, reason = d.maxPanic, ReasonPanic
	}

	// 3. Scale-down delay.
	if s.ScaleDownDelay > 0 {
		if held := d.delay.record(now, desired); held != desired {
			desired, reason = held, ReasonScaleDownDelay
		}
	}

	// 4. Bounds.
	var lo int32
	loReason := ReasonMinScale
	if !in.Unreachable {
		lo = s.MinScale
	}
	if !d.initialReached && s.InitialScale > lo {
		lo, loReason = s.InitialScale, ReasonInitialScale
	}
	if desired < lo {
		desired, reason = lo, loReason
	}
	if s.MaxScale > 0 && desired > s.MaxScale {
		desired, reason = s.MaxScale, ReasonMaxScale
	}

	// 5. Scale to zero.
	switch {
	case desired > 0:
		if !d.active {
			d.active, d.since = true, now
		}
	case s.DisableScaleToZero:
		desired, reason = 1, ReasonScaleToZeroDisabled
	case d.active && now.Sub(d.since) < s.StableWindow:
		desired, reason = 1, ReasonIdle
	default:
		if d.active {
			d.active, d.since = false, now
		}
		wait := s.ScaleToZeroGracePeriod
		if !in.Unreachable {
			wait = max(wait, s.ScaleToZeroPodRetention)
		}
		reason = ReasonNoTraffic
		if hold := d.bounded(d.last); hold > 0 && now.Sub(d.since) < wait {
			desired, reason = hold, ReasonScaleToZeroGrace
		}
	}

	d.last = desired
	return Decision{
		Desired:        desired,
		Active:         d.active,
		Panic:          panicking,
		Reason:         reason,
		ObservedStable: stable,
		ObservedPanic:  panicV,
	}
}

// bounded is n within [0, max-scale].
func (d *Decider) bounded(n int32) int32 {
	n = max(n, 0)
	if d.spec.MaxScale > 0 {
		n = min(n, d.spec.MaxScale)
	}
	return n
}

// instances is ceil(observed/target), the quotient first rounded to
// avgPrecision so that floating-point noise (7.7/0.7 = 11.000000000000002)
// does not ask for one more instance. Knative divides without rounding.
func instances(observed, target float64) float64 {
	q := observed / target
	if q < math.MaxInt32 {
		q = math.Round(q*avgPrecision) / avgPrecision
	}
	return math.Ceil(q)
}

// toInt32 converts a non-negative whole float to int32, saturating.
func toInt32(f float64) int32 {
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxInt32:
		return math.MaxInt32
	}
	return int32(f)
}

func nonNegative(f float64) float64 {
	if !(f > 0) {
		return 0
	}
	return f
}
