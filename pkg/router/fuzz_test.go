package router

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/routing"
)

// FuzzHost sends arbitrary Host headers: the router never panics, and a host
// that is not a published one (after dropping the port and a trailing dot,
// ignoring case) gets 404.
func FuzzHost(f *testing.F) {
	for _, s := range []string{
		"hello.default.example.com", "HELLO.default.example.com:8080", "hello.default.example.com.",
		"tag-hello.default.example.com", "", ":", "[", "[::1]", "[::1]:80", "::1", "a:b:c", ".", "..",
		"hello.default.example.com:", "hello.default.example.com:99999", "\x00", "héllo.example.com",
		strings.Repeat("a", 5000), "hello.default", "hello.default.svc.cluster.local",
	} {
		f.Add(s)
	}
	table := routing.NewTable()
	table.Set(routing.Route{Namespace: "default", Name: "hello", Host: "hello.default.example.com",
		Traffic: []routing.Split{{Revision: "hello-1", Percent: 100}},
		Tags:    map[string]string{"tag-hello.default.example.com": "hello-1"}})
	// The revision is unknown, so a routed request is answered at once
	// (503) without an instance.
	r, err := New(Options{Table: table, Instances: newFakeInstances(), External: true})
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{"hello.default.example.com": true, "tag-hello.default.example.com": true}
	f.Fuzz(func(t *testing.T, host string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		routed := known[canonicalHost(host)]
		if !routed && w.Code != http.StatusNotFound {
			t.Fatalf("host %q: status %d, want 404", host, w.Code)
		}
		if routed && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("host %q: status %d, want 503 (routed to an unknown revision)", host, w.Code)
		}
		if w.Code == http.StatusNotFound && !strings.HasPrefix(w.Body.String(), "knbox: no route for host ") {
			t.Fatalf("host %q: 404 body %q", host, w.Body.String())
		}
		if strings.EqualFold(strings.TrimSuffix(host, "."), "hello.default.example.com") && !routed {
			t.Fatalf("host %q: canonical form %q is not the route's host", host, canonicalHost(host))
		}
	})
}
