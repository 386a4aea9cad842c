package replicas

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/knbox/knbox/pkg/pod"
)

// # Prepared sandboxes
//
// With Options.Prepared, each revision that has been ready once keeps one
// prepared instance (package pod's Prepare: network namespace, files,
// volumes, root filesystem, bundle, shim and containers created, not
// started), so that its next scale-up (the one from zero above all) only
// starts it: `runc start` and the first probe. Once consumed, the next is
// prepared in the background when the revision wants no more instances than
// it has and all of them are ready (not while some are starting: the
// preparation would slow their start).
//
// A prepared sandbox is not an instance: it is no Pod, no endpoint, no ready
// capacity for the autoscaler, and its events (Pulled, Created) are not
// recorded. It holds no ResourceQuota reservation (nothing runs in it: its
// memory is the shim's and the waiting init's, bounded by the budget), but
// it is prepared only while the quota would admit one more instance of the
// revision, and it reserves like any instance when it is consumed (a
// refusal then stops it, and the scale-up is held as usual).
//
// The budget (Prepared.Count sandboxes, Prepared.Memory bytes of measured
// RSS of the shim and what runs under it) is shared by all revisions; when
// it is full, the sandbox of the revision whose last request is the oldest
// goes for one whose last request is newer (LRU). A revision's last request
// is the router's last Poke (a request that waited for an instance: the
// ones a sandbox serves), else its creation. A sandbox goes too when
// its revision is removed or whose resolved pod spec would differ: a Secret
// or ConfigMap it reads changes, its RuntimeClass changes (or names another
// handler), or the quota's LimitRange defaults give its containers other
// resources. A crash of knbox leaves prepared sandboxes to package pod's
// Recover, which removes them; the pool is made again from scratch.

// PreparedBudget bounds the prepared sandboxes (see "Prepared sandboxes").
type PreparedBudget struct {
	// Count is the most sandboxes kept at once (> 0).
	Count int
	// Memory bounds the sum of their measured memory (PSS, see pod.Runtime.Cost) in bytes (> 0).
	Memory int64
}

// spare is a revision's prepared sandbox.
type spare struct {
	id      string
	handler string
	refresh time.Time
	// spec is what it was prepared with (its containers' resources with
	// the LimitRange defaults the quota applied then).
	spec     pod.Spec
	prepared bool // the pod runtime reports it prepared
}

// poolEntry is one revision's place in the budget.
type poolEntry struct {
	last time.Time // the revision's last request
	rss  int64     // measured, 0 until the sandbox is prepared
}

// spareCost measures a prepared sandbox (RSS, processes); ok false if the
// pod runtime cannot.
type spareCoster interface {
	Cost(id string) (rss int64, pids int, ok bool)
}

// admitSpare admits revision r's sandbox into the budget, evicting those of
// revisions whose last request is older than r's as needed; it returns
// false when r's does not fit. The evicted revisions are returned, to drop
// their sandboxes (without m.poolMu held).
func (m *Manager) admitSpare(r *revision, last time.Time) (ok bool, evicted []*revision) {
	b := m.opts.Prepared
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	if e, in := m.pool[r]; in {
		e.last = last
		return true, nil
	}
	est, n, mem := int64(0), 0, int64(0)
	for _, e := range m.pool {
		mem += e.rss
		if e.rss > 0 {
			n++
		}
	}
	if n > 0 {
		est = mem / int64(n) // what one more will cost, as far as is known
	}
	for len(m.pool)+1 > b.Count || mem+est > b.Memory {
		victim := m.lruLocked(r)
		if victim == nil || !m.pool[victim].last.Before(last) {
			return false, evicted
		}
		mem -= m.pool[victim].rss
		delete(m.pool, victim)
		evicted = append(evicted, victim)
	}
	m.pool[r] = &poolEntry{last: last}
	return true, evicted
}

// lruLocked is the revision in the pool, other than but, whose last request
// is the oldest.
func (m *Manager) lruLocked(but *revision) *revision {
	var out *revision
	for r, e := range m.pool {
		if r != but && (out == nil || e.last.Before(m.pool[out].last)) {
			out = r
		}
	}
	return out
}

// spareCost records the measured memory (PSS) of r's sandbox and returns the
// revisions to evict (r's own included) if the pool is over its memory
// budget now.
func (m *Manager) spareCost(r *revision, rss int64) (evicted []*revision) {
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	e, in := m.pool[r]
	if !in {
		return nil
	}
	e.rss = rss
	var mem int64
	for _, e := range m.pool {
		mem += e.rss
	}
	for mem > m.opts.Prepared.Memory && len(m.pool) > 0 {
		victim := m.lruLocked(nil)
		mem -= m.pool[victim].rss
		delete(m.pool, victim)
		evicted = append(evicted, victim)
	}
	return evicted
}

// leavePool takes r out of the budget.
func (m *Manager) leavePool(r *revision) {
	m.poolMu.Lock()
	delete(m.pool, r)
	m.poolMu.Unlock()
}

// touchPool records r's last request.
func (m *Manager) touchPool(r *revision, at time.Time) {
	m.poolMu.Lock()
	if e, in := m.pool[r]; in {
		e.last = at
	}
	m.poolMu.Unlock()
}

// PreparedSandboxes returns the number of prepared sandboxes and the sum of
// their measured memory (PSS).
func (m *Manager) PreparedSandboxes() (n int, pss int64) {
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	for _, e := range m.pool {
		pss += e.rss
	}
	return len(m.pool), pss
}

// evict drops the sandboxes of revisions the budget evicted.
func evict(rs []*revision) {
	for _, r := range rs {
		r.dropSpare("budget")
	}
}

// dropSpare stops r's sandbox, if it has one, in the background.
func (r *revision) dropSpare(why string) {
	r.mu.Lock()
	sp := r.spare
	r.spare = nil
	r.mu.Unlock()
	r.m.leavePool(r)
	if sp == nil {
		return
	}
	r.log.Debug("prepared sandbox dropped", "instance", sp.id, "why", why)
	r.m.untrackSpare(sp.id)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Minute)
		defer cancel()
		if err := r.m.opts.Pods.Stop(ctx, sp.id, 0); err != nil {
			r.log.Warn("stop prepared sandbox", "instance", sp.id, "err", err)
		}
	}()
}

// spareChanged takes the pod runtime's word on r's sandbox: prepared (its
// cost is measured), or failed (it is dropped; the next is tried later).
func (r *revision) spareChanged(id string, st pod.Status, ok bool) {
	r.mu.Lock()
	sp := r.spare
	if sp == nil || sp.id != id {
		r.mu.Unlock()
		return
	}
	if !ok || st.Failures > 0 {
		r.spareNext = time.Now().Add(retryAfter(r.spareFailures + 1))
		r.spareFailures++
		r.mu.Unlock()
		r.dropSpare("failed")
		return
	}
	measure := st.Prepared && !sp.prepared
	if measure {
		sp.prepared = true
		r.spareFailures = 0
	}
	r.mu.Unlock()
	if !measure {
		return
	}
	if c, isCoster := r.m.opts.Pods.(spareCoster); isCoster {
		if rss, _, ok := c.Cost(id); ok {
			evict(r.m.spareCost(r, rss))
		}
	}
}

func (m *Manager) trackSpare(id string, r *revision) {
	m.mu.Lock()
	m.spares[id] = r
	m.mu.Unlock()
}

func (m *Manager) untrackSpare(id string) {
	m.mu.Lock()
	delete(m.spares, id)
	m.mu.Unlock()
}

// sameResources tells whether two specs of a revision's pod give their
// containers the same resources.
func sameResources(a, b *pod.Spec) bool {
	if len(a.Containers) != len(b.Containers) {
		return false
	}
	for i := range a.Containers {
		if !equality.Semantic.DeepEqual(a.Containers[i].Resources, b.Containers[i].Resources) {
			return false
		}
	}
	return true
}

// runtimeClassOf is the RuntimeClass rev's instances run in ("" : none).
func (r *revision) runtimeClassLocked() string {
	if n := r.rev.Spec.RuntimeClassName; n != nil && *n != "" {
		return *n
	}
	return r.m.opts.DefaultRuntimeClass
}

// spareLocked decides on r's sandbox in a reconcile: one to drop (why, or
// ""), or one to prepare (with its place in the budget taken), and the
// revisions whose sandboxes the budget evicted for it. live is the number
// of instances not stopping. r.mu is held.
func (r *revision) spareLocked(now time.Time, want int32, live int, synced bool) (drop string, prep *spare, evicted []*revision) {
	if r.m.opts.Prepared == nil {
		return "", nil, nil
	}
	if r.spare != nil {
		switch {
		case r.removing || r.static != nil || r.halted:
			return "the revision runs no instances", nil, nil
		case synced:
			if h, f := r.handlerLocked(); f != nil || h != r.spare.handler {
				return "its handler changed", nil, nil
			}
		}
		return "", nil, nil
	}
	// Not while an instance is starting (a scale-up, the one from zero
	// that used the last sandbox above all): preparing the next one would
	// take CPU from the starts the requests wait for. The reconcile that
	// sees them ready prepares it.
	if r.removing || r.static != nil || r.halted || !r.everReady || !synced || want > int32(live) || r.readyLocked() < int32(live) || r.m.detaching.Load() ||
		now.Before(r.spareNext) || r.blocked != nil {
		return "", nil, nil
	}
	h, f := r.handlerLocked()
	if f != nil {
		return "", nil, nil
	}
	ok, evicted := r.m.admitSpare(r, r.lastRequest)
	if !ok {
		return "", nil, evicted
	}
	id := r.newInstanceIDLocked()
	spec, refresh, err := r.podSpecLocked(id, h)
	if err != nil {
		r.m.leavePool(r)
		r.spareFailures++
		r.spareNext = now.Add(retryAfter(r.spareFailures))
		return "", nil, evicted
	}
	r.spare = &spare{id: id, handler: h, refresh: refresh, spec: spec}
	return "", r.spare, evicted
}

// prepareSpare has the pod runtime prepare sp, if the quota would admit
// one more instance (it reserves nothing: see "Prepared sandboxes").
func (r *revision) prepareSpare(sp *spare) {
	if q := r.m.opts.Quota; q != nil {
		r.mu.Lock()
		podSpec := r.quotaSpecLocked()
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		eff, release, err := q.Reserve(ctx, r.key.namespace, podSpec)
		cancel()
		if err != nil {
			r.abandonSpare(sp, "the quota would not admit it: "+err.Error())
			return
		}
		release()
		for i := range sp.spec.Containers {
			if i < len(eff.Containers) && eff.Containers[i].Name == sp.spec.Containers[i].Name {
				sp.spec.Containers[i].Resources = eff.Containers[i].Resources
			}
		}
	}
	if !r.isSpare(sp) {
		return // dropped (evicted, the revision changed or went) before its preparation began
	}
	r.m.trackSpare(sp.id, r)
	if err := r.m.opts.Pods.Prepare(r.ctx, sp.spec); err != nil {
		r.m.untrackSpare(sp.id)
		r.abandonSpare(sp, err.Error())
		return
	}
	if !r.isSpare(sp) {
		// Dropped while it was being prepared: dropSpare's Stop may have
		// come before the pod existed, so it is stopped here, or it would
		// wait outside the budget until knbox stops.
		r.m.untrackSpare(sp.id)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Minute)
		defer cancel()
		if err := r.m.opts.Pods.Stop(ctx, sp.id, 0); err != nil {
			r.log.Debug("stop a sandbox dropped while it was prepared", "instance", sp.id, "err", err)
		}
		return
	}
	r.log.Debug("preparing a sandbox", "instance", sp.id)
	st, ok := r.m.opts.Pods.Status(sp.id)
	r.spareChanged(sp.id, st, ok)
}

// isSpare tells whether sp is still r's sandbox.
func (r *revision) isSpare(sp *spare) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spare == sp
}

// abandonSpare forgets a sandbox that could not be prepared; the next is
// tried with backoff.
func (r *revision) abandonSpare(sp *spare, why string) {
	r.mu.Lock()
	if r.spare == sp {
		r.spare = nil
	}
	r.spareFailures++
	d := retryAfter(r.spareFailures)
	r.spareNext = time.Now().Add(d)
	r.mu.Unlock()
	r.m.leavePool(r)
	r.log.Debug("no prepared sandbox", "why", why, "retryIn", d)
}

// startSpare makes the consumed sandbox sp an instance (reconcile made its
// entry): it reserves its quota as any instance does and starts it. When
// the quota refuses it, or gives its containers other resources than it
// was prepared with, the sandbox goes and the loop makes (or holds) an
// ordinary instance instead.
func (r *revision) startSpare(sp *spare, want int32) {
	r.m.leavePool(r)
	r.m.untrackSpare(sp.id)
	spec := sp.spec
	spec.Containers = slices.Clone(sp.spec.Containers)
	release, ok := r.reserve(&spec, want)
	fail := func(why string) {
		if release != nil {
			release()
		}
		r.mu.Lock()
		delete(r.instances, sp.id)
		r.mu.Unlock()
		r.m.untrackPod(sp.id)
		r.log.Info("prepared sandbox not used", "instance", sp.id, "why", why)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.m.opts.Pods.Stop(r.ctx, sp.id, 0); err != nil {
				r.log.Warn("stop prepared sandbox", "instance", sp.id, "err", err)
			}
		}()
		r.poke()
		r.m.notify(r.key)
	}
	switch {
	case !ok:
		fail("quota")
		return
	case !sameResources(&spec, &sp.spec):
		fail("its resources changed")
		return
	}
	r.m.trackPod(sp.id, r)
	r.mu.Lock()
	created := r.eventLocked(corev1.EventTypeNormal, "Created", "Created instance "+sp.id)
	r.mu.Unlock()
	r.emit([]event{created})
	if err := r.m.opts.Pods.Start(sp.id); err != nil {
		fail(err.Error())
		return
	}
	r.giveRelease(sp.id, release)
	r.log.Debug("prepared sandbox started", "instance", sp.id)
	r.podChanged(sp.id)
	r.poke() // the next sandbox, once no more instances are wanted
}
