// Package tracing exports OpenTelemetry spans of the data plane's
// requests: the proxy span of each request, with its queue wait and cold
// start as children, continuing the trace of the request's W3C
// traceparent. Spans are made after the request ended, from what the
// router observed (router.RequestInfo), on the metrics goroutine: the
// request path does no tracing work of its own.
//
// It owns the tracer provider and its exporter, configured by Knative's
// config-tracing keys (backend none or zipkin, zipkin-endpoint,
// sample-rate, debug). It must not import the API server or the store.
package tracing

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	//lint:ignore SA1019 Knative v0.42's config-tracing names only the zipkin backend; OTLP waits for k8s.io/apiserver to leave otlptrace v1.19 (README, Tracing).
	"go.opentelemetry.io/otel/exporters/zipkin"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/knbox/knbox/pkg/router"
)

// Span names.
const (
	SpanProxy     = "knbox_proxy"
	SpanQueueWait = "queue_wait"
	SpanColdStart = "cold_start"
)

// DefaultQueueSize bounds the finished spans waiting for the exporter;
// more are dropped.
const DefaultQueueSize = 2048

// Config says where spans go: Knative's config-tracing.
type Config struct {
	// Backend is "none" (or empty) or "zipkin".
	Backend string
	// ZipkinEndpoint is the Zipkin v2 collector URL
	// (http://HOST:9411/api/v2/spans).
	ZipkinEndpoint string
	// SampleRate is the share of new traces sampled, 0 to 1; a request
	// whose traceparent is sampled (or not) keeps its parent's decision.
	SampleRate float64
	// Debug samples every request.
	Debug bool
	// QueueSize bounds the spans waiting for export; 0 means
	// DefaultQueueSize.
	QueueSize int
	// Client posts to the collector; nil: a client with a 10s timeout.
	Client *http.Client
}

// Tracer makes and exports the spans. Its zero value and nil trace nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New returns a Tracer, nil when cfg's backend is none.
func New(cfg Config) (*Tracer, error) {
	switch cfg.Backend {
	case "", "none":
		return nil, nil
	case "zipkin":
	default:
		return nil, fmt.Errorf("tracing: backend %q is not none or zipkin", cfg.Backend)
	}
	if cfg.SampleRate < 0 || cfg.SampleRate > 1 {
		return nil, fmt.Errorf("tracing: sample-rate %v is not between 0 and 1", cfg.SampleRate)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Client == nil {
		// A transport of its own: whatever else in the process closes
		// http.DefaultTransport's idle connections (httptest.Server.Close
		// does) would break an export in flight on a shared one.
		cfg.Client = &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	exp, err := zipkin.New(cfg.ZipkinEndpoint, zipkin.WithClient(cfg.Client))
	if err != nil {
		return nil, fmt.Errorf("tracing: zipkin-endpoint: %w", err)
	}
	var sampler sdktrace.Sampler = sdktrace.TraceIDRatioBased(cfg.SampleRate)
	if cfg.Debug {
		sampler = sdktrace.AlwaysSample()
	}
	res := resource.NewSchemaless(attribute.String("service.name", "knbox"))
	p := sdktrace.NewTracerProvider(
		sdktrace.WithIDGenerator(&ids{}),
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(cfg.QueueSize)),
		sdktrace.WithSampler(sdktrace.ParentBased(sampler)),
		sdktrace.WithResource(res))
	return &Tracer{provider: p, tracer: p.Tracer("github.com/knbox/knbox/pkg/tracing")}, nil
}

// Shutdown exports the spans still queued, until ctx ends.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ForceFlush exports the spans queued so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

var propagator = propagation.TraceContext{}

// Parent returns the span context of a W3C traceparent header value; the
// returned context is invalid when the value is not a valid traceparent.
func Parent(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Observe makes the spans of one finished request: the proxy span, a child
// of the request's traceparent when it has a valid one, with a queue_wait
// child for the time it waited for an instance and a cold_start child when
// that wait was for a revision with no ready instance.
func (t *Tracer) Observe(info *router.RequestInfo) {
	if t == nil || t.tracer == nil || info == nil || info.Start.IsZero() {
		return
	}
	ctx := context.Background()
	if sc := Parent(info.Traceparent); sc.IsValid() {
		if info.TraceStarted {
			// knbox started the trace: the instance's spans are children
			// of the traceparent's span, which is this proxy span.
			ctx = context.WithValue(ctx, startedKey{}, sc)
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	end := info.Start.Add(info.Duration)
	// The sampler decides at Start; the attributes are made only for
	// spans that record.
	ctx, span := t.tracer.Start(ctx, SpanProxy, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(info.Start))
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	span.SetAttributes(
		attribute.String("http.request.method", info.Method),
		attribute.String("server.address", info.Host),
		attribute.String("url.path", info.Target),
		attribute.String("network.protocol.name", info.Proto),
		attribute.Int("http.response.status_code", info.Code),
		attribute.Int64("http.response.body.size", info.ResponseBytes),
		attribute.String("knative.namespace", info.Namespace),
		attribute.String("knative.route", info.Route),
		attribute.String("knative.revision", info.Revision),
		attribute.String("knbox.instance", info.Instance),
		attribute.Bool("knbox.cold_start", info.ColdStart),
	)
	switch {
	case info.Code == 0:
		span.SetStatus(codes.Error, "no response was sent")
	case info.Code >= 500:
		span.SetStatus(codes.Error, strconv.Itoa(info.Code))
	}
	if info.QueueWait > 0 {
		waited := info.Start.Add(info.QueueWait)
		_, q := t.tracer.Start(ctx, SpanQueueWait, trace.WithTimestamp(info.Start))
		q.End(trace.WithTimestamp(waited))
		if info.ColdStart {
			_, c := t.tracer.Start(ctx, SpanColdStart, trace.WithTimestamp(info.Start),
				trace.WithAttributes(attribute.String("knative.revision", info.Revision)))
			c.End(trace.WithTimestamp(waited))
		}
	}
	span.End(trace.WithTimestamp(end))
}

type startedKey struct{}

// ids is the SDK's random ID generator, but for a trace knbox started: its
// root span takes the trace and span IDs of the traceparent that the
// router sent to the instance.
type ids struct{}

func (g *ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(startedKey{}).(trace.SpanContext); ok {
		return sc.TraceID(), sc.SpanID()
	}
	var t trace.TraceID
	for !t.IsValid() {
		g.read(t[:])
	}
	return t, g.NewSpanID(ctx, t)
}

func (g *ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		g.read(s[:])
	}
	return s
}

func (g *ids) read(b []byte) { _, _ = crand.Read(b) }
