package autoscaler

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The Active condition's reason and message when a revision is inactive, as Knative writes them.
const (
	NoTrafficReason  = "NoTraffic"
	NoTrafficMessage = "The target is not receiving traffic."
)

// Options configures an Autoscaler. The zero value is usable: real clock,
// Knative's 2s tick, instances assumed ready as soon as they are desired,
// decisions kept to itself.
//
// The hooks run with the Autoscaler's lock held, in decision order: they must
// be quick and must not call back into the Autoscaler (hand the work to a
// queue instead, as a controller does).
type Options struct {
	// Clock is the time source and ticker (default: the real clock).
	Clock clock.WithTicker
	// Tick is how often every revision is decided (default DefaultTick).
	Tick time.Duration
	// Logger receives scale changes and panic transitions (default: none).
	Logger *slog.Logger

	// Ready returns the number of ready instances of rev. Nil: the last
	// desired scale is taken as ready.
	Ready func(rev string) int32
	// SetScale is told rev's desired scale: once when the revision is added
	// and then whenever it changes. The caller applies it (the Revision
	// controller records it, the runtime starts or stops instances).
	SetScale func(rev string, desired int32)
	// SetActive is told rev's Active condition: once when the revision is
	// added and then whenever it changes. Inactive carries NoTrafficReason
	// and NoTrafficMessage; active has empty reason and message.
	SetActive func(rev string, active bool, reason, message string)
}

// Autoscaler decides the scale of every revision it is given, every tick and
// right away when a request waits for a revision without instances.
//
// The router feeds it with Record (once a second per revision) and Poke; the
// Revision controller with Upsert and Delete; it answers through the hooks
// in Options and Status.
type Autoscaler struct {
	clk       clock.WithTicker
	tick      time.Duration
	log       *slog.Logger
	ready     func(string) int32
	setScale  func(string, int32)
	setActive func(string, bool, string, string)

	collector *Collector

	mu   sync.Mutex
	revs map[string]*revisionState
	subs []func(rev string)
}

type revisionState struct {
	decider   *Decider
	reachable bool
	decided   bool // last holds a decision
	last      Decision
	// waiting is the number of waiting requests the last poke (PokeN)
	// said, at waitingAt; stale after pokeFresh.
	waiting   int
	waitingAt time.Time
}

// New returns an Autoscaler with no revisions.
func New(o Options) *Autoscaler {
	a := &Autoscaler{
		clk:       o.Clock,
		tick:      o.Tick,
		log:       o.Logger,
		ready:     o.Ready,
		setScale:  o.SetScale,
		setActive: o.SetActive,
		revs:      map[string]*revisionState{},
	}
	if a.clk == nil {
		a.clk = clock.RealClock{}
	}
	if a.tick <= 0 {
		a.tick = DefaultTick
	}
	if a.log == nil {
		a.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a.collector = NewCollector(a.clk)
	return a
}

// Collector returns the Autoscaler's metric collector.
func (a *Autoscaler) Collector() *Collector { return a.collector }

// Record adds one second's sample of rev (see [Collector.Record]).
func (a *Autoscaler) Record(rev string, at time.Time, concurrency, requests float64) {
	a.collector.Record(rev, at, concurrency, requests)
}

// Poke tells the Autoscaler that a request for rev arrived while rev had no
// ready instance: PokeN with one request waiting.
func (a *Autoscaler) Poke(rev string) { a.PokeN(rev, 1) }

// pokeFresh is how long the waiting count of a poke is taken into
// decisions: the router pokes again every second while requests wait.
const pokeFresh = 2 * time.Second

// PokeN tells the Autoscaler that waiting requests for rev wait while rev
// has no ready instance (the router's queue of rev; less than one counts
// as one). They count at once (see [Collector.PokeN]), and for the next
// pokeFresh as the least panic-window concurrency (see [Input.Waiting]):
// a burst of n requests at zero is scaled for n in one decision, not
// diluted over the panic window. If rev is scaled to zero or inactive, or
// more requests wait than the last poke said, rev is decided right away
// instead of at the next tick, so the scale from zero starts now.
func (a *Autoscaler) PokeN(rev string, waiting int) {
	waiting = max(waiting, 1)
	now := a.clk.Now()
	a.collector.PokeN(rev, now, waiting)
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.revs[rev]
	if r == nil {
		return
	}
	more := waiting > r.waitingLocked(now)
	r.waiting, r.waitingAt = waiting, now // the router's latest count
	if r.last.Desired == 0 || !r.last.Active || more {
		a.decideLocked(rev, r)
	}
}

// waitingLocked is the waiting count of the last poke while it is fresh.
func (r *revisionState) waitingLocked(now time.Time) int {
	if r.waiting == 0 || now.Sub(r.waitingAt) >= pokeFresh {
		return 0
	}
	return r.waiting
}

// Upsert adds revision rev with spec, or updates it. reachable says whether a
// Route sends traffic to it (min-scale applies only then). A new revision is
// decided at once, so SetScale learns its initial scale; if instances of it
// are already ready (the daemon restarted), it holds them until it has a
// window of samples.
func (a *Autoscaler) Upsert(rev string, spec Spec, reachable bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.revs[rev]; r != nil {
		r.decider.Update(spec)
		r.reachable = reachable
		return
	}
	r := &revisionState{decider: NewDecider(spec, a.clk), reachable: reachable}
	if a.ready != nil {
		r.decider.Resume(a.ready(rev))
	}
	a.revs[rev] = r
	a.decideLocked(rev, r)
}

// Subscribe registers f, called with a revision whenever its desired scale
// or activity changes (after the hooks in Options). Like the hooks, f runs
// with the Autoscaler's lock held: it must be quick and must not call back
// into the Autoscaler.
func (a *Autoscaler) Subscribe(f func(rev string)) {
	a.mu.Lock()
	a.subs = append(a.subs, f)
	a.mu.Unlock()
}

// Delete forgets revision rev and its samples.
func (a *Autoscaler) Delete(rev string) {
	a.mu.Lock()
	delete(a.revs, rev)
	a.mu.Unlock()
	a.collector.Forget(rev)
}

// Status returns rev's last decision, and whether rev is known.
func (a *Autoscaler) Status(rev string) (Decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.revs[rev]
	if r == nil {
		return Decision{}, false
	}
	return r.last, true
}

// Run decides every revision every tick until ctx is done, then returns nil.
func (a *Autoscaler) Run(ctx context.Context) error {
	t := a.clk.NewTicker(a.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			a.Tick()
		}
	}
}

// Tick decides every revision once, now. Run calls it every tick.
func (a *Autoscaler) Tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for rev, r := range a.revs {
		a.decideLocked(rev, r)
	}
}

// decideLocked takes one decision for rev and reports what changed.
func (a *Autoscaler) decideLocked(rev string, r *revisionState) {
	spec := r.decider.Spec()
	stable, panicW := a.collector.Windows(rev, spec.StableWindow, spec.PanicWindow)
	ready := r.last.Desired
	if a.ready != nil {
		ready = a.ready(rev)
	}
	d := r.decider.Decide(Input{Stable: stable, Panic: panicW, Ready: ready, Unreachable: !r.reachable,
		Waiting: float64(r.waitingLocked(a.clk.Now()))})
	first, prev := !r.decided, r.last
	r.decided, r.last = true, d

	if d.Panic != prev.Panic && !first {
		a.log.Info("autoscaler panic mode", "revision", rev, "panic", d.Panic,
			"stable", d.ObservedStable, "panicWindow", d.ObservedPanic, "ready", ready)
	}
	if first || d.Desired != prev.Desired {
		a.log.Info("autoscaler scale", "revision", rev, "from", prev.Desired, "to", d.Desired,
			"reason", string(d.Reason), "ready", ready, "stable", d.ObservedStable, "panicWindow", d.ObservedPanic)
		if a.setScale != nil {
			a.setScale(rev, d.Desired)
		}
	}
	if first || d.Active != prev.Active {
		if a.setActive != nil {
			if d.Active {
				a.setActive(rev, true, "", "")
			} else {
				a.setActive(rev, false, NoTrafficReason, NoTrafficMessage)
			}
		}
	}
	if first || d.Desired != prev.Desired || d.Active != prev.Active {
		for _, f := range a.subs {
			f(rev)
		}
	}
}

// Each calls f with every revision's spec and last decision, for metrics
// read when scraped. f runs with the Autoscaler's lock held: it must be
// quick and must not call back into the Autoscaler.
func (a *Autoscaler) Each(f func(rev string, spec Spec, d Decision)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for rev, r := range a.revs {
		if r.decided {
			f(rev, r.decider.Spec(), r.last)
		}
	}
}
