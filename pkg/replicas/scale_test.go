package replicas

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/routing"
)

// TestScaleUpAndDrainingScaleDown: the autoscaler's scale adds instances;
// removing one takes it out of Endpoints at once, lets its request in
// flight finish, and sends SIGTERM only once the router says it is
// drained.
func TestScaleUpAndDrainingScaleDown(t *testing.T) {
	for _, h := range []string{"process", "runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			name := uniqueName("scale-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) { r.Spec.TimeoutSeconds = ptr.Int64(30) })
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)

			n0 := e.notifications("ns1", name)
			e.scale.set("ns1", name, 3)
			st := e.waitState(rev, time.Minute, "3 ready", func(st State) bool { return st.Actual == 3 })
			if st.Want != 3 || e.m.Ready("ns1", name) != 3 {
				t.Errorf("state %+v, Ready %d", st, e.m.Ready("ns1", name))
			}
			if n := e.notifications("ns1", name) - n0; n < 3 {
				t.Errorf("%d notifications while scaling up to 3, want at least 3", n)
			}
			eps := e.m.Endpoints("ns1", name)
			if len(eps) != 3 || eps[0].ID == eps[1].ID || eps[1].ID == eps[2].ID {
				t.Fatalf("endpoints %v", endpointIDs(eps))
			}
			for _, ep := range eps {
				if i := getInfo(t, ep); i.Env["K_REVISION"] != name {
					t.Errorf("endpoint %s: K_REVISION %q", ep.ID, i.Env["K_REVISION"])
				}
			}

			// A request in flight on the newest instance, which is the one
			// a scale down removes.
			victim := eps[2]
			var wg sync.WaitGroup
			wg.Add(1)
			var slowErr error
			go func() {
				defer wg.Done()
				resp, err := client(victim).Get("http://instance/sleep?ms=1500")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = &statusError{resp.Status}
					}
				}
				slowErr = err
			}()
			time.Sleep(200 * time.Millisecond)
			e.scale.set("ns1", name, 2)
			eventually(t, 10*time.Second, "victim leaves Endpoints", func() bool {
				ids := strings.Join(endpointIDs(e.m.Endpoints("ns1", name)), " ")
				return !strings.Contains(ids, victim.ID) && strings.Count(ids, name) == 2
			})
			wg.Wait()
			if slowErr != nil {
				t.Errorf("request in flight during the drain: %v", slowErr)
			}
			if e.instances("ns1", name) != 3 || strings.Contains(e.logsOf("ns1", name), "SIGTERM received") {
				t.Fatal("the draining instance was stopped before Drained")
			}
			e.m.Drained("ns1", name, victim.ID)
			eventually(t, 20*time.Second, "victim stopped", func() bool { return e.instances("ns1", name) == 2 })
			if !strings.Contains(e.logsOf("ns1", name), "SIGTERM received") {
				t.Error("the instance got no SIGTERM")
			}
			st = e.waitState(rev, time.Second, "2 ready", func(st State) bool { return st.Actual == 2 })
			if st.Want != 2 {
				t.Errorf("state %+v", st)
			}

			// Scale to zero: instances nobody was handed stop at once.
			e.scale.set("ns1", name, 0)
			go e.routerDrains(context.Background(), "ns1", name, eps[0].ID)
			go e.routerDrains(context.Background(), "ns1", name, eps[1].ID)
			st = e.waitState(rev, 20*time.Second, "scaled to zero", func(st State) bool { return e.instances("ns1", name) == 0 })
			if !st.Ready || st.Actual != 0 || st.Want != 0 || st.Failed {
				t.Errorf("at zero: %+v, want still Ready, none wanted", st)
			}

			// Activated (the autoscaler asks for one): an instance again.
			e.activate("ns1", name)
			st = e.waitState(rev, time.Minute, "activated", ready)
			if st.Actual != 1 || st.Want != 1 {
				t.Errorf("after activation: %+v", st)
			}
		})
	}
}

type statusError struct{ status string }

func (e *statusError) Error() string { return e.status }

// TestStopWithoutDrainedAndGrace: a draining instance whose Drained never
// comes is stopped after the revision's timeout; one that ignores SIGTERM
// is killed after the grace period (the timeout too).
func TestStopWithoutDrainedAndGrace(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"runc"})
	name := uniqueName("grace")
	rev := newRev(t, "ns1", name, "runc", ref, func(r *servingv1.Revision) { r.Spec.TimeoutSeconds = ptr.Int64(2) })
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name) // the router has it now

	// runtime-info waits for requests in flight after SIGTERM (up to 10s),
	// longer than the grace period; the request asks for 20s. So the only
	// way it ends before its answer is the SIGKILL after the grace period.
	answered := make(chan int, 1)
	go func() {
		resp, err := client(eps[0]).Get("http://instance/sleep?ms=20000")
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Remove(ctx, "ns1", name); err != nil {
		t.Fatal(err)
	}
	// 2s waiting for Drained, then 2s of grace, then SIGKILL: never less
	// (how much more depends on the machine's load, so no upper bound).
	if took := time.Since(start); took < 4*time.Second {
		t.Errorf("Remove took %v, want at least the drain timeout 2s + grace 2s", took)
	}
	select {
	case code := <-answered:
		if code != 0 {
			t.Errorf("the 20s request was answered (%d): the instance was not killed at the end of its grace period", code)
		}
	case <-time.After(time.Minute):
		t.Error("the 20s request still hangs a minute after Remove")
	}
	if m, n, c := e.leftovers(name); m != 0 || n != 0 || c != 0 {
		t.Errorf("left: %d mounts, %d namespaces, %d containers", m, n, c)
	}
}

// routerInstances shows the Manager to the router, as the daemon does.
type routerInstances struct{ m *Manager }

func (a routerInstances) Config(ns, rev string) (router.RevisionConfig, bool) {
	c, ok := a.m.Config(ns, rev)
	return router.RevisionConfig(c), ok
}

func (a routerInstances) Endpoints(ns, rev string) []router.Endpoint {
	var out []router.Endpoint
	for _, ep := range a.m.Endpoints(ns, rev) {
		out = append(out, router.Endpoint(ep))
	}
	return out
}

func (a routerInstances) Subscribe(f func(ns, rev string)) { a.m.Subscribe(f) }
func (a routerInstances) Drained(ns, rev, id string)       { a.m.Drained(ns, rev, id) }

// TestRouterScaleFromZero wires the Manager to the real router: a request
// for a revision at zero pokes it (and the autoscaler, which asks for an
// instance) and is answered; scaling down again drains through the
// router's Drained.
func TestRouterScaleFromZero(t *testing.T) {
	for _, h := range []string{"process", "runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			name := uniqueName("zero-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) { r.Spec.TimeoutSeconds = ptr.Int64(60) })
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)
			e.scale.set("ns1", name, 0)
			e.waitState(rev, 20*time.Second, "at zero", func(State) bool { return e.instances("ns1", name) == 0 })

			table := routing.NewTable()
			rt, err := router.New(router.Options{Table: table, Instances: routerInstances{e.m}, Logger: e.m.log,
				Poke: func(ns, rev string, _ int) { e.activate(ns, rev) }})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(rt)
			defer srv.Close()
			table.Set(routing.Route{Namespace: "ns1", Name: "svc", Host: "svc.ns1.example.com", Traffic: []routing.Split{{Revision: name, Percent: 100}}})

			start := time.Now()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
			req.Host = "svc.ns1.example.com"
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), name) {
				t.Fatalf("cold request: %s %s", resp.Status, body)
			}
			t.Logf("%s: cold request answered in %v", h, time.Since(start))

			// Scale down: the router drains the instance (nothing in
			// flight), so the stop does not wait for the 60s timeout.
			start = time.Now()
			e.scale.set("ns1", name, 0)
			// The timeout is 60s: well below it, however loaded the machine.
			e.waitState(rev, 50*time.Second, "back at zero", func(State) bool { return e.instances("ns1", name) == 0 })
			if took := time.Since(start); took > 45*time.Second {
				t.Errorf("scale down took %v: Drained did not end the drain", took)
			}
		})
	}
}
