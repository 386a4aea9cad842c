package oci

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// DefaultCapabilities is the capability set a container starts from:
// containerd's default, which is Docker's.
var DefaultCapabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_NET_RAW",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
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

// capabilities applies securityContext.capabilities to DefaultCapabilities:
// add first, then drop (drop wins), "ALL" in drop empties the set. Adding is
// limited to the default set and the operator's extra list.
func capabilities(sc *corev1.SecurityContext, addable []string) (*specs.LinuxCapabilities, error) {
	set := slices.Clone(DefaultCapabilities)
	if sc != nil && sc.Capabilities != nil {
		allowed := slices.Clone(DefaultCapabilities)
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
				return nil, fieldErr(f, "adding %s is not allowed (only the default capabilities, such as NET_BIND_SERVICE, or those the operator allows)", string(a))
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
	return &specs.LinuxCapabilities{
		Bounding:  set,
		Effective: slices.Clone(set),
		Permitted: slices.Clone(set),
	}, nil
}
