package config

import (
	"fmt"
	"path/filepath"
)

// DefaultObserverQueueLength is how many finished requests may wait for
// the metrics and access log goroutine before more are dropped (and
// counted in knbox_observer_dropped_total).
const DefaultObserverQueueLength = 4096

// maxObserverQueueLength bounds observability.queueLength (each entry is
// a few hundred bytes).
const maxObserverQueueLength = 1 << 20

// Observability configures what knbox tells operators about the requests
// it serves. /metrics is always served on the API address, behind the
// API's authentication and RBAC (get on the non-resource URL /metrics,
// granted to the group system:monitoring).
type Observability struct {
	// MetricsAddr, if set, also serves /metrics over plain HTTP at this
	// host:port, without authentication: bind it to loopback or a network
	// only Prometheus reaches. Flag --metrics-addr.
	MetricsAddr string `json:"metricsAddr,omitempty"`
	// AccessLog writes one JSON line per data plane request. Off by
	// default.
	AccessLog AccessLog `json:"accessLog,omitempty"`
	// QueueLength bounds the finished requests waiting to be counted and
	// logged; 0 means DefaultObserverQueueLength.
	QueueLength int `json:"queueLength,omitempty"`
	// LogFormat is the format of knbox's own log on standard error: "text"
	// (default, slog's key=value) or "json" (one JSON object per line).
	// Flag --log-format.
	LogFormat string `json:"logFormat,omitempty"`
}

// AccessLog configures the access log.
type AccessLog struct {
	// Enabled turns the access log on (flag --access-log).
	Enabled bool `json:"enabled,omitempty"`
	// Path is the file the lines are appended to (made 0600); empty: the
	// daemon's standard error, beside its own log.
	Path string `json:"path,omitempty"`
}

func (o *Observability) applyDefaults() {
	if o.QueueLength == 0 {
		o.QueueLength = DefaultObserverQueueLength
	}
	if o.LogFormat == "" {
		o.LogFormat = "text"
	}
}

func (o *Observability) validate() error {
	if o.MetricsAddr != "" {
		if err := validateAddr("observability.metricsAddr", o.MetricsAddr); err != nil {
			return err
		}
	}
	if o.QueueLength < 1 || o.QueueLength > maxObserverQueueLength {
		return fmt.Errorf("observability.queueLength: must be between 1 and %d, was %d", maxObserverQueueLength, o.QueueLength)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return fmt.Errorf("observability.logFormat: %q is not text or json", o.LogFormat)
	}
	if p := o.AccessLog.Path; p != "" && !filepath.IsAbs(p) {
		return fmt.Errorf("observability.accessLog.path: %q must be an absolute path", p)
	}
	return nil
}
