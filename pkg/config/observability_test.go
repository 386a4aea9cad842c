package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestObservability(t *testing.T) {
	t.Parallel()
	if got := Default().Observability; !reflect.DeepEqual(got, Observability{QueueLength: DefaultObserverQueueLength, LogFormat: "text"}) {
		t.Errorf("default %+v", got)
	}
	c := mustParse(t, "observability:\n  logFormat: json\n  metricsAddr: 127.0.0.1:9090\n  queueLength: 16\n  accessLog:\n    enabled: true\n    path: /tmp/access.log\n")
	want := Observability{MetricsAddr: "127.0.0.1:9090", QueueLength: 16, LogFormat: "json", AccessLog: AccessLog{Enabled: true, Path: "/tmp/access.log"}}
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
	} {
		if _, err := parse([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want one naming %s", tt.yaml, err, tt.want)
		}
	}
}
