package replicas

import (
	"context"
	"net"
	"slices"
	"strings"
	"time"
)

// Endpoint is a ready instance: where the router sends requests.
type Endpoint struct {
	ID string
	// Dial connects to the instance's port inside its network namespace.
	Dial func(ctx context.Context) (net.Conn, error)
	// H2C says the port speaks HTTP/2 cleartext.
	H2C bool
}

// Config is what the router needs to know of a revision.
type Config struct {
	// ContainerConcurrency is the most requests in flight per instance; 0
	// is unlimited.
	ContainerConcurrency int
	// Timeout, ResponseStartTimeout and IdleTimeout are Knative's
	// timeoutSeconds, responseStartTimeoutSeconds and idleTimeoutSeconds;
	// 0 is none.
	Timeout, ResponseStartTimeout, IdleTimeout time.Duration
}

// Config returns what the router needs to know of a revision; false if the
// Manager does not run it.
func (m *Manager) Config(namespace, revision string) (Config, bool) {
	r := m.revision(namespace, revision)
	if r == nil {
		return Config{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	spec := r.rev.Spec
	var c Config
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

// Endpoints returns the revision's ready instances, oldest first. An
// instance handed out here is drained (Drained) before it is stopped.
func (m *Manager) Endpoints(namespace, revision string) []Endpoint {
	r := m.revision(namespace, revision)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ready []*instance
	for _, in := range r.instances {
		if in.ready && !in.stopping {
			ready = append(ready, in)
		}
	}
	slices.SortFunc(ready, func(a, b *instance) int {
		if c := a.born.Compare(b.born); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	eps := make([]Endpoint, 0, len(ready))
	pods := m.opts.Pods
	for _, in := range ready {
		in.exposed = true
		id := in.id
		eps = append(eps, Endpoint{ID: id, Dial: func(ctx context.Context) (net.Conn, error) { return pods.Dial(ctx, id) }, H2C: r.spec.h2c})
	}
	return eps
}

// Drained tells the Manager that the router has no request in flight on an
// instance that left Endpoints: a stopping instance goes on to SIGTERM.
func (m *Manager) Drained(namespace, revision, endpointID string) {
	// By the instance: a revision being removed is no longer found by
	// its name, and its instances drain all the same.
	m.mu.Lock()
	r := m.pods[endpointID]
	m.mu.Unlock()
	if r == nil || r.key != (key{namespace, revision}) {
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
