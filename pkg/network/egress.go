package network

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

// Egress mode gives instances outbound network, when the operator turns it
// on, with the standard CNI plugins (Debian's containernetworking-plugins):
// "bridge" puts a veth into the namespace as eth0 and plugs its other end
// into a host bridge that is the default gateway; "host-local" hands out
// the addresses. What does not change per instance is set up once, per
// bridge, in chains of knbox's own (names end with the bridge's name):
//   - KNBOX-NAT-<bridge> (nat, from POSTROUTING) masquerades what leaves the
//     subnet;
//   - KNBOX-FWD-<bridge> (filter, first in FORWARD) accepts what instances
//     send out and the answers, even where FORWARD's policy drops, and
//     drops every other packet bound for the bridge: nothing outside
//     reaches an instance directly, even a peer with a route to the subnet
//     (knbox reaches instances through their loopback, never the bridge);
//   - KNBOX-OUT-<bridge> (filter, from OUTPUT for packets out to the
//     bridge) drops new connections from the host itself, so local users
//     do not bypass the router either;
//   - KNBOX-IN-<bridge> (filter, and ip6tables, from INPUT for packets in
//     from the bridge) drops everything: nothing from an instance is
//     delivered to the host, whichever host address it names.
//
// So an attachment is a veth and an address, nothing else: attaching costs
// two plugin runs and no firewall change, and nothing per instance can be
// left in the firewall by a crash. (The bridge plugin's ipMasq and the
// firewall plugin would add rules per instance, and the bridge plugin
// removes its masquerade rules only while the namespace still exists.)
//
// What stays as without egress: knbox still reaches an instance by dialing
// its loopback from inside the namespace, never through the bridge. And an
// instance still sees neither other instances nor the host's ports: every
// instance's bridge port is isolated (the kernel's bridge port flag
// "isolated"), so frames between two instances are dropped; KNBOX-IN drops
// what they send the host; the bridge has no IPv6 address (disable_ipv6),
// so link-local IPv6 reaches nothing either.
//
// Forwarding (net.ipv4.ip_forward) is turned on by the bridge plugin, for the
// whole host, as every container engine does.
//
// What an Egress makes is recorded in its StateDir (egress.json: the
// bridge, the subnet, the chains) before it is made, so that turning egress
// off (TearDownRecorded) removes exactly that, whatever the configuration
// says now; a bridge of that name that this record does not claim (another
// knbox's, another program's) is never used nor removed.

// Default egress settings.
const (
	DefaultEgressBridge  = "knbox0"
	DefaultEgressNetwork = "knbox-egress"
)

// DefaultCNIPluginDirs are where Debian (/usr/lib/cni) and the CNI project's
// own releases (/opt/cni/bin) put the plugins.
var DefaultCNIPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// EgressConfig configures egress mode.
type EgressConfig struct {
	// Bridge is the host bridge's name (DefaultEgressBridge if empty). Its
	// first address in Subnet is the instances' gateway.
	Bridge string
	// Subnet is the IPv4 prefix instances take their addresses from.
	Subnet netip.Prefix
	// PluginDirs are searched for the CNI plugins (DefaultCNIPluginDirs if
	// empty).
	PluginDirs []string
	// StateDir holds CNI's result cache and host-local's allocations; what
	// is in it lets DetachLeftovers undo attachments after a crash.
	StateDir string
}

// Egress attaches namespaces to the egress bridge. It is safe for
// concurrent use.
type Egress struct {
	cfg  EgressConfig
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList

	once     sync.Once
	setupErr error
}

// egressPlugins are the CNI plugins egress mode runs: the bridge and its
// IPAM plugin.
var egressPlugins = []string{"bridge", "host-local"}

// NewEgress checks that the plugins and iptables are there and returns an
// Egress. It changes nothing on the host: the bridge and the firewall rules
// are made by the first Attach.
func NewEgress(cfg EgressConfig) (*Egress, error) {
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultEgressBridge
	}
	if len(cfg.PluginDirs) == 0 {
		cfg.PluginDirs = DefaultCNIPluginDirs
	}
	if !cfg.Subnet.IsValid() || !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 30 {
		return nil, fmt.Errorf("egress: subnet %q: want an IPv4 prefix of /30 or wider", cfg.Subnet)
	}
	if cfg.Subnet != cfg.Subnet.Masked() {
		return nil, fmt.Errorf("egress: subnet %s has host bits set (did you mean %s?)", cfg.Subnet, cfg.Subnet.Masked())
	}
	if !validName(cfg.Bridge) || len(cfg.Bridge) > 15 {
		return nil, fmt.Errorf("egress: bridge %q: want an interface name of at most 15 characters", cfg.Bridge)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("egress: StateDir is required")
	}
	for _, p := range egressPlugins {
		found := false
		for _, d := range cfg.PluginDirs {
			if fi, err := os.Stat(filepath.Join(d, p)); err == nil && fi.Mode().IsRegular() {
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("egress: CNI plugin %q not found in %s (Debian: apt-get install containernetworking-plugins)", p, strings.Join(cfg.PluginDirs, ", "))
		}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("egress: iptables not found (Debian: apt-get install iptables): %w", err)
	}
	list, err := libcni.ConfListFromBytes(egressConfList(cfg))
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	return &Egress{
		cfg:  cfg,
		cni:  libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(cfg.StateDir, "cache"), nil),
		list: list,
	}, nil
}

// egressConfList is the CNI network configuration list of egress mode.
func egressConfList(cfg EgressConfig) []byte {
	type m = map[string]any
	b, _ := json.Marshal(m{
		"cniVersion": "1.0.0",
		"name":       DefaultEgressNetwork,
		"plugins": []m{{
			"type":        "bridge",
			"bridge":      cfg.Bridge,
			"isGateway":   true,
			"ipMasq":      false, // KNBOX-NAT-<bridge>, once for all
			"hairpinMode": false,
			"ipam": m{
				"type":    "host-local",
				"ranges":  [][]m{{{"subnet": cfg.Subnet.String()}}},
				"routes":  []m{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(cfg.StateDir, "ipam"),
			},
		}},
	})
	return b
}

// Subnet is the prefix instances take their addresses from.
func (e *Egress) Subnet() netip.Prefix { return e.cfg.Subnet }

// Bridge is the host bridge's name.
func (e *Egress) Bridge() string { return e.cfg.Bridge }

func (e *Egress) runtimeConf(id, path string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: path, IfName: "eth0"}
}

// Attach gives the namespace an eth0 on the egress bridge with a default
// route through it, and returns its address. Attaching a namespace twice
// is an error; Detach first.
func (e *Egress) Attach(ctx context.Context, ns *NS) (netip.Addr, error) {
	if err := e.setup(); err != nil {
		return netip.Addr{}, err
	}
	res, err := e.cni.AddNetworkList(ctx, e.list, e.runtimeConf(ns.Name, ns.Path))
	if err != nil {
		// ADD may have done part of its work (an address, a veth).
		_ = e.cni.DelNetworkList(context.WithoutCancel(ctx), e.list, e.runtimeConf(ns.Name, ns.Path))
		return netip.Addr{}, fmt.Errorf("egress: attach netns %s: %w", ns.Name, err)
	}
	addr, err := e.isolate(res)
	if err != nil {
		_ = e.cni.DelNetworkList(context.WithoutCancel(ctx), e.list, e.runtimeConf(ns.Name, ns.Path))
		return netip.Addr{}, fmt.Errorf("egress: attach netns %s: %w", ns.Name, err)
	}
	return addr, nil
}

// isolate sets the isolated flag on the instance's bridge port and returns
// the instance's address, both from the plugins' result.
func (e *Egress) isolate(r types.Result) (netip.Addr, error) {
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return netip.Addr{}, err
	}
	var addr netip.Addr
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && a.Unmap().Is4() {
			addr = a.Unmap()
		}
	}
	if !addr.IsValid() {
		return netip.Addr{}, errors.New("the bridge plugin returned no IPv4 address")
	}
	isolated := false
	for _, itf := range res.Interfaces {
		if itf.Sandbox != "" || itf.Name == e.cfg.Bridge {
			continue
		}
		link, err := netlink.LinkByName(itf.Name)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("find host veth %s: %w", itf.Name, err)
		}
		if err := netlink.LinkSetIsolated(link, true); err != nil {
			return netip.Addr{}, fmt.Errorf("isolate bridge port %s: %w", itf.Name, err)
		}
		isolated = true
	}
	if !isolated {
		return netip.Addr{}, errors.New("the bridge plugin returned no host-side veth")
	}
	return addr, nil
}

// Detach undoes Attach: the veth goes and the address is released.
// Detaching what is not attached, or a namespace that is gone, is not an
// error.
func (e *Egress) Detach(ctx context.Context, ns *NS) error {
	path := ns.Path
	if _, err := os.Stat(path); err != nil {
		path = "" // the plugins release the address without it
	}
	if err := e.cni.DelNetworkList(ctx, e.list, e.runtimeConf(ns.Name, path)); err != nil {
		return fmt.Errorf("egress: detach netns %s: %w", ns.Name, err)
	}
	return nil
}

// Attached returns the names of the namespaces that have, or had at a crash,
// an attachment: in CNI's result cache or holding an address. A crash
// between allocating an address and caching the result leaves only the
// address.
func (e *Egress) Attached() ([]string, error) {
	var ids []string
	atts, err := e.cni.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("egress: cached attachments: %w", err)
	}
	for _, a := range atts {
		if a.Network == DefaultEgressNetwork {
			ids = append(ids, a.ContainerID)
		}
	}
	dir := filepath.Join(e.cfg.StateDir, "ipam", DefaultEgressNetwork)
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("egress: addresses: %w", err)
	}
	for _, ent := range ents {
		if _, err := netip.ParseAddr(ent.Name()); err != nil {
			continue // host-local's lock and last_reserved_ip files
		}
		// host-local writes the container id on the file's first line.
		f, err := os.Open(filepath.Join(dir, ent.Name()))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		if sc.Scan() {
			if id := strings.TrimSpace(sc.Text()); id != "" {
				ids = append(ids, id)
			}
		}
		f.Close()
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// setup makes, once, what all attachments share: the bridge without IPv6,
// and the chains.
func (e *Egress) setup() error {
	e.once.Do(func() { e.setupErr = e.doSetup() })
	return e.setupErr
}

func (e *Egress) doSetup() error {
	rec, err := readRecord(e.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if rec != nil && (rec.Bridge != e.cfg.Bridge || rec.Subnet != e.cfg.Subnet.String()) {
		// The configuration changed: undo what the record says first.
		if err := TearDownRecorded(context.Background(), e.cfg.StateDir, e.cfg.PluginDirs, DefaultRoot); err != nil {
			return fmt.Errorf("egress: remove the bridge %s of an earlier configuration: %w", rec.Bridge, err)
		}
		rec = nil
	}
	br, err := netlink.LinkByName(e.cfg.Bridge)
	if err == nil && rec == nil {
		return fmt.Errorf("egress: a bridge %s exists that this knbox did not make (no record in %s): another knbox or program uses it; set egress.bridge to another name, or delete it (ip link del %s)", e.cfg.Bridge, e.cfg.StateDir, e.cfg.Bridge)
	}
	if rec == nil {
		rec = &record{Bridge: e.cfg.Bridge, Subnet: e.cfg.Subnet.String()}
		for _, c := range e.chains() {
			rec.Chains = append(rec.Chains, recordedChain{Bin: c.bin, Table: c.table, Name: c.name, From: c.from})
		}
		if err := writeRecord(e.cfg.StateDir, rec); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	if _, missing := err.(netlink.LinkNotFoundError); missing {
		la := netlink.NewLinkAttrs()
		la.Name = e.cfg.Bridge
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("egress: create bridge %s: %w", e.cfg.Bridge, err)
		}
		br, err = netlink.LinkByName(e.cfg.Bridge)
	}
	if err != nil {
		return fmt.Errorf("egress: bridge %s: %w", e.cfg.Bridge, err)
	}
	if _, ok := br.(*netlink.Bridge); !ok {
		return fmt.Errorf("egress: %s exists and is a %s, not a bridge", e.cfg.Bridge, br.Type())
	}
	sysctl := "/proc/sys/net/ipv6/conf/" + e.cfg.Bridge + "/disable_ipv6"
	if err := os.WriteFile(sysctl, []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("egress: disable IPv6 on %s: %w", e.cfg.Bridge, err)
	}
	for _, c := range e.chains() {
		if c.bin == "ip6tables" {
			if _, err := exec.LookPath(c.bin); err != nil {
				continue // no IPv6 firewall: the bridge has no IPv6 address anyway
			}
		}
		if err := c.install(); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	return nil
}

// chain is one of knbox's chains for a bridge: its rules, and the rule
// that jumps to it from a built-in chain.
type chain struct {
	bin, table, name string
	from             []string // the built-in chain and the match of the jump
	insert           bool     // jump first in from (else last)
	rules            [][]string
}

func (e *Egress) chains() []chain {
	br, subnet := e.cfg.Bridge, e.cfg.Subnet.String()
	in := chain{table: "filter", name: "KNBOX-IN-" + br, from: []string{"INPUT", "-i", br}, insert: true,
		rules: [][]string{{"-j", "DROP"}}}
	in6 := in
	in.bin, in6.bin = "iptables", "ip6tables"
	return []chain{
		in, in6,
		{bin: "iptables", table: "filter", name: "KNBOX-FWD-" + br, from: []string{"FORWARD"}, insert: true,
			rules: [][]string{
				{"-i", br, "!", "-o", br, "-j", "ACCEPT"},
				{"-o", br, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
				{"-o", br, "-j", "DROP"},
			}},
		{bin: "iptables", table: "filter", name: "KNBOX-OUT-" + br, from: []string{"OUTPUT", "-o", br}, insert: true,
			rules: [][]string{{"-m", "conntrack", "--ctstate", "NEW", "-j", "DROP"}}},
		{bin: "iptables", table: "nat", name: "KNBOX-NAT-" + br, from: []string{"POSTROUTING", "-s", subnet}, insert: false,
			rules: [][]string{
				{"-d", subnet, "-j", "RETURN"},
				{"-d", "224.0.0.0/4", "-j", "RETURN"},
				{"-j", "MASQUERADE"},
			}},
	}
}

func (c chain) ipt(args ...string) error {
	out, err := exec.Command(c.bin, append([]string{"-w", "-t", c.table}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -t %s %s: %w: %s", c.bin, c.table, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// install makes the chain hold exactly its rules and jumps to it once.
// Idempotent: a restart leaves one of each.
func (c chain) install() error {
	if c.ipt("-n", "-L", c.name) != nil {
		if err := c.ipt("-N", c.name); err != nil {
			return err
		}
	}
	if err := c.ipt("-F", c.name); err != nil {
		return err
	}
	for _, r := range c.rules {
		if err := c.ipt(append([]string{"-A", c.name}, r...)...); err != nil {
			return err
		}
	}
	jump := append(append([]string{}, c.from...), "-j", c.name)
	if c.ipt(append([]string{"-C"}, jump...)...) == nil {
		return nil
	}
	if c.insert {
		return c.ipt(append([]string{"-I", jump[0], "1"}, jump[1:]...)...)
	}
	return c.ipt(append([]string{"-A"}, jump...)...)
}

// uninstall removes the jumps to the chain and the chain.
func (c chain) uninstall() error {
	jump := append(append([]string{"-D"}, c.from...), "-j", c.name)
	for range 4 { // a bounded number of duplicate jumps
		if c.ipt(jump...) != nil {
			break
		}
	}
	if c.ipt("-n", "-L", c.name) != nil {
		return nil // not there
	}
	if err := c.ipt("-F", c.name); err != nil {
		return err
	}
	return c.ipt("-X", c.name)
}

// Remove deletes the bridge and the chains of this Egress's configuration,
// and its record. For tests, which know what they made; Detach every
// namespace first. Turning egress off is TearDownRecorded.
func (e *Egress) Remove() error {
	errs := []error{removeBridgeAndChains(e.cfg.Bridge, e.chains())}
	if err := os.Remove(filepath.Join(e.cfg.StateDir, recordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("egress: %w", err))
	}
	return errors.Join(errs...)
}

func removeBridgeAndChains(bridge string, chains []chain) error {
	var errs []error
	if br, err := netlink.LinkByName(bridge); err == nil {
		if _, ok := br.(*netlink.Bridge); ok {
			if err := netlink.LinkDel(br); err != nil {
				errs = append(errs, fmt.Errorf("egress: delete bridge %s: %w", bridge, err))
			}
		}
	}
	for _, c := range chains {
		if _, err := exec.LookPath(c.bin); err != nil {
			continue
		}
		if err := c.uninstall(); err != nil {
			errs = append(errs, fmt.Errorf("egress: %w", err))
		}
	}
	return errors.Join(errs...)
}

// recordFile, in an Egress's StateDir, records what it made.
const recordFile = "egress.json"

// record is what an Egress made: its bridge, subnet and chains.
type record struct {
	Bridge string          `json:"bridge"`
	Subnet string          `json:"subnet"`
	Chains []recordedChain `json:"chains"`
}

type recordedChain struct {
	Bin   string   `json:"bin"`
	Table string   `json:"table"`
	Name  string   `json:"name"`
	From  []string `json:"from"`
}

// readRecord reads the record in stateDir; nil when there is none.
func readRecord(stateDir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(stateDir, recordFile), err)
	}
	p, err := netip.ParsePrefix(r.Subnet)
	if err != nil || !validName(r.Bridge) || len(r.Bridge) > 15 {
		return nil, fmt.Errorf("%s: not a record of a bridge and a subnet", filepath.Join(stateDir, recordFile))
	}
	r.Subnet = p.String()
	for _, c := range r.Chains {
		// Only knbox's own chains, and their jumps, are ever removed.
		if !strings.HasPrefix(c.Name, "KNBOX-") || !strings.HasSuffix(c.Name, "-"+r.Bridge) ||
			(c.Bin != "iptables" && c.Bin != "ip6tables") || (c.Table != "filter" && c.Table != "nat") || len(c.From) == 0 {
			return nil, fmt.Errorf("%s: chain %q is not one of knbox's", filepath.Join(stateDir, recordFile), c.Name)
		}
	}
	return &r, nil
}

// writeRecord writes r into stateDir (created 0700), atomically.
func writeRecord(stateDir string, r *record) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(stateDir, recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(stateDir, recordFile))
}

// TearDownRecorded undoes what an Egress with state in stateDir made, as its
// record says, whatever the configuration says now: it detaches every
// namespace that holds an attachment (found in nsRoot by name), removes the
// recorded chains and the bridge (not another knbox's, nor a bridge of
// another name), and removes stateDir. Without stateDir there is nothing to
// do; with a stateDir but no record (an older knbox), the attachments go
// but the bridge and rules are left, and an error says so.
func TearDownRecorded(ctx context.Context, stateDir string, pluginDirs []string, nsRoot string) error {
	if _, err := os.Stat(stateDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	rec, err := readRecord(stateDir)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if rec == nil {
		return fmt.Errorf("egress: %s has no record of the bridge and rules egress made (an older knbox made them): remove them by hand", stateDir)
	}
	subnet, _ := netip.ParsePrefix(rec.Subnet)
	eg, err := NewEgress(EgressConfig{Bridge: rec.Bridge, Subnet: subnet, PluginDirs: pluginDirs, StateDir: stateDir})
	if err != nil {
		return err
	}
	var errs []error
	ids, err := eg.Attached()
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range ids {
		if err := eg.Detach(ctx, &NS{Name: id, Path: filepath.Join(nsRoot, id)}); err != nil {
			errs = append(errs, err)
		}
	}
	var chains []chain
	for _, c := range rec.Chains {
		chains = append(chains, chain{bin: c.Bin, table: c.Table, name: c.Name, from: c.From})
	}
	errs = append(errs, removeBridgeAndChains(rec.Bridge, chains))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}
