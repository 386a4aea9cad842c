package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/router"
)

// TestTotals: the console's totals are the registry's revision counters,
// latency buckets summed over response codes, and actual pods (a revision
// the autoscaler knows and that served nothing has no latency buckets).
func TestTotals(t *testing.T) {
	t.Parallel()
	m := New(Options{})
	for _, code := range []int{200, 200, 500} {
		m.count(&router.RequestInfo{Namespace: "default", Revision: "r1", Instance: "i", Code: code, Duration: 15 * time.Millisecond})
	}
	m.count(&router.RequestInfo{Namespace: "other", Revision: "r2", Code: 200, Duration: time.Hour})
	if err := m.AddAutoscaler(func() []Scale {
		return []Scale{{Namespace: "default", Revision: "r1", Actual: 2}, {Namespace: "default", Revision: "idle"}}
	}); err != nil {
		t.Fatal(err)
	}
	ts, err := m.Totals()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]RevisionTotals{}
	for _, x := range ts {
		got[x.Namespace+"/"+x.Revision] = x
	}
	r1, r2, idle := got["default/r1"], got["other/r2"], got["default/idle"]
	if idle.Revision != "idle" || idle.Instances != 0 || idle.Requests != 0 || idle.Latency != nil {
		t.Errorf("a revision at zero that served nothing: %+v", idle)
	}
	if len(got) != 3 || r1.Requests != 3 || r1.Instances != 2 || r2.Requests != 1 || r2.Instances != -1 {
		t.Fatalf("totals %+v", ts)
	}
	if n := len(LatencyBounds()); len(r1.Latency) != n+1 {
		t.Fatalf("%d latency buckets, want %d", len(r1.Latency), n+1)
	}
	// 15ms falls in the (10, 20] bucket: index 2 of 5, 10, 20, ...
	if r1.Latency[1] != 0 || r1.Latency[2] != 3 || r1.Latency[len(r1.Latency)-1] != 3 {
		t.Errorf("r1 latency %v", r1.Latency)
	}
	if r2.Latency[len(r2.Latency)-2] != 0 || r2.Latency[len(r2.Latency)-1] != 1 {
		t.Errorf("r2 latency %v: an hour is beyond every finite bound", r2.Latency)
	}
}

// TestTraceHook: Run gives each observed request to Options.Trace.
func TestTraceHook(t *testing.T) {
	t.Parallel()
	got := make(chan *router.RequestInfo, 1)
	m := New(Options{Trace: func(i *router.RequestInfo) { got <- i }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	info := &router.RequestInfo{Namespace: "default", Revision: "r", Code: 200}
	m.ObserveRequest(info)
	select {
	case g := <-got:
		if *g != *info {
			t.Fatalf("traced %+v", g)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request was not traced")
	}
}
