package oci

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// DefaultCapabilities is the capability set a container starts from unless
// the operator's Policy.DefaultCapabilities says otherwise: NET_BIND_SERVICE
// alone, the effect of the Kubernetes "restricted" Pod Security profile
// (drop ALL, add at most NET_BIND_SERVICE) and of Knative's
// secure-pod-defaults. Docker's and containerd's default set gave every
// container NET_RAW, MKNOD, SETUID, SETGID, DAC_OVERRIDE and more.
var DefaultCapabilities = []string{"CAP_NET_BIND_SERVICE"}

// DefaultAddableCapabilities are the capabilities securityContext.
// capabilities.add may name unless the operator's
// Policy.AddableCapabilities says otherwise: the list the Kubernetes
// "baseline" Pod Security profile lets a pod add, which is Docker's default
// set without NET_RAW. Knative's admission refuses capabilities.add unless
// config-features enables kubernetes.containerspec-addcapabilities (or
// secure-pod-defaults, for NET_BIND_SERVICE alone), so by default none
// reaches Build.
var DefaultAddableCapabilities = []string{
	"CAP_AUDIT_WRITE",
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FOWNER",
	"CAP_FSETID",
	"CAP_KILL",
	"CAP_MKNOD",
	"CAP_NET_BIND_SERVICE",
	"CAP_SETFCAP",
	"CAP_SETGID",
	"CAP_SETPCAP",
	"CAP_SETUID",
	"CAP_SYS_CHROOT",
}

// knownCapabilities are the capabilities of Linux 6.x (capabilities(7)).
var knownCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// capName turns a Kubernetes capability ("NET_BIND_SERVICE", "cap_chown")
// into the OCI form ("CAP_NET_BIND_SERVICE").
func capName(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// CheckCapabilities returns the OCI names of a list of capabilities as an
// operator writes them ("NET_RAW", "cap_chown"), or an error naming the
// first that Linux does not have. field names the list in errors. ALL is
// not a capability.
func CheckCapabilities(field string, caps []string) ([]string, error) {
	out := make([]string, 0, len(caps))
	for i, c := range caps {
		name := capName(c)
		if !slices.Contains(knownCapabilities, name) {
			return nil, fmt.Errorf("%s[%d]: unknown capability %q", field, i, c)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// capabilities applies securityContext.capabilities to the default set
// (Policy.DefaultCapabilities, else DefaultCapabilities): add first, then
// drop (drop wins), "ALL" in drop empties the set. add may only name
// capabilities of the default set or of the addable list
// (Policy.AddableCapabilities, else DefaultAddableCapabilities).
//
// A process whose uid is not 0 gets them in its bounding set only: its
// effective and permitted sets are empty, which is what the kernel leaves a
// non-root process after execve without ambient capabilities (runc's
// result), and what runsc would not do by itself: it hands the spec's sets
// to the process whatever its uid (runsc 20221219 gave uid 1000 CapEff
// a80405fb).
func capabilities(sc *corev1.SecurityContext, p Policy, uid uint32) (*specs.LinuxCapabilities, error) {
	defaults, addable := DefaultCapabilities, DefaultAddableCapabilities
	if p.DefaultCapabilities != nil {
		defaults = p.DefaultCapabilities
	}
	if p.AddableCapabilities != nil {
		addable = p.AddableCapabilities
	}
	set := make([]string, 0, len(defaults))
	for _, c := range defaults {
		set = append(set, capName(c))
	}
	if sc != nil && sc.Capabilities != nil {
		allowed := slices.Clone(set)
		for _, a := range addable {
			allowed = append(allowed, capName(a))
		}
		dropAll := false
		for _, d := range sc.Capabilities.Drop {
			if strings.EqualFold(string(d), "ALL") {
				dropAll = true
			}
		}
		if dropAll {
			set = nil
		}
		for i, a := range sc.Capabilities.Add {
			f := fmt.Sprintf("securityContext.capabilities.add[%d]", i)
			name := capName(string(a))
			switch {
			case strings.EqualFold(string(a), "ALL"):
				return nil, fieldErr(f, "adding ALL capabilities is not allowed")
			case !slices.Contains(knownCapabilities, name):
				return nil, fieldErr(f, "unknown capability %q", string(a))
			case !slices.Contains(allowed, name):
				return nil, fieldErr(f, "adding %s is not allowed by the operator's policy (allowed: %s)", string(a), strings.Join(shortNames(allowed), ", "))
			}
			if !slices.Contains(set, name) {
				set = append(set, name)
			}
		}
		for i, d := range sc.Capabilities.Drop {
			if strings.EqualFold(string(d), "ALL") {
				continue
			}
			name := capName(string(d))
			if !slices.Contains(knownCapabilities, name) {
				return nil, fieldErr(fmt.Sprintf("securityContext.capabilities.drop[%d]", i), "unknown capability %q", string(d))
			}
			set = slices.DeleteFunc(set, func(c string) bool { return c == name })
		}
	}
	if set == nil {
		set = []string{}
	}
	caps := &specs.LinuxCapabilities{Bounding: set, Effective: []string{}, Permitted: []string{}}
	if uid == 0 {
		caps.Effective, caps.Permitted = slices.Clone(set), slices.Clone(set)
	}
	return caps, nil
}

// shortNames are capabilities without their CAP_ prefix, sorted and
// without duplicates, as Kubernetes spells them.
func shortNames(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		out = append(out, strings.TrimPrefix(c, "CAP_"))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
