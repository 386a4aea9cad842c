package routing

import (
	"reflect"
	"testing"
)

// TestSetNotifiesChanges: the subscribers hear of a route that is new or
// differs in any field, and not of one published again as it was.
func TestSetNotifiesChanges(t *testing.T) {
	// sameRoute compares each of Route's fields: a new one needs a line
	// there and a case here.
	if n := reflect.TypeOf(Route{}).NumField(); n != 6 {
		t.Fatalf("Route has %d fields; sameRoute and this test know 6", n)
	}
	tb := NewTable()
	notices := 0
	tb.Subscribe(func() { notices++ })
	base := func() Route {
		return Route{Namespace: "default", Name: "r", Host: "r.default.example.com",
			Traffic: []Split{{Revision: "r-1", Percent: 100}}, Tags: map[string]string{"t-r.default.example.com": "r-1"}}
	}
	tb.Set(base())
	if notices != 1 {
		t.Fatalf("%d notices for a new route, want 1", notices)
	}
	tb.Set(base()) // equal, in new slices and maps
	if notices != 1 {
		t.Fatalf("%d notices after the same route again, want 1", notices)
	}
	changes := []func(*Route){
		func(r *Route) { r.Host = "other.example.com" },
		func(r *Route) { r.ClusterLocal = true },
		func(r *Route) {
			r.Traffic[0].Percent = 50
			r.Traffic = append(r.Traffic, Split{Revision: "r-2", Percent: 50})
		},
		func(r *Route) { r.Traffic[0].Tag = "t" },
		func(r *Route) { r.Tags["t-r.default.example.com"] = "r-2" },
		func(r *Route) { r.Tags = nil },
	}
	for i, change := range changes {
		r := base()
		change(&r)
		before := notices
		tb.Set(r)
		if notices != before+1 {
			t.Errorf("change %d: no notice", i)
		}
		tb.Set(base())
	}
	// Another name is another route, however alike.
	other := base()
	other.Name = "r2"
	before := notices
	tb.Set(other)
	if notices != before+1 {
		t.Error("a second route: no notice")
	}
}
