package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/routing"
)

// oneInstance is one revision with one instance at a fixed address.
type oneInstance struct{ addr string }

func (o oneInstance) Config(_, rev string) (router.RevisionConfig, bool) {
	return router.RevisionConfig{Timeout: time.Minute}, rev == "bench-00001"
}

func (o oneInstance) Endpoints(_, rev string) []router.Endpoint {
	return []router.Endpoint{{ID: "bench-00001-0", Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", o.addr)
	}}}
}

func (oneInstance) Subscribe(func(string, string)) {}
func (oneInstance) Drained(string, string, string) {}

// BenchmarkRouterObserver measures a small GET through the router (its
// fast path) with no Observer, with the metrics, and with the metrics and
// the access log, side by side: the differences are what observing costs
// the request path.
func BenchmarkRouterObserver(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello, world\n")
	}))
	b.Cleanup(upstream.Close)
	const host = "bench.default.example.com"
	start := func(b *testing.B, obs router.Observer) string {
		table := routing.NewTable()
		table.Set(routing.Route{Namespace: "default", Name: "bench", Host: host,
			Traffic: []routing.Split{{Revision: "bench-00001", Percent: 100}}})
		r, err := router.New(router.Options{Table: table, Instances: oneInstance{upstream.Listener.Addr().String()}, External: true, Observer: obs})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go r.Run(ctx)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &router.Server{Router: r}
		go func() { _ = srv.Serve(ln) }()
		b.Cleanup(func() { _ = srv.Close(); cancel() })
		return "http://" + ln.Addr().String() + "/"
	}
	run := func(b *testing.B, obs router.Observer) {
		url := start(b, obs)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Host = host
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	with := func(b *testing.B, o Options) router.Observer {
		m := New(o)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
		return m
	}
	b.Run("off", func(b *testing.B) { run(b, nil) })
	b.Run("metrics", func(b *testing.B) { run(b, with(b, Options{})) })
	b.Run("metrics+accesslog", func(b *testing.B) { run(b, with(b, Options{AccessLog: io.Discard})) })
}

// BenchmarkObserveRequest is the observer's cost on the request goroutine
// alone, as knbox serve runs it by default (no access log, no tracing):
// 0 allocs/op, no hand-off to another goroutine.
func BenchmarkObserveRequest(b *testing.B) {
	m := New(Options{Labels: func(string, string) (string, string) { return "bench", "bench" }})
	info := &router.RequestInfo{Namespace: "default", Revision: "bench-00001", Instance: "i", Code: 200,
		Duration: time.Millisecond, QueueWait: time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRequest(info)
	}
}

// BenchmarkObserveRequestParallel is BenchmarkObserveRequest from every
// core at once, on one revision's series.
func BenchmarkObserveRequestParallel(b *testing.B) {
	m := New(Options{Labels: func(string, string) (string, string) { return "bench", "bench" }})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		info := &router.RequestInfo{Namespace: "default", Revision: "bench-00001", Instance: "i", Code: 200, Duration: time.Millisecond}
		for pb.Next() {
			m.ObserveRequest(info)
		}
	})
}

// TestObserveRequestAllocatesNothing holds BenchmarkObserveRequest's
// figure: counting a request allocates nothing once its series exist.
func TestObserveRequestAllocatesNothing(t *testing.T) {
	m := New(Options{Labels: func(string, string) (string, string) { return "bench", "bench" }})
	info := &router.RequestInfo{Namespace: "default", Revision: "bench-00001", Instance: "i", Code: 200,
		Duration: time.Millisecond, QueueWait: time.Microsecond}
	m.ObserveRequest(info)
	if n := testing.AllocsPerRun(100, func() { m.ObserveRequest(info) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
