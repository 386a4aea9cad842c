package config

import (
	"fmt"
	"path/filepath"
	"time"
)

// DefaultObserverQueueLength is how many finished requests may wait for
// the access log and tracing goroutine before more are dropped from the
// log and the spans (and counted in knbox_observer_dropped_total); the
// request metrics count every request on its own goroutine.
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
	// QueueLength bounds the finished requests waiting to be logged and
	// traced; 0 means DefaultObserverQueueLength.
	QueueLength int `json:"queueLength,omitempty"`
	// LogFormat is the format of knbox's own log on standard error: "text"
	// (default, slog's key=value) or "json" (one JSON object per line).
	// Flag --log-format.
	LogFormat string `json:"logFormat,omitempty"`
	// Console configures the web console served at /console/ on the API
	// address.
	Console Console `json:"console,omitempty"`
}

// Console configures the web console (package console). It reads through
// the API with the signed-in user's token, so RBAC decides what it shows.
type Console struct {
	// Disabled turns the console off (it is on by default).
	Disabled bool `json:"disabled,omitempty"`
	// MaxSessions bounds the signed-in browser sessions kept in memory; 0
	// means DefaultConsoleMaxSessions.
	MaxSessions int `json:"maxSessions,omitempty"`
	// SessionTTL is how long a session lasts after sign-in; 0 means
	// DefaultConsoleSessionTTL.
	SessionTTL Duration `json:"sessionTTL,omitempty"`
	// SampleInterval is how often the graphs sample the metrics; 0 means
	// DefaultConsoleSampleInterval.
	SampleInterval Duration `json:"sampleInterval,omitempty"`
	// Samples is how many samples each revision's graphs keep; 0 means
	// DefaultConsoleSamples.
	Samples int `json:"samples,omitempty"`
}

// The console's defaults: 10 minutes of graphs at one sample every 5s.
const (
	DefaultConsoleMaxSessions    = 1000
	DefaultConsoleSessionTTL     = Duration(12 * time.Hour)
	DefaultConsoleSampleInterval = Duration(5 * time.Second)
	DefaultConsoleSamples        = 120
	maxConsoleSamples            = 10000
	maxConsoleSessions           = 1 << 20
)

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
	c := &o.Console
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultConsoleMaxSessions
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultConsoleSessionTTL
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultConsoleSampleInterval
	}
	if c.Samples == 0 {
		c.Samples = DefaultConsoleSamples
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
	c := o.Console
	if c.MaxSessions < 1 || c.MaxSessions > maxConsoleSessions {
		return fmt.Errorf("observability.console.maxSessions: must be between 1 and %d, was %d", maxConsoleSessions, c.MaxSessions)
	}
	if c.SessionTTL < Duration(time.Minute) {
		return fmt.Errorf("observability.console.sessionTTL: must be at least 1m, was %s", time.Duration(c.SessionTTL))
	}
	if c.SampleInterval < Duration(100*time.Millisecond) || c.SampleInterval > Duration(time.Hour) {
		return fmt.Errorf("observability.console.sampleInterval: must be between 100ms and 1h, was %s", time.Duration(c.SampleInterval))
	}
	if c.Samples < 2 || c.Samples > maxConsoleSamples {
		return fmt.Errorf("observability.console.samples: must be between 2 and %d, was %d", maxConsoleSamples, c.Samples)
	}
	if p := o.AccessLog.Path; p != "" && !filepath.IsAbs(p) {
		return fmt.Errorf("observability.accessLog.path: %q must be an absolute path", p)
	}
	return nil
}
