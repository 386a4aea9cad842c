package network_test

import (
	"context"
	"errors"
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
	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/network/networktest"
)

// nsRoot is a fresh root for the test's namespaces, unmounted at the end
// (CreateIn binds it onto itself).
func nsRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() {
		for range 4 {
			if unix.Unmount(root, unix.MNT_DETACH) != nil {
				break
			}
		}
	})
	return root
}

func newNS(t *testing.T, root, name string) *network.NS {
	t.Helper()
	ns, err := network.CreateIn(root, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Delete() })
	return ns
}

// TestEgress: an attached namespace reaches the outside (masqueraded
// behind the host), but neither another instance nor the host; Detach
// leaves no address, veth or firewall rule behind.
func TestEgress(t *testing.T) {
	networktest.RequireCNI(t)
	root := nsRoot(t)
	eg := networktest.NewNet(t, "kbt").Egress(t)
	peer := networktest.NewPeer(t)

	a, b := newNS(t, root, "a"), newNS(t, root, "b")
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
	defer bl.Close()
	go networktest.Serve(bl, "b")
	// A host port on every address: the bridge's, the peer veth's.
	hl, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go networktest.Serve(hl, "host")
	hostPort := uint16(hl.Addr().(*net.TCPAddr).Port)

	t.Run("outside", func(t *testing.T) {
		got, err := networktest.DialFrom(a, peer.AddrPort(), 10*time.Second)
		if err != nil {
			t.Fatalf("instance to the outside: %v", err)
		}
		if got != peer.HostAddr.String() {
			t.Errorf("the outside saw the instance at %q, want %s (masqueraded behind the host)", got, peer.HostAddr)
		}
	})
	t.Run("loopback-still-works", func(t *testing.T) {
		got, err := networktest.DialFrom(b, netip.MustParseAddrPort("127.0.0.1:8080"), 10*time.Second)
		if err != nil || got != "b" {
			t.Errorf("got %q, %v", got, err)
		}
	})
	// Refusals: a connection that would be answered must not be. A drop
	// shows as a timeout, so these wait 2 s each; the case above shows the
	// path works.
	for name, target := range map[string]netip.AddrPort{
		"other-instance":         netip.AddrPortFrom(addrB, 8080),
		"host-via-gateway":       netip.AddrPortFrom(eg.Subnet().Addr().Next(), hostPort),
		"host-via-other-address": netip.AddrPortFrom(peer.HostAddr, hostPort),
	} {
		t.Run("refused/"+name, func(t *testing.T) {
			if got, err := networktest.DialFrom(a, target, 2*time.Second); err == nil {
				t.Errorf("instance reached %s (%s): %q", target, name, got)
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
	for _, ns := range []*network.NS{a, b} {
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
	networktest.RequireCNI(t)
	root := nsRoot(t)
	eg := networktest.NewNet(t, "kbt").Egress(t)
	ns, err := network.CreateIn(root, "gone")
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
	if rules := iptablesSave(t); strings.Contains(rules, `id: \"gone\"`) {
		t.Errorf("rules of the detached namespace left:\n%s", rules)
	}
}

func TestNewEgressRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  network.EgressConfig
		want string
	}{
		{network.EgressConfig{StateDir: dir}, "subnet"},
		{network.EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("fd00::/64")}, "IPv4"},
		{network.EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/31")}, "/30"},
		{network.EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.1/24")}, "host bits"},
		{network.EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/24"), Bridge: "a-name-longer-than-15"}, "15 characters"},
		{network.EgressConfig{Subnet: netip.MustParsePrefix("198.18.0.0/24")}, "StateDir"},
		{network.EgressConfig{StateDir: dir, Subnet: netip.MustParsePrefix("198.18.0.0/24"), PluginDirs: []string{dir}}, "not found"},
	} {
		_, err := network.NewEgress(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEgress(%+v) = %v, want an error about %q", c.cfg, err, c.want)
		}
	}
}

// rulesOf is the lines of rules that name bridge: other tests on the
// machine (of other packages, of other checkouts) change the tables too.
func rulesOf(rules, bridge string) string {
	var out []string
	for _, l := range strings.Split(rules, "\n") {
		if strings.Contains(l, bridge) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// iptablesSave is the filter and nat tables' rules.
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

// TestEgressChains: a second Egress on the same bridge (a restart) leaves
// one jump to each of knbox's chains, attachments add no rule, and Remove
// takes the chains and the bridge away.
func TestEgressChains(t *testing.T) {
	networktest.RequireCNI(t)
	root := nsRoot(t)
	tn := networktest.NewNet(t, "kbc")
	ctx := context.Background()
	var last *network.Egress
	var rules string
	for i := range 2 {
		eg := tn.Egress(t)
		ns := newNS(t, root, fmt.Sprintf("c%d", i))
		if _, err := eg.Attach(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			rules = rulesOf(iptablesSave(t), tn.Bridge)
		}
		if err := eg.Detach(ctx, ns); err != nil {
			t.Fatal(err)
		}
		last = eg
	}
	if after := rulesOf(iptablesSave(t), tn.Bridge); after != rules {
		t.Errorf("rules differ after a second setup and an attachment:\nbefore:\n%s\nafter:\n%s", rules, after)
	}
	for _, jump := range []string{"-j KNBOX-IN-" + tn.Bridge, "-j KNBOX-FWD-" + tn.Bridge, "-j KNBOX-NAT-" + tn.Bridge, "-j KNBOX-OUT-" + tn.Bridge} {
		if n := strings.Count(rules, jump+"\n"); n != 1 {
			t.Errorf("%d jumps %q, want 1:\n%s", n, jump, rules)
		}
	}
	if err := last.Remove(); err != nil {
		t.Fatal(err)
	}
	if after := iptablesSave(t); strings.Contains(after, tn.Bridge) {
		t.Errorf("rules of %s left after Remove:\n%s", tn.Bridge, after)
	}
}

// TestEgressNoDirectInbound is the finding: with egress on, a peer with a
// route to the subnet got 200 from every instance, bypassing the router
// and cluster-local visibility. New connections into the bridge are
// dropped, from another machine (forwarded) and from the host itself; the
// instance still reaches the outside and knbox still reaches it through
// its loopback.
func TestEgressNoDirectInbound(t *testing.T) {
	networktest.RequireCNI(t)
	root := nsRoot(t)
	tn := networktest.NewNet(t, "kbd")
	eg := tn.Egress(t)
	peer := networktest.NewPeer(t)
	peer.RouteTo(t, tn.Subnet)
	a := newNS(t, root, "a")
	addr, err := eg.Attach(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer eg.Detach(context.Background(), a)
	l, err := a.Listen("tcp4", "0.0.0.0:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go networktest.Serve(l, "instance")
	target := netip.AddrPortFrom(addr, 8080)

	// The paths that must work, so that a refusal below means a drop.
	if got, err := networktest.DialFrom(a, peer.AddrPort(), 10*time.Second); err != nil || got != peer.HostAddr.String() {
		t.Fatalf("instance to the outside: %q, %v", got, err)
	}
	if got, err := networktest.DialFrom(a, netip.MustParseAddrPort("127.0.0.1:8080"), 10*time.Second); err != nil || got != "instance" {
		t.Fatalf("the instance's loopback: %q, %v", got, err)
	}
	if got, err := networktest.DialFrom(peer.NS, target, 2*time.Second); err == nil {
		t.Errorf("a peer with a route to %s reached the instance at %s: %q", tn.Subnet, target, got)
	}
	if c, err := net.DialTimeout("tcp4", target.String(), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("the host reached the instance at %s directly", target)
	}
	// The host's attempt is dropped as it leaves (UDP too would be), not
	// only its answer as it comes back.
	out, err := exec.Command("iptables", "-w", "-t", "filter", "-L", "KNBOX-OUT-"+tn.Bridge, "-v", "-n", "-x").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) < 3 || strings.Fields(lines[2])[0] == "0" {
		t.Errorf("KNBOX-OUT-%s dropped nothing:\n%s", tn.Bridge, out)
	}
}

// TestTearDownRecorded is the finding: turning egress off removed the
// default knbox0 (maybe another knbox's) and left a custom bridge. It now
// removes exactly what the state dir records (the attachments, the chains,
// the bridge), whatever the configuration says, and leaves another
// knbox's bridge, which an Egress of this state dir also refuses to use.
func TestTearDownRecorded(t *testing.T) {
	networktest.RequireCNI(t)
	root := nsRoot(t)
	ctx := context.Background()
	mine := networktest.NewNet(t, "kbm")
	other := networktest.NewNet(t, "kbo")
	eg, otherEg := mine.Egress(t), other.Egress(t)
	a := newNS(t, root, "a")
	if _, err := eg.Attach(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := newNS(t, root, "b")
	if _, err := otherEg.Attach(ctx, b); err != nil {
		t.Fatal(err)
	}
	defer otherEg.Detach(ctx, b)

	// This knbox's state may not take the other's bridge.
	thief, err := network.NewEgress(network.EgressConfig{Bridge: other.Bridge, Subnet: other.Subnet, StateDir: filepath.Join(t.TempDir(), "cni")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := thief.Attach(ctx, newNS(t, root, "c")); err == nil || !strings.Contains(err.Error(), "did not make") {
		t.Errorf("an Egress of another state dir used the bridge %s: %v", other.Bridge, err)
	}

	if err := network.TearDownRecorded(ctx, mine.StateDir, nil, root); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(mine.Bridge); err == nil {
		t.Errorf("bridge %s left", mine.Bridge)
	}
	rules := iptablesSave(t)
	if strings.Contains(rules, mine.Bridge) {
		t.Errorf("rules of %s left:\n%s", mine.Bridge, rules)
	}
	if _, err := os.Stat(mine.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left: %v", err)
	}
	if _, err := netlink.LinkByName(other.Bridge); err != nil {
		t.Errorf("the other knbox's bridge %s went: %v", other.Bridge, err)
	}
	for _, c := range []string{"KNBOX-FWD-", "KNBOX-IN-", "KNBOX-NAT-", "KNBOX-OUT-"} {
		if !strings.Contains(rules, "-N "+c+other.Bridge) {
			t.Errorf("the other knbox's chain %s%s went", c, other.Bridge)
		}
	}
	if err := network.TearDownRecorded(ctx, mine.StateDir, nil, root); err != nil {
		t.Errorf("a second teardown: %v", err)
	}
}

// TestEgressConfigChange: an Egress whose state dir records another bridge
// (egress.bridge changed) removes that one first.
func TestEgressConfigChange(t *testing.T) {
	networktest.RequireCNI(t)
	root := nsRoot(t)
	ctx := context.Background()
	before := networktest.NewNet(t, "kbb")
	after := networktest.NewNet(t, "kba")
	after.StateDir = before.StateDir
	eg := before.Egress(t)
	a := newNS(t, root, "a")
	if _, err := eg.Attach(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := eg.Detach(ctx, a); err != nil {
		t.Fatal(err)
	}
	eg2 := after.Egress(t)
	if _, err := eg2.Attach(ctx, a); err != nil {
		t.Fatal(err)
	}
	defer eg2.Detach(ctx, a)
	if _, err := netlink.LinkByName(before.Bridge); err == nil {
		t.Errorf("the earlier bridge %s is still there", before.Bridge)
	}
	if rules := iptablesSave(t); strings.Contains(rules, before.Bridge) {
		t.Errorf("rules of the earlier bridge left:\n%s", rules)
	}
}
