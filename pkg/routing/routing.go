// Package routing holds the routing table: what the Route controller
// publishes and the router serves. It is a leaf: it imports nothing of
// knbox, so the data plane can use it without the control plane.
package routing

import (
	"maps"
	"slices"
	"sort"
	"sync"
)

// Split is one weighted destination of a route.
type Split struct {
	Revision string // revision name, in the route's namespace
	Percent  int64
	Tag      string
}

// Route is one Knative Route as the data plane needs it.
type Route struct {
	Namespace string
	Name      string
	// Host is the route's main host; ClusterLocal routes are not served to
	// external clients.
	Host         string
	ClusterLocal bool
	// Traffic is the weighted split of the main host (percent sums to 100).
	Traffic []Split
	// Tags maps each tag's host to the revision it serves (100%).
	Tags map[string]string
}

// Mapping is one DomainMapping as the data plane needs it: Host serves
// what the Route Namespace/Route serves.
type Mapping struct {
	Host      string
	Namespace string
	Route     string
}

// Table is the set of published routes and domain mappings, safe for
// concurrent use. Readers get immutable snapshots.
type Table struct {
	mu       sync.RWMutex
	routes   map[string]Route   // namespace/name -> route
	mappings map[string]Mapping // host -> mapping
	subs     []func()
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{routes: map[string]Route{}, mappings: map[string]Mapping{}} }

// SetMapping publishes (or replaces) the mapping of m.Host.
func (t *Table) SetMapping(m Mapping) {
	t.mu.Lock()
	old, had := t.mappings[m.Host]
	t.mappings[m.Host] = m
	subs := t.subs
	t.mu.Unlock()
	if !had || old != m {
		for _, f := range subs {
			f()
		}
	}
}

// DeleteMapping removes the mapping of host.
func (t *Table) DeleteMapping(host string) {
	t.mu.Lock()
	_, ok := t.mappings[host]
	delete(t.mappings, host)
	subs := t.subs
	t.mu.Unlock()
	if ok {
		for _, f := range subs {
			f()
		}
	}
}

// Mappings returns every mapping, ordered by host.
func (t *Table) Mappings() []Mapping {
	t.mu.RLock()
	out := make([]Mapping, 0, len(t.mappings))
	for _, m := range t.mappings {
		out = append(out, m)
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// Set publishes (or replaces) a route. The subscribers hear of it only
// when it differs from the route already published: the Route
// reconciler publishes every Route of a namespace again whenever one of
// its Configurations or Revisions changes, and each notice rebuilt the
// router's host index (at 300 Routes, 175 MB allocated for one new
// Service).
func (t *Table) Set(r Route) {
	k := r.Namespace + "/" + r.Name
	t.mu.Lock()
	old, had := t.routes[k]
	t.routes[k] = r
	subs := t.subs
	t.mu.Unlock()
	if had && sameRoute(old, r) {
		return
	}
	for _, f := range subs {
		f()
	}
}

// sameRoute says whether a and b route alike.
func sameRoute(a, b Route) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.Host == b.Host && a.ClusterLocal == b.ClusterLocal &&
		slices.Equal(a.Traffic, b.Traffic) && maps.Equal(a.Tags, b.Tags)
}

// Delete removes a route.
func (t *Table) Delete(namespace, name string) {
	t.mu.Lock()
	_, ok := t.routes[namespace+"/"+name]
	delete(t.routes, namespace+"/"+name)
	subs := t.subs
	t.mu.Unlock()
	if ok {
		for _, f := range subs {
			f()
		}
	}
}

// Get returns a route by namespace and name.
func (t *Table) Get(namespace, name string) (Route, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.routes[namespace+"/"+name]
	return r, ok
}

// Routes returns every route, ordered by namespace and name.
func (t *Table) Routes() []Route {
	t.mu.RLock()
	out := make([]Route, 0, len(t.routes))
	for _, r := range t.routes {
		out = append(out, r)
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Subscribe calls f after every change (f must not block).
func (t *Table) Subscribe(f func()) {
	t.mu.Lock()
	t.subs = append(t.subs, f)
	t.mu.Unlock()
}
