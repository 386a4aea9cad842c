// Package networktest gives tests of egress mode what they need around it:
// a network of their own and a peer network namespace that stands for "the
// outside", so that no test traffic leaves the machine.
//
// Addresses come from 198.18.0.0/15, the range reserved for benchmarking
// (RFC 2544): neither private nor public, and here they exist only on this
// machine. A test's egress subnet is a random /24 of 198.18.0.0/16, a peer's
// link a random /30 of 198.19.0.0/16, and interface names carry random
// suffixes, so tests may run in parallel, in several packages at once.
package networktest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/network"
)

// RequireCNI skips t, or fails it when CI is set, unless root, the CNI
// plugins egress mode runs (hack/install-deps.sh installs Debian's
// containernetworking-plugins) and iptables are there.
func RequireCNI(t testing.TB) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, p := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			missing = "/usr/lib/cni/" + p
		}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		missing = "iptables"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s missing, and CI is set (hack/install-deps.sh installs it)", missing)
	}
	t.Skipf("%s missing (apt-get install containernetworking-plugins iptables)", missing)
}

// Net is a test's own egress network: a bridge name, a subnet, and the
// state directory of its Egresses (one knbox's data dir/cni).
type Net struct {
	Bridge   string
	Subnet   netip.Prefix
	StateDir string
}

// NewNet picks a random bridge name (prefix and six hex digits; prefix at
// most 9 characters), a random /24 of 198.18.0.0/16 and a state directory.
func NewNet(t testing.TB, prefix string) Net {
	t.Helper()
	rnd := random(t, 4)
	return Net{
		Bridge:   prefix + hex.EncodeToString(rnd[1:]),
		Subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, rnd[0], 0}), 24),
		StateDir: filepath.Join(t.TempDir(), "cni"),
	}
}

// Egress makes an Egress on n (all of n's share its state, as the Egresses
// of one knbox across restarts), and removes its bridge when the test ends.
func (n Net) Egress(t testing.TB) *network.Egress {
	t.Helper()
	eg, err := network.NewEgress(network.EgressConfig{Bridge: n.Bridge, Subnet: n.Subnet, StateDir: n.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eg.Remove(); err != nil {
			t.Error(err)
		}
	})
	return eg
}

// Peer is "the outside": a network namespace behind a veth whose host end
// has HostAddr. It answers TCP on Addr:8080 with the address it sees the
// caller at, one line.
type Peer struct {
	NS       *network.NS
	Addr     netip.Addr
	HostAddr netip.Addr
}

// Port is the port the peer answers on.
const Port = 8080

// AddrPort is the peer's address and port.
func (p *Peer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(p.Addr, Port) }

// NewPeer makes a peer; the test's cleanup removes it.
func NewPeer(t testing.TB) *Peer {
	t.Helper()
	rnd := random(t, 5)
	tag := hex.EncodeToString(rnd[2:])
	p30 := netip.AddrFrom4([4]byte{198, 19, rnd[0], rnd[1] &^ 3})
	p := &Peer{HostAddr: p30.Next(), Addr: p30.Next().Next()}

	root := filepath.Join(t.TempDir(), "netns")
	ns, err := network.CreateIn(root, "peer-"+tag)
	if err != nil {
		t.Fatal(err)
	}
	p.NS = ns
	t.Cleanup(func() {
		ns.Delete()
		for range 4 { // the root is bound onto itself, maybe more than once
			if unix.Unmount(root, unix.MNT_DETACH) != nil {
				break
			}
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hostVeth, peerVeth := "kth"+tag, "ktp"+tag
	la := netlink.NewLinkAttrs()
	la.Name = hostVeth
	must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peerVeth}))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostVeth); err == nil {
			netlink.LinkDel(l)
		}
	})
	h, err := netlink.LinkByName(hostVeth)
	must(err)
	must(netlink.AddrAdd(h, addr(p.HostAddr)))
	must(netlink.LinkSetUp(h))
	pv, err := netlink.LinkByName(peerVeth)
	must(err)
	nsh, err := netns.GetFromPath(ns.Path)
	must(err)
	defer nsh.Close()
	must(netlink.LinkSetNsFd(pv, int(nsh)))
	nl, err := netlink.NewHandleAt(nsh) // a netlink socket inside the peer
	must(err)
	defer nl.Close()
	inner, err := nl.LinkByName(peerVeth)
	must(err)
	must(nl.AddrAdd(inner, addr(p.Addr)))
	must(nl.LinkSetUp(inner))

	l, err := ns.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", Port))
	must(err)
	t.Cleanup(func() { l.Close() })
	go ServeRemoteAddr(l)
	return p
}

// RouteTo adds a route in the peer's namespace to prefix through the host,
// as a machine on the host's network with a route to the subnet would have.
func (p *Peer) RouteTo(t testing.TB, prefix netip.Prefix) {
	t.Helper()
	h, err := netns.GetFromPath(p.NS.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	dst := &net.IPNet{IP: prefix.Addr().AsSlice(), Mask: net.CIDRMask(prefix.Bits(), 32)}
	if err := nl.RouteAdd(&netlink.Route{Dst: dst, Gw: p.HostAddr.AsSlice()}); err != nil {
		t.Fatalf("route to %s in the peer: %v", prefix, err)
	}
}

// ServeRemoteAddr answers each connection on l with the caller's IP and a
// newline, until l is closed.
func ServeRemoteAddr(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		fmt.Fprintf(c, "%s\n", host)
		c.Close()
	}
}

// Serve answers each connection on l with line and a newline, until l is
// closed.
func Serve(l net.Listener, line string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s\n", line)
		c.Close()
	}
}

// DialFrom connects from inside ns to addr, any address (network.NS.Dial
// takes loopback only), and returns the first line the other side sends.
// Tests use it to check where an instance's packets may go.
func DialFrom(ns *network.NS, addr netip.AddrPort, timeout time.Duration) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The thread switches namespaces; if it cannot switch back, it
		// exits locked and the Go runtime ends it.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(ns.Path)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr.String(), timeout)
		if err := netns.Set(orig); err != nil {
			if c != nil {
				c.Close()
			}
			done <- result{err: err}
			return // locked: the thread ends
		}
		runtime.UnlockOSThread()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		done <- result{strings.TrimSpace(line), err}
	}()
	r := <-done
	return r.line, r.err
}

func addr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(30, 32)}}
}

func random(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
