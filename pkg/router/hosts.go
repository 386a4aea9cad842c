package router

import (
	"math/rand/v2"
	"strings"

	"github.com/knbox/knbox/pkg/routing"
)

// target is what one host serves: a Route's weighted split, or a tag's
// revision.
type target struct {
	namespace, route string
	tagRevision      string // a tag host: this revision only
	// rewriteHost, when set, is the Host header the instance gets (a
	// DomainMapping's: its Route's cluster-local host, as Knative
	// rewrites it); the client's host stays in Forwarded.
	rewriteHost string
	splits      []routing.Split
	total       int64
}

// pick chooses the revision for one request; "" if there is none.
func (t *target) pick() string {
	if t.tagRevision != "" {
		return t.tagRevision
	}
	if t.total <= 0 {
		return ""
	}
	n := rand.Int64N(t.total)
	for _, s := range t.splits {
		if n < s.Percent {
			return s.Revision
		}
		n -= s.Percent
	}
	return t.splits[len(t.splits)-1].Revision
}

// hostIndex maps canonical hosts to targets. It is immutable once built.
type hostIndex struct {
	hosts map[string]*target
}

// rebuildHosts rebuilds the host indexes from the table. Rebuilds are
// serialised, so the last one stored read the newest table.
func (r *Router) rebuildHosts() {
	r.hostsMu.Lock()
	defer r.hostsMu.Unlock()
	routes, mappings := r.table.Routes(), r.table.Mappings()
	r.hosts.Store(buildIndex(routes, mappings, r.external, r.clusterDomain))
	r.local.Store(buildIndex(routes, mappings, false, r.clusterDomain))
}

// find returns the target of a canonical host for a client of scope: ""
// for the listener's own clients, else the namespace of the instance whose
// in-namespace listener took the request (see [Server.Namespace]); such a
// client reaches every Route (cluster-local ones included) and names one
// of its own namespace by its bare name, as a pod's search path does.
func (r *Router) find(host, scope string) *target {
	if scope == "" {
		return r.hosts.Load().hosts[host]
	}
	x := r.local.Load()
	if t := x.hosts[host]; t != nil {
		return t
	}
	if host != "" && !strings.Contains(host, ".") && !strings.HasPrefix(host, "[") {
		return x.hosts[host+"."+scope]
	}
	return nil
}

// ServesLocal reports whether host (canonical: lower case, no port, no
// final dot) names a Route for an instance's call: the platform's name
// server answers only such names.
func (r *Router) ServesLocal(host string) bool {
	return r.local.Load().hosts[host] != nil
}

// buildIndex indexes routes (ordered by namespace and name: when two claim
// the same host, the first wins). Published hosts win over the derived
// cluster-local addresses (name.namespace.svc.<clusterDomain> and its
// short forms).
func buildIndex(routes []routing.Route, mappings []routing.Mapping, external bool, clusterDomain string) *hostIndex {
	x := &hostIndex{hosts: map[string]*target{}}
	add := func(host string, t *target) {
		h := canonicalHost(host)
		if h == "" {
			return
		}
		if _, taken := x.hosts[h]; !taken {
			x.hosts[h] = t
		}
	}
	mains := make([]*target, len(routes))
	byName := make(map[string]*target, len(routes))
	for i, rt := range routes {
		t := &target{namespace: rt.Namespace, route: rt.Name}
		for _, s := range rt.Traffic {
			if s.Percent > 0 && s.Revision != "" {
				t.splits = append(t.splits, s)
				t.total += s.Percent
			}
		}
		mains[i] = t
		byName[rt.Namespace+"/"+rt.Name] = t
		if external && rt.ClusterLocal {
			continue
		}
		add(rt.Host, t)
		for host, rev := range rt.Tags {
			if rev != "" {
				add(host, &target{namespace: rt.Namespace, route: rt.Name, tagRevision: rev})
			}
		}
	}
	// A DomainMapping's host serves its Route's main split, whatever the
	// Route's visibility (mapping a cluster-local Service is how Knative
	// publishes it under a domain of one's own).
	for _, m := range mappings {
		if t := byName[m.Namespace+"/"+m.Route]; t != nil {
			mt := *t
			mt.rewriteHost = m.Route + "." + m.Namespace + ".svc." + clusterDomain
			add(m.Host, &mt)
		}
	}
	if !external {
		for i, rt := range routes {
			base := rt.Name + "." + rt.Namespace
			add(base+".svc."+clusterDomain, mains[i])
			add(base+".svc", mains[i])
			add(base, mains[i])
		}
	}
	return x
}

// canonicalHost returns host without its port, in lower case, without a
// trailing dot. It does not allocate when host is already canonical.
func canonicalHost(host string) string {
	switch {
	case strings.HasPrefix(host, "["):
		// An IP literal: "[::1]" or "[::1]:8080". No Route has one.
		if i := strings.IndexByte(host, ']'); i > 0 {
			host = host[:i+1]
		}
	case strings.Count(host, ":") == 1:
		host = host[:strings.IndexByte(host, ':')]
	}
	host = strings.TrimSuffix(host, ".")
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(host)
		}
	}
	return host
}
