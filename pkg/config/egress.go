package config

import (
	"fmt"
	"net/netip"
	"regexp"
)

// Defaults of the egress section.
const (
	// DefaultEgressSubnet is where instances take their addresses from when
	// egress is on. Not podman's 10.88.0.0/16, so that both can run on one
	// host.
	DefaultEgressSubnet = "10.89.0.0/16"
	DefaultEgressBridge = "knbox0"
)

// DefaultCNIPluginDirs are Debian's (containernetworking-plugins) and the
// CNI project's release layout.
var DefaultCNIPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Egress is the optional outbound network of instances. Off, an instance's
// network namespace has its loopback only. On, it also has an eth0 on a
// host bridge with NAT (CNI's bridge and host-local plugins), and
// still sees neither other instances nor the host's ports.
type Egress struct {
	// Enabled turns egress on for every instance started from now on.
	Enabled bool `json:"enabled,omitempty"`
	// Subnet is the IPv4 prefix of the instances' addresses
	// (DefaultEgressSubnet); the bridge takes its first address.
	Subnet string `json:"subnet,omitempty"`
	// Bridge is the host bridge's interface name (DefaultEgressBridge).
	Bridge string `json:"bridge,omitempty"`
	// CNIPluginDirs are searched for the plugins (DefaultCNIPluginDirs).
	CNIPluginDirs []string `json:"cniPluginDirs,omitempty"`
	// Nameservers (IP addresses) go into every instance's
	// /etc/resolv.conf instead of the host's. Unset: the host's name servers
	// that are not on loopback (behind systemd-resolved: its upstream ones).
	Nameservers []string `json:"nameservers,omitempty"`
}

func (e *Egress) applyDefaults() {
	if e.Subnet == "" {
		e.Subnet = DefaultEgressSubnet
	}
	if e.Bridge == "" {
		e.Bridge = DefaultEgressBridge
	}
	if len(e.CNIPluginDirs) == 0 {
		e.CNIPluginDirs = DefaultCNIPluginDirs
	}
}

var ifName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)

func (e *Egress) validate() error {
	p, err := netip.ParsePrefix(e.Subnet)
	if err != nil {
		return fmt.Errorf("egress.subnet: %q is not a prefix such as %s: %w", e.Subnet, DefaultEgressSubnet, err)
	}
	if !p.Addr().Is4() {
		return fmt.Errorf("egress.subnet: %s: only IPv4 is supported", p)
	}
	if p.Bits() > 30 {
		return fmt.Errorf("egress.subnet: %s: too small, want /30 or wider (a gateway and an instance at least)", p)
	}
	if p != p.Masked() {
		return fmt.Errorf("egress.subnet: %s has host bits set (did you mean %s?)", p, p.Masked())
	}
	if a := p.Addr(); a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
		return fmt.Errorf("egress.subnet: %s is a loopback, multicast, link-local or unspecified range", p)
	}
	if !ifName.MatchString(e.Bridge) {
		return fmt.Errorf("egress.bridge: %q is not an interface name (at most 15 letters, digits, '_', '.', '-')", e.Bridge)
	}
	for i, ns := range e.Nameservers {
		a, err := netip.ParseAddr(ns)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("egress.nameservers[%d]: %q is not an IP address", i, ns)
		}
		if a.IsLoopback() || a.IsUnspecified() {
			return fmt.Errorf("egress.nameservers[%d]: %s is not reachable from an instance (loopback or unspecified)", i, ns)
		}
	}
	for i, d := range e.CNIPluginDirs {
		if d == "" || d[0] != '/' {
			return fmt.Errorf("egress.cniPluginDirs[%d]: %q is not an absolute path", i, d)
		}
	}
	return nil
}

// EgressSubnet is the parsed egress.subnet of a validated Config.
func (c *Config) EgressSubnet() netip.Prefix {
	p, _ := netip.ParsePrefix(c.Egress.Subnet)
	return p
}
