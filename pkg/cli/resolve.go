package cli

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Mapping is one resource the server serves, in one version.
type Mapping struct {
	Group      string
	Version    string
	Resource   string // plural, as in URLs
	Kind       string
	Singular   string
	ShortNames []string
	Categories []string
	Namespaced bool
}

// GroupVersionResource is the mapping's address for the dynamic client.
func (m Mapping) GroupVersionResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: m.Group, Version: m.Version, Resource: m.Resource}
}

// GroupVersionKind is the kind the mapping's objects carry.
func (m Mapping) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: m.Group, Version: m.Version, Kind: m.Kind}
}

// KindGroup names the kind as kubectl prints it: "service.serving.knative.dev",
// "namespace".
func (m Mapping) KindGroup() string {
	if m.Group == "" {
		return strings.ToLower(m.Kind)
	}
	return strings.ToLower(m.Kind) + "." + m.Group
}

// Ref names one object as kubectl prints it: "service.serving.knative.dev/hello".
func (m Mapping) Ref(name string) string { return m.KindGroup() + "/" + name }

// UnknownResourceError says that a name resolves to no resource type.
type UnknownResourceError struct {
	Name       string
	Suggestion string // closest known name, or ""
}

func (e *UnknownResourceError) Error() string {
	msg := fmt.Sprintf("the server doesn't have a resource type %q", e.Name)
	if e.Suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", e.Suggestion)
	}
	return msg
}

// Resolver maps the names users type (plural, singular, short names, kind,
// "resource.group", "resource.version.group", categories) and the kinds
// manifests carry to resources, from the server's discovery documents.
type Resolver struct {
	all       []Mapping         // every served version, discovery order
	preferred map[string]string // group -> preferred version
	groups    []string          // discovery order, core group first
}

// NewResolver builds a Resolver from discovery: the API groups (for their
// preferred versions; the core group may be absent) and the resource lists
// of every served group version.
func NewResolver(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) *Resolver {
	r := &Resolver{preferred: map[string]string{}}
	for _, g := range groups {
		if g == nil {
			continue
		}
		if g.PreferredVersion.Version != "" {
			r.preferred[g.Name] = g.PreferredVersion.Version
		} else if len(g.Versions) > 0 {
			r.preferred[g.Name] = g.Versions[0].Version
		}
	}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		if _, ok := r.preferred[gv.Group]; !ok {
			r.preferred[gv.Group] = gv.Version
		}
		if !slices.Contains(r.groups, gv.Group) {
			r.groups = append(r.groups, gv.Group)
		}
		for _, res := range l.APIResources {
			if strings.Contains(res.Name, "/") {
				continue // subresource
			}
			m := Mapping{
				Group: gv.Group, Version: gv.Version, Resource: res.Name, Kind: res.Kind,
				Singular: res.SingularName, ShortNames: res.ShortNames, Categories: res.Categories,
				Namespaced: res.Namespaced,
			}
			if m.Singular == "" {
				m.Singular = strings.ToLower(res.Kind)
			}
			r.all = append(r.all, m)
		}
	}
	// The core group wins ties, as in kubectl.
	slices.SortStableFunc(r.groups, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == "":
			return -1
		case b == "":
			return 1
		}
		return 0
	})
	return r
}

// Mappings returns every resource in its preferred version.
func (r *Resolver) Mappings() []Mapping {
	var out []Mapping
	for _, g := range r.groups {
		for _, m := range r.all {
			if m.Group == g && m.Version == r.preferred[g] {
				out = append(out, m)
			}
		}
	}
	return out
}

// ForKind finds the resource of a manifest's apiVersion and kind.
func (r *Resolver) ForKind(gvk schema.GroupVersionKind) (Mapping, error) {
	for _, m := range r.all {
		if m.Group == gvk.Group && m.Version == gvk.Version && m.Kind == gvk.Kind {
			return m, nil
		}
	}
	for _, m := range r.all {
		if m.Group == gvk.Group && m.Kind == gvk.Kind {
			return Mapping{}, fmt.Errorf("no matches for kind %q in version %q (the server serves it in %s)",
				gvk.Kind, gvk.GroupVersion().String(), m.GroupVersionKind().GroupVersion().String())
		}
	}
	return Mapping{}, fmt.Errorf("no matches for kind %q in version %q", gvk.Kind, gvk.GroupVersion().String())
}

// Resolve finds the one resource a name means: a plural, singular or short
// name, a kind, or "resource.group" / "resource.version.group", all
// case-insensitive.
func (r *Resolver) Resolve(name string) (Mapping, error) {
	if m, ok := r.lookup(strings.ToLower(strings.TrimSpace(name))); ok {
		return m, nil
	}
	return Mapping{}, r.unknown(name)
}

// ResolveAll resolves a comma-separated list of names; a name that is no
// resource but a category ("all", "knative") expands to the category's
// resources. Duplicates are dropped, order kept.
func (r *Resolver) ResolveAll(names string) ([]Mapping, error) {
	var out []Mapping
	add := func(m Mapping) {
		for _, o := range out {
			if o.Group == m.Group && o.Resource == m.Resource {
				return
			}
		}
		out = append(out, m)
	}
	for _, n := range strings.Split(names, ",") {
		key := strings.ToLower(strings.TrimSpace(n))
		if key == "" {
			continue
		}
		if m, ok := r.lookup(key); ok {
			add(m)
			continue
		}
		found := false
		for _, m := range r.Mappings() {
			if slices.Contains(m.Categories, key) {
				add(m)
				found = true
			}
		}
		if !found {
			return nil, r.unknown(n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no resource type given in %q", names)
	}
	return out, nil
}

func (r *Resolver) lookup(key string) (Mapping, bool) {
	if key == "" {
		return Mapping{}, false
	}
	if m, ok := r.match(key, "", "", false); ok {
		return m, true
	}
	// resource.group, then resource.version.group.
	res, rest, ok := strings.Cut(key, ".")
	if !ok {
		return Mapping{}, false
	}
	if m, ok := r.match(res, rest, "", true); ok {
		return m, true
	}
	if ver, group, ok := strings.Cut(rest, "."); ok {
		if m, ok := r.match(res, group, ver, true); ok {
			return m, true
		}
	}
	return Mapping{}, false
}

// match finds key among the names of the resources of group (any group
// when !inGroup) in version (the preferred one when ""). Plural names win
// over singular, short and kind names; earlier groups win over later.
func (r *Resolver) match(key, group, version string, inGroup bool) (Mapping, bool) {
	matchers := []func(Mapping) bool{
		func(m Mapping) bool { return strings.ToLower(m.Resource) == key },
		func(m Mapping) bool { return strings.ToLower(m.Singular) == key },
		func(m Mapping) bool {
			return slices.ContainsFunc(m.ShortNames, func(s string) bool { return strings.ToLower(s) == key })
		},
		func(m Mapping) bool { return strings.ToLower(m.Kind) == key },
	}
	for _, f := range matchers {
		for _, g := range r.groups {
			if inGroup && g != group {
				continue
			}
			v := version
			if v == "" {
				v = r.preferred[g]
			}
			for _, m := range r.all {
				if m.Group == g && m.Version == v && f(m) {
					return m, true
				}
			}
		}
	}
	return Mapping{}, false
}

func (r *Resolver) unknown(name string) error {
	var names []string
	for _, m := range r.Mappings() {
		names = append(names, strings.ToLower(m.Resource), strings.ToLower(m.Singular))
		for _, s := range m.ShortNames {
			names = append(names, strings.ToLower(s))
		}
	}
	return &UnknownResourceError{Name: name, Suggestion: suggest(strings.ToLower(name), names)}
}

// suggest picks the known name closest to s: the smallest edit distance
// if it is at most 2 (and less than s is long), else a name s is a prefix of or that is a prefix of
// s (at least two letters shared); ties go to the shorter, then the
// alphabetically first name. "" when nothing is close.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if k == "" || k == s {
			continue
		}
		d := editDistance(s, k)
		if d >= len(s) {
			continue // "x" is 2 edits from every 2-letter name
		}
		if d < bestDist || (d == bestDist && best != "" && better(k, best)) {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return best
	}
	if len(s) < 2 {
		return ""
	}
	for _, k := range known {
		if len(k) < 2 || k == s || !(strings.HasPrefix(k, s) || strings.HasPrefix(s, k)) {
			continue
		}
		if best == "" || better(k, best) {
			best = k
		}
	}
	return best
}

func better(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// editDistance is the Levenshtein distance of a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
