package instance

import (
	"slices"
	"strings"
	"time"

	"github.com/knbox/knbox/pkg/router"
)

var _ router.Instances = (*Manager)(nil)

// Config returns what the router needs to know of a revision; false if the
// Manager does not run it.
func (m *Manager) Config(namespace, revision string) (router.RevisionConfig, bool) {
	r := m.revision(namespace, revision)
	if r == nil {
		return router.RevisionConfig{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	spec := r.rev.Spec
	var c router.RevisionConfig
	if spec.ContainerConcurrency != nil {
		c.ContainerConcurrency = int(*spec.ContainerConcurrency)
	}
	c.Timeout = seconds(spec.TimeoutSeconds)
	c.ResponseStartTimeout = seconds(spec.ResponseStartTimeoutSeconds)
	c.IdleTimeout = seconds(spec.IdleTimeoutSeconds)
	return c, true
}

func seconds(s *int64) time.Duration {
	if s == nil || *s <= 0 {
		return 0
	}
	return time.Duration(*s) * time.Second
}

// Endpoints returns the revision's ready instances, oldest first. Each
// dials the container's port inside the instance's network namespace.
func (m *Manager) Endpoints(namespace, revision string) []router.Endpoint {
	r := m.revision(namespace, revision)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ready []*instance
	for _, in := range r.instances {
		if in.ready && !in.stopping && in.ns != nil {
			ready = append(ready, in)
		}
	}
	slices.SortFunc(ready, func(a, b *instance) int {
		if c := a.born.Compare(b.born); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	eps := make([]router.Endpoint, 0, len(ready))
	for _, in := range ready {
		in.exposed = true
		eps = append(eps, router.Endpoint{ID: in.id, Dial: in.dialPort, H2C: r.spec.h2c})
	}
	return eps
}

// Drained tells the Manager that the router has no request in flight on an
// instance that left Endpoints: a stopping instance goes on to SIGTERM.
func (m *Manager) Drained(namespace, revision, endpointID string) {
	r := m.revision(namespace, revision)
	if r == nil {
		return
	}
	r.mu.Lock()
	in := r.instances[endpointID]
	stopping := false
	if in != nil {
		stopping = in.stopping
		if !in.ready || in.stopping {
			in.exposed = false
		}
	}
	r.mu.Unlock()
	if stopping {
		in.drained()
	}
}
