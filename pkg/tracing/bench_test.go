package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/router"
)

// BenchmarkObserve is the cost, on the metrics goroutine, of the spans of
// one request: sampled (three spans to the batcher) and not sampled.
func BenchmarkObserve(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer srv.Close()
	for _, bc := range []struct {
		name string
		rate float64
	}{{"sampled", 1}, {"unsampled", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			tr, err := New(Config{Backend: "zipkin", ZipkinEndpoint: srv.URL, SampleRate: bc.rate})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Shutdown(context.Background()) }()
			info := &router.RequestInfo{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "i", Method: "GET",
				Host: "hello.default.localhost", Target: "/", Proto: "HTTP/1.1", Code: 200, Start: time.Now(), Duration: time.Millisecond,
				QueueWait: time.Microsecond, ColdStart: true}
			b.ReportAllocs()
			for b.Loop() {
				tr.Observe(info)
			}
		})
	}
}
