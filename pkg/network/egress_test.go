package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// requireEgress skips (fails in CI) unless the CNI plugins and iptables
// are installed (hack/install-deps.sh installs them).
func requireEgress(t testing.TB) {
	t.Helper()
	requireRoot(t)
	for _, bin := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/firewall", "/usr/lib/cni/host-local"} {
		if _, err := os.Stat(bin); err == nil {
			continue
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing, and CI is set (hack/install-deps.sh installs containernetworking-plugins)", bin)
		}
		t.Skipf("%s missing (apt-get install containernetworking-plugins)", bin)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("iptables missing, and CI is set")
		}
		t.Skip("iptables missing")
	}
}

// EgressTestNet is a test's own egress network: a bridge with a random name
// and a random /24 of 198.18.0.0/16, and a peer namespace that stands for
// "the outside", reached through a veth whose host end has a random /30 of
// 198.19.0.0/16. 198.18.0.0/15 is reserved for benchmarking (RFC 2544):
// neither private nor public, and here it exists only on this machine.
type egressTestNet struct {
	egress   *Egress
	peer     *NS
	peerAddr netip.Addr // the peer's address, behind the host
	hostAddr netip.Addr // the host's end of the peer's veth
}

func newEgressTestNet(t *testing.T, root string) *egressTestNet {
	t.Helper()
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	tag := hex.EncodeToString(rnd[:3])
	bridge := "kbt" + tag
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, rnd[0], 0}), 24)
	p30 := netip.AddrFrom4([4]byte{198, 19, rnd[1], rnd[2] &^ 3})
	hostAddr, peerAddr := p30.Next(), p30.Next().Next()

	eg, err := NewEgress(EgressConfig{Bridge: bridge, Subnet: subnet, StateDir: filepath.Join(t.TempDir(), "cni")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eg.Remove(); err != nil {
			t.Error(err)
		}
	})

	peer := create(t, root, "peer-"+tag)
	hostVeth, peerVeth := "kbh"+tag, "kbp"+tag
	la := netlink.NewLinkAttrs()
	la.Name = hostVeth
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peerVeth}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostVeth); err == nil {
			netlink.LinkDel(l)
		}
	})
	h, err := netlink.LinkByName(hostVeth)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(netlink.AddrAdd(h, &netlink.Addr{IPNet: ipnet(hostAddr, 30)}))
	must(netlink.LinkSetUp(h))
	pv, err := netlink.LinkByName(peerVeth)
	must(err)
	f, err := os.Open(peer.Path)
	must(err)
	defer f.Close()
	must(netlink.LinkSetNsFd(pv, int(f.Fd())))
	must(peer.in(func(func() error) error {
		l, err := netlink.LinkByName(peerVeth)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(peerAddr, 30)}); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}))
	return &egressTestNet{egress: eg, peer: peer, peerAddr: peerAddr, hostAddr: hostAddr}
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// dialFrom connects from inside ns to addr, which need not be loopback
// (unlike Dial): the tests check where an instance's packets may go.
func dialFrom(ns *NS, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.in(func(func() error) error {
		var err error
		c, err = net.DialTimeout("tcp4", addr, timeout)
		return err
	})
	return c, err
}

// TestEgress: an attached namespace reaches the outside (masqueraded
// behind the host), but neither another instance nor the host; Detach
// leaves no address, veth or firewall rule behind.
func TestEgress(t *testing.T) {
	requireEgress(t)
	root := testRoot(t)
	tn := newEgressTestNet(t, root)
	eg := tn.egress

	// The outside: answers with the address it sees the caller at.
	l, err := tn.peer.Listen("tcp4", "0.0.0.0:8080")
	if err != nil {
		t.Fatal(err)
	}
	serveRemoteAddr(t, l)

	a, b := create(t, root, "a"), create(t, root, "b")
	ctx := context.Background()
	addrA, err := eg.Attach(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	addrB, err := eg.Attach(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !eg.Subnet().Contains(addrA) || !eg.Subnet().Contains(addrB) || addrA == addrB {
		t.Fatalf("addresses %s and %s: want two in %s", addrA, addrB, eg.Subnet())
	}
	bl, err := b.Listen("tcp4", "0.0.0.0:8080")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, bl, "b")
	// A host port on every address: the bridge's, the peer veth's.
	hl, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, hl, "host")
	gateway := eg.Subnet().Addr().Next()

	t.Run("outside", func(t *testing.T) {
		c, err := dialFrom(a, netip.AddrPortFrom(tn.peerAddr, 8080).String(), 10*time.Second)
		if err != nil {
			t.Fatalf("instance to the outside: %v", err)
		}
		if got := greet(t, c); got != tn.hostAddr.String() {
			t.Errorf("the outside saw the instance at %q, want %s (masqueraded behind the host)", got, tn.hostAddr)
		}
	})
	t.Run("loopback-still-works", func(t *testing.T) {
		c, err := b.Dial(ctx, "tcp4", "127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		if got := greet(t, c); got != "b" {
			t.Errorf("got %q", got)
		}
	})
	// Refusals: a connection that would be answered must not be. A drop
	// shows as a timeout, so these wait 2 s each; the positive case above
	// shows the path works.
	for _, target := range []struct{ name, addr string }{
		{"other-instance", netip.AddrPortFrom(addrB, 8080).String()},
		{"host-via-gateway", netip.AddrPortFrom(gateway, uint16(port16(t, hl))).String()},
		{"host-via-other-address", netip.AddrPortFrom(tn.hostAddr, uint16(port16(t, hl))).String()},
	} {
		t.Run("refused/"+target.name, func(t *testing.T) {
			if c, err := dialFrom(a, target.addr, 2*time.Second); err == nil {
				c.Close()
				t.Errorf("instance reached %s (%s)", target.addr, target.name)
			}
		})
	}

	attached, err := eg.Attached()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(attached, ",") != "a,b" {
		t.Errorf("Attached() = %v, want [a b]", attached)
	}
	for _, ns := range []*NS{a, b} {
		if err := eg.Detach(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if attached, err := eg.Attached(); err != nil || len(attached) != 0 {
		t.Errorf("after Detach: Attached() = %v, %v; want none", attached, err)
	}
	for _, s := range []string{addrA.String() + "/32", addrB.String() + "/32", `id: \"a\"`, `id: \"b\"`} {
		if rules := iptablesSave(t); strings.Contains(rules, s) {
			t.Errorf("a firewall rule with %s left after Detach:\n%s", s, rules)
		}
	}
	if err := eg.Detach(ctx, a); err != nil {
		t.Errorf("a second Detach: %v", err)
	}
}

// TestEgressDetachAfterNamespaceGone: after a crash the namespace may be
// gone already; Detach still releases the address and the rules.
func TestEgressDetachAfterNamespaceGone(t *testing.T) {
	requireEgress(t)
	root := testRoot(t)
	eg := newEgressTestNet(t, root).egress
	ns, err := CreateIn(root, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eg.Attach(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := eg.Attached(); len(ids) != 1 || ids[0] != "gone" {
		t.Fatalf("Attached() = %v, want [gone]", ids)
	}
	if err := eg.Detach(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if ids, err := eg.Attached(); err != nil || len(ids) != 0 {
		t.Errorf("Attached() = %v, %v after Detach; want none", ids, err)
	}
	if strings.Contains(iptablesSave(t), `id: \"gone\"`) {
		t.Errorf("rules of the detached namespace left:\n%s", iptablesSave(t))
	}
}

func TestNewEgressRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  EgressConfig
		want string
	}{
		{EgressConfig{StateDir: dir}, "subnet"},
		{EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("fd00::/64")}, "IPv4"},
		{EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/31")}, "/30"},
		{EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.1/24")}, "host bits"},
		{EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/24"), Bridge: "a-name-longer-than-15"}, "15 characters"},
		{EgressConfig{Subnet: netip.MustParsePrefix("198.18.0.0/24")}, "StateDir"},
		{EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/24"), PluginDirs: []string{dir}}, "not found"},
	} {
		_, err := NewEgress(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEgress(%+v) = %v, want an error about %q", c.cfg, err, c.want)
		}
	}
}

// serveRemoteAddr answers each connection on l with the caller's IP.
func serveRemoteAddr(t testing.TB, l net.Listener) {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "%s\n", host)
			c.Close()
		}
	}()
}

func port16(t testing.TB, l net.Listener) int {
	t.Helper()
	return l.Addr().(*net.TCPAddr).Port
}

// iptablesSave is the filter and nat tables, without counters and
// comments on the tables' own state.
func iptablesSave(t testing.TB) string {
	t.Helper()
	var out []string
	for _, table := range []string{"filter", "nat"} {
		b, err := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v: %s", table, err, b)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, "")
}
