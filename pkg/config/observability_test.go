package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestObservability(t *testing.T) {
	t.Parallel()
	defConsole := Console{MaxSessions: DefaultConsoleMaxSessions, SessionTTL: DefaultConsoleSessionTTL,
		SampleInterval: DefaultConsoleSampleInterval, Samples: DefaultConsoleSamples}
	if got := Default().Observability; !reflect.DeepEqual(got, Observability{QueueLength: DefaultObserverQueueLength, LogFormat: "text", Console: defConsole}) {
		t.Errorf("default %+v", got)
	}
	c := mustParse(t, "observability:\n  logFormat: json\n  metricsAddr: 127.0.0.1:9090\n  queueLength: 16\n  accessLog:\n    enabled: true\n    path: /tmp/access.log\n")
	want := Observability{MetricsAddr: "127.0.0.1:9090", QueueLength: 16, LogFormat: "json", AccessLog: AccessLog{Enabled: true, Path: "/tmp/access.log"}, Console: defConsole}
	if !reflect.DeepEqual(c.Observability, want) {
		t.Errorf("parsed %+v, want %+v", c.Observability, want)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"observability:\n  metricsAddr: nope\n", "observability.metricsAddr"},
		{"observability:\n  queueLength: -1\n", "observability.queueLength"},
		{"observability:\n  queueLength: 100000000\n", "observability.queueLength"},
		{"observability:\n  accessLog:\n    path: access.log\n", "observability.accessLog.path"},
		{"observability:\n  bogus: 1\n", "bogus"},
		{"observability:\n  logFormat: xml\n", "observability.logFormat"},
		{"observability:\n  console:\n    maxSessions: -1\n", "observability.console.maxSessions"},
		{"observability:\n  console:\n    sessionTTL: 1s\n", "observability.console.sessionTTL"},
		{"observability:\n  console:\n    sampleInterval: 1ms\n", "observability.console.sampleInterval"},
		{"observability:\n  console:\n    samples: 1\n", "observability.console.samples"},
		{"observability:\n  console:\n    samples: 100000\n", "observability.console.samples"},
	} {
		if _, err := parse([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one naming %s", tt.yaml, err, tt.want)
		}
	}
}

// TestTracing: config-tracing is read with Knative's parser; a backend,
// endpoint or sample rate knbox cannot use is refused naming the key.
func TestTracing(t *testing.T) {
	t.Parallel()
	tc, err := Default().Tracing()
	if err != nil || tc.Backend != "none" {
		t.Fatalf("default tracing %+v, %v", tc, err)
	}
	c := mustParse(t, "configMaps:\n  config-tracing:\n    backend: zipkin\n    zipkin-endpoint: http://127.0.0.1:9411/api/v2/spans\n    sample-rate: \"0.5\"\n")
	if tc, err := c.Tracing(); err != nil || tc.Backend != "zipkin" || tc.SampleRate != 0.5 || tc.ZipkinEndpoint != "http://127.0.0.1:9411/api/v2/spans" {
		t.Fatalf("tracing %+v, %v", tc, err)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"configMaps:\n  config-tracing:\n    backend: jaeger\n", "config-tracing"},
		{"configMaps:\n  config-tracing:\n    backend: zipkin\n", "config-tracing: zipkin tracing enabled without a zipkin endpoint"},
		{"configMaps:\n  config-tracing:\n    backend: zipkin\n    zipkin-endpoint: \"file:///x\"\n", "zipkin-endpoint"},
		{"configMaps:\n  config-tracing:\n    backend: zipkin\n    zipkin-endpoint: http://x/\n    sample-rate: \"2\"\n", "sample-rate"},
		{"configMaps:\n  config-tracing:\n    bogus: x\n", "bogus"},
	} {
		if _, err := parse([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one naming %s", tt.yaml, err, tt.want)
		}
	}
}
