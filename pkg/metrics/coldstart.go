package metrics

import (
	"sync"
	"time"
)

// InstanceStatus is what the cold start histogram needs to know of an
// instance whose status changed.
type InstanceStatus struct {
	ID, Namespace, Revision string
	// Created is when the instance was asked for; Ready says it answers
	// its readiness probe; Gone that it is no more.
	Created     time.Time
	Ready, Gone bool
}

// starts follows instances to their first readiness.
type starts struct {
	mu      sync.Mutex
	since   time.Time       // instances created before are not timed (adopted ones)
	pending map[string]bool // instance id -> not yet ready once
}

// InstanceChanged is told each change of an instance's status; the first
// time an instance created since New is ready, the time since its creation
// is a cold start (knbox_instance_cold_start_seconds).
func (m *Metrics) InstanceChanged(s InstanceStatus) {
	st := &m.starts
	st.mu.Lock()
	pending, seen := st.pending[s.ID]
	switch {
	case s.Gone:
		delete(st.pending, s.ID)
	case !seen:
		st.pending[s.ID] = !s.Ready && !s.Created.Before(st.since)
	case pending && s.Ready:
		st.pending[s.ID] = false
	default:
		pending = false
	}
	st.mu.Unlock()
	if pending && s.Ready && !s.Gone {
		m.ObserveColdStart(s.Namespace, s.Revision, time.Since(s.Created))
	}
}
