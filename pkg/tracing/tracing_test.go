package tracing

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/router"
)

// zipkinSpan is a span as the Zipkin v2 API receives it.
type zipkinSpan struct {
	TraceID   string            `json:"traceId"`
	ParentID  string            `json:"parentId"`
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Kind      string            `json:"kind"`
	Timestamp int64             `json:"timestamp"` // microseconds
	Duration  int64             `json:"duration"`  // microseconds
	Tags      map[string]string `json:"tags"`
}

// collector is an in-process Zipkin collector.
type collector struct {
	mu    sync.Mutex
	spans []zipkinSpan
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v2/spans" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var spans []zipkinSpan
		if err := json.Unmarshal(b, &spans); err != nil {
			t.Errorf("collector: %v: %s", err, b)
		}
		c.mu.Lock()
		c.spans = append(c.spans, spans...)
		c.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL + "/api/v2/spans"
}

func (c *collector) byName() map[string]zipkinSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]zipkinSpan{}
	for _, s := range c.spans {
		m[s.Name] = s
	}
	return m
}

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

// TestSpansContinueTheTrace: a cold-started request with a sampled
// traceparent gives a proxy span in the client's trace, child of the
// client's span, with queue_wait and cold_start children, at the observed
// times; sample-rate 0 does not overrule a sampled parent.
func TestSpansContinueTheTrace(t *testing.T) {
	t.Parallel()
	col, url := startCollector(t)
	tr, err := New(Config{Backend: "zipkin", ZipkinEndpoint: url, SampleRate: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	start := time.Unix(1700000000, 0)
	tr.Observe(&router.RequestInfo{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "hello-00001-abc",
		Method: "GET", Host: "hello.default.localhost", Target: "/", Proto: "HTTP/1.1", Code: 200,
		Traceparent: "00-" + traceID + "-" + parentID + "-01",
		Start:       start, Duration: 300 * time.Millisecond, QueueWait: 250 * time.Millisecond, ColdStart: true})
	// An unsampled parent and no parent at sample-rate 0: no spans.
	tr.Observe(&router.RequestInfo{Revision: "r", Code: 200, Start: start, Duration: time.Millisecond,
		Traceparent: "00-" + traceID[:31] + "1-" + parentID + "-00"})
	tr.Observe(&router.RequestInfo{Revision: "r", Code: 200, Start: start, Duration: time.Millisecond})
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := col.byName()
	if len(col.spans) != 3 {
		t.Fatalf("%d spans arrived, want 3: %+v", len(col.spans), col.spans)
	}
	proxy, queue, cold := spans[SpanProxy], spans[SpanQueueWait], spans[SpanColdStart]
	if proxy.TraceID != traceID || proxy.ParentID != parentID || proxy.Kind != "SERVER" {
		t.Errorf("proxy span %+v: want trace %s, parent %s, kind SERVER", proxy, traceID, parentID)
	}
	for _, s := range []zipkinSpan{queue, cold} {
		if s.TraceID != traceID || s.ParentID != proxy.ID {
			t.Errorf("span %s: trace %s parent %s, want %s and the proxy span %s", s.Name, s.TraceID, s.ParentID, traceID, proxy.ID)
		}
		if s.Timestamp != start.UnixMicro() || s.Duration != 250000 {
			t.Errorf("span %s at %d for %dµs, want %d for 250000µs", s.Name, s.Timestamp, s.Duration, start.UnixMicro())
		}
	}
	if proxy.Timestamp != start.UnixMicro() || proxy.Duration != 300000 {
		t.Errorf("proxy span at %d for %dµs", proxy.Timestamp, proxy.Duration)
	}
	if proxy.Tags["knative.revision"] != "hello-00001" || proxy.Tags["http.response.status_code"] != "200" {
		t.Errorf("proxy tags %v", proxy.Tags)
	}
}

// TestSampleRate: with sample-rate 1 a request without a traceparent
// starts a trace of its own; a malformed traceparent is ignored.
func TestSampleRate(t *testing.T) {
	t.Parallel()
	col, url := startCollector(t)
	tr, err := New(Config{Backend: "zipkin", ZipkinEndpoint: url, SampleRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	tr.Observe(&router.RequestInfo{Revision: "r", Code: 503, Start: time.Now(), Duration: time.Millisecond, Traceparent: "00-zz-yy-01"})
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, ok := col.byName()[SpanProxy]
	if !ok || s.ParentID != "" || len(s.TraceID) != 32 || s.Tags["otel.status_code"] != "ERROR" {
		t.Fatalf("span %+v", s)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {Backend: "none"}} {
		if tr, err := New(c); tr != nil || err != nil {
			t.Errorf("%+v: %v %v, want no tracer", c, tr, err)
		}
	}
	for _, c := range []Config{{Backend: "jaeger"}, {Backend: "zipkin", ZipkinEndpoint: "http://x", SampleRate: 2}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	var nilTracer *Tracer
	nilTracer.Observe(&router.RequestInfo{Start: time.Now()}) // no panic
}

// FuzzParent: any traceparent value gives a valid span context or none.
func FuzzParent(f *testing.F) {
	for _, s := range []string{"", "00-" + traceID + "-" + parentID + "-01", "00-" + traceID + "-" + parentID + "-00",
		"ff-" + traceID + "-" + parentID + "-01", "00-00000000000000000000000000000000-" + parentID + "-01", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sc := Parent(v)
		if sc.IsValid() && (!sc.TraceID().IsValid() || !sc.SpanID().IsValid()) {
			t.Fatalf("%q: invalid ids in a valid context", v)
		}
	})
}

// TestStartedTrace: when knbox started the traceparent it sent the
// instance, the proxy span is that traceparent's span, the root of its
// trace, so the instance's spans hang under it.
func TestStartedTrace(t *testing.T) {
	t.Parallel()
	col, url := startCollector(t)
	tr, err := New(Config{Backend: "zipkin", ZipkinEndpoint: url, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	tr.Observe(&router.RequestInfo{Revision: "r", Code: 200, Start: time.Now(), Duration: time.Millisecond, QueueWait: time.Microsecond,
		Traceparent: "00-" + traceID + "-" + parentID + "-01", TraceStarted: true})
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := col.byName()
	p, q := spans[SpanProxy], spans[SpanQueueWait]
	if p.TraceID != traceID || p.ID != parentID || p.ParentID != "" {
		t.Errorf("proxy span %+v: want trace %s, id %s, no parent", p, traceID, parentID)
	}
	if q.TraceID != traceID || q.ParentID != parentID || q.ID == parentID {
		t.Errorf("queue_wait span %+v", q)
	}
}
