package e2e

// Egress mode end to end: knbox serve with egress.enabled, runtime-info
// under runc and runsc, and a peer network namespace that this test makes
// to stand for the outside world (networktest: addresses of 198.18.0.0/15,
// which exist only on this machine).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/network/networktest"
)

type egressDial struct {
	OK    bool   `json:"ok"`
	Line  string `json:"line"`
	Error string `json:"error"`
}

type egressInterface struct {
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
}

func (e *contractEnv) dialFrom(t *testing.T, svc string, addr netip.AddrPort, ms int) egressDial {
	t.Helper()
	var d egressDial
	body := e.mustGet(t, svc, fmt.Sprintf("/dial?addr=%s&ms=%d", addr, ms))
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("/dial: %v\n%s", err, body)
	}
	return d
}

// eth0Addr is the instance's eth0 address, which must be in subnet.
func (e *contractEnv) eth0Addr(t *testing.T, svc string, subnet netip.Prefix) netip.Addr {
	t.Helper()
	body := e.mustGet(t, svc, "/net")
	var itfs []egressInterface
	if err := json.Unmarshal(body, &itfs); err != nil {
		t.Fatalf("/net: %v\n%s", err, body)
	}
	for _, i := range itfs {
		if i.Name != "eth0" {
			continue
		}
		for _, a := range i.Addrs {
			if p, err := netip.ParsePrefix(a); err == nil && subnet.Contains(p.Addr()) {
				return p.Addr()
			}
		}
	}
	t.Fatalf("%s: no eth0 address in %s: %s", svc, subnet, body)
	return netip.Addr{}
}

// egressState is what the data dir holds for egress (address=instance),
// and the firewall rules that name one address of subnet (knbox's own
// chains name the subnet only: there must be none).
func egressState(t *testing.T, dataDir string, subnet netip.Prefix) (addrs []string, rules []string) {
	t.Helper()
	dir := filepath.Join(dataDir, "cni", "ipam", network.DefaultEgressNetwork)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			id, _, _ := strings.Cut(string(b), "\n")
			addrs = append(addrs, e.Name()+"="+strings.TrimSpace(id))
		}
	}
	prefix := strings.TrimSuffix(subnet.Addr().String(), "0") // "198.18.N."
	for _, table := range []string{"filter", "nat"} {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v: %s", err, out)
		}
		for _, r := range strings.Split(string(out), "\n") {
			if strings.Contains(r, prefix) && strings.Contains(r, "/32") {
				rules = append(rules, r)
			}
		}
	}
	return addrs, rules
}

// TestEgress: with egress on, instances under runc and runsc reach the
// outside (masqueraded behind the host), but neither each other nor the
// host; stopping knbox, and a kill -9 followed by a restart, leave no
// address, veth or firewall rule behind.
func TestEgress(t *testing.T) {
	requireTool(t, "runc")
	requireTool(t, "runsc")
	networktest.RequireCNI(t)
	peer := networktest.NewPeer(t)
	tn := networktest.NewNet(t, "kbe")
	subnet, bridge := tn.Subnet, tn.Bridge
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("egress:\n  enabled: true\n  subnet: %s\n  bridge: %s\n", subnet, bridge)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Registered before the server starts, so it runs after it stopped.
	t.Cleanup(func() {
		eg, err := network.NewEgress(network.EgressConfig{Bridge: bridge, Subnet: subnet, StateDir: t.TempDir()})
		if err == nil {
			err = eg.Remove()
		}
		if err != nil {
			t.Errorf("remove the test's bridge: %v", err)
		}
	})
	// A host port on every host address: no instance may reach it.
	hl, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go networktest.Serve(hl, "host")
	hostPort := uint16(hl.Addr().(*net.TCPAddr).Port)

	e := newContractEnv(t, "--config", cfg)
	// On failure, what a killed or stuck knbox left attached goes too
	// (registered after the server, so it runs before its data dir goes).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		e.k.srv.stop()
		eg, err := network.NewEgress(network.EgressConfig{Bridge: bridge, Subnet: subnet, StateDir: filepath.Join(e.k.srv.dir, "cni")})
		if err != nil {
			t.Log(err)
			return
		}
		ids, _ := eg.Attached()
		for _, id := range ids {
			if err := eg.Detach(context.Background(), &network.NS{Name: id, Path: filepath.Join(network.DefaultRoot, id)}); err != nil {
				t.Log(err)
			}
		}
	})
	for _, rc := range contractRuntimeClasses {
		e.apply(t, contractService("egress", rc, corev1.Container{Image: e.infoRef}))
	}
	addrs := map[string]netip.Addr{}
	for _, rc := range contractRuntimeClasses {
		svc := "egress-" + rc
		e.waitReady(t, svc)
		addrs[rc] = e.eth0Addr(t, svc, subnet)
	}
	outside := peer.AddrPort()
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			svc := "egress-" + rc
			if d := e.dialFrom(t, svc, outside, 10000); !d.OK || d.Line != peer.HostAddr.String() {
				t.Errorf("to the outside %s: %+v, want the peer to see the host's address %s (masquerade)", outside, d, peer.HostAddr)
			}
			// Refusals. A drop shows as a timeout; the dial above shows
			// the path works, so 2 s is enough to tell.
			other := addrs["runc"]
			if rc == "runc" {
				other = addrs["runsc"]
			}
			// Platform names with egress on: the other instance's
			// Service through the router, by its short name.
			if f := e.fetchFrom(t, svc, "http://egress-"+map[string]string{"runc": "runsc", "runsc": "runc"}[rc]+"/healthz"); f.Status != 200 {
				t.Errorf("call by name with egress on: %+v", f)
			}
			if r := e.resolveFrom(t, svc, "nope.default.svc.cluster.local."); !r.NotFound {
				t.Errorf("unknown platform name with egress on: %+v, want NXDOMAIN", r)
			}
			for name, target := range map[string]netip.AddrPort{
				"other instance":            netip.AddrPortFrom(other, 8080),
				"host via the gateway":      netip.AddrPortFrom(subnet.Addr().Next(), hostPort),
				"host via another address":  netip.AddrPortFrom(peer.HostAddr, hostPort),
				"host via its own loopback": netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), hostPort),
			} {
				if d := e.dialFrom(t, svc, target, 2000); d.OK {
					t.Errorf("reached the %s at %s: %+v", name, target, d)
				}
			}
		})
	}

	srv := e.k.srv
	held, _ := egressState(t, srv.dir, subnet)
	if len(held) < 2 {
		t.Errorf("addresses held with two instances up: %v", held)
	}

	// kill -9, then a restart: Recover detaches what the killed process
	// left attached (it runs once the runtimes are probed, after the API
	// is up, so this waits for it).
	srv.kill()
	left, _ := egressState(t, srv.dir, subnet)
	if len(left) == 0 {
		t.Fatalf("kill -9 left no address to recover: the test would show nothing")
	}
	e.k.srv = startServerWith(t, srv.dir, srv.apiAddr, "--config", cfg)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		now, rules := egressState(t, srv.dir, subnet)
		still := rules
		for _, a := range left {
			if slices.Contains(now, a) {
				still = append(still, "address "+a)
			}
		}
		if len(still) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2m after the restart, what the killed knbox attached is still there:\n%s", strings.Join(still, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// And egress works after the restart, in a new instance, once the
	// data plane serves (it answers 503 while the runtimes are probed).
	for {
		code, body, err := e.get(t, "egress-runc", fmt.Sprintf("/dial?addr=%s&ms=10000", outside), 60*time.Second)
		if err == nil && code == 200 {
			var d egressDial
			if err := json.Unmarshal(body, &d); err != nil || !d.OK {
				t.Errorf("after the restart, to the outside: %s (%v)", body, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: GET /dial: %d %v %s", code, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A clean stop detaches every instance.
	{
		dir := e.k.srv.dir
		e.k.srv.stop()
		deadline := time.Now().Add(30 * time.Second)
		for {
			addrs, ours := egressState(t, dir, subnet)
			br, err := netlink.LinkByName(bridge)
			ports := 0
			if err == nil {
				links, _ := netlink.LinkList()
				for _, l := range links {
					if l.Attrs().MasterIndex == br.Attrs().Index {
						ports++
					}
				}
			}
			if len(addrs) == 0 && ports == 0 && len(ours) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after knbox stopped: addresses %v, %d bridge ports, rules %v", addrs, ports, ours)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
