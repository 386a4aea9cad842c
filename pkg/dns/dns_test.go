package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// serve starts r on a loopback socket and returns a Go resolver that asks it.
func serve(t *testing.T, r *Resolver) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, pc) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func TestPlatformNames(t *testing.T) {
	router := netip.MustParseAddr("127.0.0.2")
	r := &Resolver{Router: router, Exists: func(host string) bool { return host != "gone.default.svc.cluster.local" }}
	res := serve(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"hello.default.svc.cluster.local", "Hello.Default.svc.cluster.local.", "tag-a.ns1.svc.cluster.local"} {
		addrs, err := res.LookupNetIP(ctx, "ip4", name)
		if err != nil || len(addrs) != 1 || addrs[0] != router {
			t.Errorf("%s: %v, %v; want %v", name, addrs, err, router)
		}
		// AAAA: the name exists without IPv6 records.
		if addrs, err := res.LookupNetIP(ctx, "ip6", name); err == nil || len(addrs) != 0 {
			t.Errorf("%s AAAA: %v, %v; want no address", name, addrs, err)
		}
	}
	for _, name := range []string{"gone.default.svc.cluster.local", "a.b.c.svc.cluster.local", "svc.cluster.local",
		"cluster.local", "x.cluster.local", "-a.b.svc.cluster.local", "example.com"} {
		_, err := res.LookupNetIP(ctx, "ip4", name)
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: %v; want NXDOMAIN", name, err)
		}
	}
}

func TestForward(t *testing.T) {
	// An upstream on loopback that knows one name.
	up := &Resolver{Domain: "example.com", Router: netip.MustParseAddr("127.0.0.9"),
		Exists: func(string) bool { return true }}
	upPC, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = up.Serve(ctx, upPC) }()

	r := &Resolver{Router: netip.MustParseAddr("127.0.0.2"), Upstream: []string{upPC.LocalAddr().String()}}
	res := serve(t, r)
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	addrs, err := res.LookupNetIP(lctx, "ip4", "web.shop.svc.example.com")
	if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("127.0.0.9") {
		t.Errorf("forwarded: %v, %v", addrs, err)
	}
	// Names of the cluster domain are never forwarded.
	addrs, err = res.LookupNetIP(lctx, "ip4", "a.b.svc.cluster.local")
	if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("platform name with upstream: %v, %v", addrs, err)
	}
}

func TestForwardUnanswered(t *testing.T) {
	// An upstream that never answers: the client gets SERVFAIL, in time.
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := &Resolver{Router: netip.MustParseAddr("127.0.0.2"), Upstream: []string{silent.LocalAddr().String()}, Timeout: 50 * time.Millisecond}
	res := serve(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := res.LookupNetIP(ctx, "ip4", "example.com"); err == nil {
		t.Fatal("lookup through a silent upstream succeeded")
	}
}

func TestAnswerRefusesOddQueries(t *testing.T) {
	r := &Resolver{Router: netip.MustParseAddr("127.0.0.2")}
	if resp, fwd := r.Answer([]byte{1, 2, 3}); resp != nil || fwd {
		t.Errorf("short: %v %v", resp, fwd)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, OpCode: 2})
	q, _ := b.Finish()
	resp, _ := r.Answer(q)
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil || h.RCode != dnsmessage.RCodeNotImplemented || h.ID != 7 {
		t.Errorf("opcode 2: %+v %v", h, err)
	}
	b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 8})
	q, _ = b.Finish()
	resp, _ = r.Answer(q)
	if h, err := p.Start(resp); err != nil || h.RCode != dnsmessage.RCodeFormatError {
		t.Errorf("no question: %+v %v", h, err)
	}
}

func FuzzAnswer(f *testing.F) {
	for _, name := range []string{"a.b.svc.cluster.local.", "example.com.", "cluster.local."} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		f.Add(q)
	}
	f.Add([]byte{})
	r := &Resolver{Router: netip.MustParseAddr("127.0.0.2")}
	f.Fuzz(func(t *testing.T, q []byte) {
		resp, fwd := r.Answer(q)
		if fwd {
			t.Fatal("forward without upstream")
		}
		if resp != nil {
			var p dnsmessage.Parser
			h, err := p.Start(resp)
			if err != nil || !h.Response {
				t.Fatalf("answer does not parse: %v", err)
			}
		}
	})
}
