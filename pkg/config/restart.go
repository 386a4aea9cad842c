package config

import (
	"fmt"
	"time"
)

// DefaultHandoverTimeout is how long an exiting knbox keeps its listening
// sockets for a successor, by default.
const DefaultHandoverTimeout = 10 * time.Second

// Restart says what happens to instances and listening sockets when knbox
// exits, so that a restart or an upgrade refuses no request and starts no
// instance again (see docs/restart.md).
type Restart struct {
	// KeepInstances leaves instances running when knbox exits (their shims
	// keep their output), for the next knbox to adopt; false stops them in
	// order (drain, SIGTERM, grace, SIGKILL). Default true.
	KeepInstances *bool `json:"keepInstances,omitempty"`
	// HandoverTimeout is how long an exiting knbox that opened its own
	// sockets (no systemd socket activation) keeps them, not accepting, for
	// the next knbox on the same data directory to take over; connections
	// wait in the backlog meanwhile. A Go duration; "0s" closes them at once.
	// Default 10s.
	HandoverTimeout string `json:"handoverTimeout,omitempty"`
}

// KeepsInstances is Restart.KeepInstances with its default.
func (c *Config) KeepsInstances() bool {
	return c.Restart.KeepInstances == nil || *c.Restart.KeepInstances
}

// HandoverWait is Restart.HandoverTimeout with its default.
func (c *Config) HandoverWait() (time.Duration, error) {
	if c.Restart.HandoverTimeout == "" {
		return DefaultHandoverTimeout, nil
	}
	d, err := time.ParseDuration(c.Restart.HandoverTimeout)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("restart.handoverTimeout: %q is not a duration of at least 0 (e.g. 10s)", c.Restart.HandoverTimeout)
	}
	return d, nil
}
