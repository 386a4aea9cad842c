package daemon

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestResolvConfClusterDomain: an instance's search path and its name
// server's domain follow the configured cluster domain.
func TestResolvConfClusterDomain(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for domain, want := range map[string]string{
		"":              "search shop.svc.cluster.local svc.cluster.local cluster.local\n",
		"corp.internal": "search shop.svc.corp.internal svc.corp.internal corp.internal\n",
	} {
		n := newInstanceNet(domain, nil, log)
		if got := n.resolvConf("shop"); !strings.Contains(got, want) {
			t.Errorf("domain %q: resolv.conf\n%s\nwant a line %q", domain, got, want)
		}
		if wantDomain := strings.Fields(want)[3]; n.resolver.Domain != wantDomain {
			t.Errorf("domain %q: name server's domain %q, want %q", domain, n.resolver.Domain, wantDomain)
		}
	}
}
