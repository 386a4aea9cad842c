package replicas

import (
	"context"
	"testing"
	"time"
)

// looping tells whether revision ns/name's loop has a goroutine.
func (e *env) looping(ns, name string) bool {
	r := e.m.revision(ns, name)
	if r == nil {
		return false
	}
	e.m.loopMu.Lock()
	defer e.m.loopMu.Unlock()
	return r.running
}

// TestIdleRevisionHasNoGoroutine: a revision at zero keeps no goroutine of
// its own; the autoscaler's scale-up starts its loop again, which makes
// the instance, and a scale-down to zero stops it; Detach still ends every
// revision (its done is closed).
func TestIdleRevisionHasNoGoroutine(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	name := uniqueName("idle")
	rev := newRev(t, "ns1", name, "process", ref)
	e.scale.set("ns1", name, 0)
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", func(st State) bool { return st.Ready })
	e.waitState(rev, time.Minute, "at zero", func(st State) bool { return st.Actual == 0 && e.instances("ns1", name) == 0 })
	eventually(t, 10*time.Second, "no loop goroutine at zero", func() bool { return !e.looping("ns1", name) })

	e.scale.set("ns1", name, 1)
	e.waitState(rev, time.Minute, "1 ready", func(st State) bool { return st.Actual == 1 })
	if eps := e.m.Endpoints("ns1", name); len(eps) != 1 {
		t.Fatalf("endpoints %v", endpointIDs(eps))
	}
	dctx, dcancel := context.WithCancel(context.Background())
	defer dcancel()
	go e.drainAll(dctx) // as the router would: nothing is in flight
	e.scale.set("ns1", name, 0)
	e.waitState(rev, time.Minute, "at zero again", func(st State) bool { return st.Actual == 0 && e.instances("ns1", name) == 0 })
	eventually(t, 10*time.Second, "no loop goroutine at zero again", func() bool { return !e.looping("ns1", name) })

	r := e.m.revision("ns1", name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	default:
		t.Error("Detach returned; the idle revision's done is open")
	}
	e.m.loopMu.Lock()
	running := r.running
	e.m.loopMu.Unlock()
	if running {
		t.Error("the revision's loop runs after Detach")
	}
}
