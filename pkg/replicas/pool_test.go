package replicas

import (
	"testing"
	"time"
)

// TestPreparedBudgetAccounting: the pool admits up to Count sandboxes,
// evicts by oldest last request for a newer one only, and enforces the
// memory bound on what is measured (an estimate from the measured ones for
// a new one).
func TestPreparedBudgetAccounting(t *testing.T) {
	m := &Manager{opts: Options{Prepared: &PreparedBudget{Count: 2, Memory: 100}}, pool: map[*revision]*poolEntry{}}
	t0 := time.Now()
	a, b, c := &revision{}, &revision{}, &revision{}
	if ok, ev := m.admitSpare(a, t0); !ok || len(ev) != 0 {
		t.Fatalf("a: %v %v", ok, ev)
	}
	if ok, ev := m.admitSpare(b, t0.Add(time.Second)); !ok || len(ev) != 0 {
		t.Fatalf("b: %v %v", ok, ev)
	}
	// Full by count: c, older than both, does not get in.
	if ok, ev := m.admitSpare(c, t0.Add(-time.Second)); ok || len(ev) != 0 {
		t.Fatalf("older c: admitted %v, evicted %d", ok, len(ev))
	}
	// c, newest, evicts a (the oldest).
	if ok, ev := m.admitSpare(c, t0.Add(2*time.Second)); !ok || len(ev) != 1 || ev[0] != a {
		t.Fatalf("newer c: admitted %v, evicted %v", ok, ev)
	}
	if n, _ := m.PreparedSandboxes(); n != 2 {
		t.Fatalf("%d in the pool, want 2", n)
	}
	// Measured: b 40, c 70 = 110 > 100: the oldest (b) goes.
	if ev := m.spareCost(b, 40); len(ev) != 0 {
		t.Fatalf("b measured: evicted %v", ev)
	}
	if ev := m.spareCost(c, 70); len(ev) != 1 || ev[0] != b {
		t.Fatalf("c measured: evicted %v, want b", ev)
	}
	// One more at an estimated 70 would cross 100: a newer one evicts c.
	if ok, ev := m.admitSpare(a, t0.Add(3*time.Second)); !ok || len(ev) != 1 || ev[0] != c {
		t.Fatalf("a again: admitted %v, evicted %v", ok, ev)
	}
	if n, rss := m.PreparedSandboxes(); n != 1 || rss != 0 {
		t.Fatalf("pool: %d, %d bytes", n, rss)
	}
	m.leavePool(a)
	if n, _ := m.PreparedSandboxes(); n != 0 {
		t.Fatalf("pool after leave: %d", n)
	}
}
