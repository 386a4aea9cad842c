package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Runtime is one entry of the runtimes table, as in containerd's: the name
// is what a RuntimeClass's handler names, the rest says how to run it.
type Runtime struct {
	// Type is "oci" (a runc-compatible command line: runc, runsc, crun) or
	// "process" (the entrypoint as a plain child process, no isolation
	// beyond a chroot, a network namespace and a non-root user without
	// capabilities).
	Type string `json:"type,omitempty"`
	// Binary is the runtime's path or a name found in PATH (oci only).
	Binary string `json:"binary,omitempty"`
	// Root is the runtime's state directory; empty: DATA_DIR/runtimes/NAME
	// (see Config.RuntimeRoot), resolved once flags have set DATA_DIR.
	Root string `json:"root,omitempty"`
	// Args are global arguments given before every subcommand.
	Args []string `json:"args,omitempty"`
	// ManageCgroups makes knbox create each container's memory and cpu
	// cgroups, write its limits, show them to it read-only and remove them,
	// instead of leaving that to the runtime (oci only; see package
	// runtime). Unset: the built-in's value, true for runsc, which removes
	// its cgroups (and the OOM kill count with them) when a container exits
	// and shows the container none of its limits.
	ManageCgroups *bool `json:"manageCgroups,omitempty"`
	// SandboxENOSYS is for runtimes with a kernel of their own that answer
	// EPERM to every errno rule of a seccomp profile (runsc 20221219): the
	// profile's ENOSYS rules (clone3, io_uring) become allow rules and the
	// sandbox's kernel answers them, so that glibc and others fall back as
	// they do on ENOSYS (oci only). Unset: the built-in's value, true for
	// runsc.
	SandboxENOSYS *bool `json:"sandboxENOSYS,omitempty"`
	// Enabled registers the runtime: knbox probes it at start and makes a
	// RuntimeClass of its name if it works. Unset: true for type oci, false
	// for type process, which does not isolate (root refused, no
	// capabilities, but no namespaces but the network's, no seccomp, no
	// limits) and must be turned on by the operator.
	Enabled *bool `json:"enabled,omitempty"`
}

// ManagesCgroups says whether knbox manages the runtime's cgroups.
func (r Runtime) ManagesCgroups() bool { return r.ManageCgroups != nil && *r.ManageCgroups }

// LetsSandboxAnswerENOSYS says whether the runtime's ENOSYS seccomp rules
// become allow rules (see SandboxENOSYS).
func (r Runtime) LetsSandboxAnswerENOSYS() bool { return r.SandboxENOSYS != nil && *r.SandboxENOSYS }

// IsEnabled says whether knbox registers the runtime (see Enabled).
func (r Runtime) IsEnabled() bool {
	if r.Enabled != nil {
		return *r.Enabled
	}
	return r.Type != RuntimeProcess
}

// Runtime types.
const (
	RuntimeOCI     = "oci"
	RuntimeProcess = "process"
)

// DefaultRuntimeClass is the RuntimeClass (and handler) of revisions that
// name none.
const DefaultRuntimeClass = "runc"

// builtinRuntimes are always in the table unless the file redefines them.
// runsc (Debian 12's gVisor, 20221219) needs:
//   - --network=host: it refuses its own network stack inside a network
//     namespace it did not create; with host networking the sandbox joins
//     the namespace given in the OCI spec (which knbox creates per
//     instance), so the instance is still isolated;
//   - --host-uds=open: to open the bind-mounted /dev/log syslog socket;
//   - --oci-seccomp: to apply the spec's seccomp profile inside the sandbox;
//
// manageCgroups, so that OOM kills are reported and the container sees its
// limits, and sandboxENOSYS, so that clone3 fails with ENOSYS as glibc
// needs.
//
// process is in the table but not enabled: it does not isolate.
func builtinRuntimes() map[string]Runtime {
	yes := true
	return map[string]Runtime{
		"runc": {Type: RuntimeOCI, Binary: "runc"},
		"runsc": {Type: RuntimeOCI, Binary: "runsc", Args: []string{"--network=host", "--host-uds=open", "--oci-seccomp"},
			ManageCgroups: &yes, SandboxENOSYS: &yes},
		"crun":    {Type: RuntimeOCI, Binary: "crun"},
		"process": {Type: RuntimeProcess},
	}
}

// applyRuntimeDefaults fills the runtimes table.
func (c *Config) applyRuntimeDefaults() {
	rts := builtinRuntimes()
	for name, rt := range c.Runtimes {
		// A file entry changes only the fields it sets.
		b := rts[name]
		if rt.Type != "" {
			b.Type = rt.Type
		}
		if rt.Binary != "" {
			b.Binary = rt.Binary
		}
		if rt.Root != "" {
			b.Root = rt.Root
		}
		if rt.Args != nil {
			b.Args = rt.Args
		}
		if rt.ManageCgroups != nil {
			b.ManageCgroups = rt.ManageCgroups
		}
		if rt.SandboxENOSYS != nil {
			b.SandboxENOSYS = rt.SandboxENOSYS
		}
		if rt.Enabled != nil {
			b.Enabled = rt.Enabled
		}
		rts[name] = b
	}
	for name, rt := range rts {
		if rt.Type == "" {
			rt.Type = RuntimeOCI
		}
		rts[name] = rt
	}
	c.Runtimes = rts
	if c.DefaultRuntimeClass == "" {
		c.DefaultRuntimeClass = DefaultRuntimeClass
	}
}

// RuntimeRoot is the state directory of the named runtime.
func (c *Config) RuntimeRoot(name string) string {
	if r := c.Runtimes[name].Root; r != "" {
		return r
	}
	return filepath.Join(c.DataDir, "runtimes", name)
}

// validateRuntimes checks the runtimes table.
func (c *Config) validateRuntimes() error {
	for _, name := range slices.Sorted(maps.Keys(c.Runtimes)) {
		rt := c.Runtimes[name]
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return fmt.Errorf("runtimes: %q is not a valid handler name: %s", name, errs[0])
		}
		switch rt.Type {
		case RuntimeOCI:
			if rt.Binary == "" {
				return fmt.Errorf("runtimes.%s.binary: required for type oci", name)
			}
		case RuntimeProcess:
			if rt.Binary != "" || len(rt.Args) > 0 || rt.ManagesCgroups() || rt.LetsSandboxAnswerENOSYS() {
				return fmt.Errorf("runtimes.%s: type process takes no binary, args, manageCgroups or sandboxENOSYS", name)
			}
		default:
			return fmt.Errorf("runtimes.%s.type: %q is not oci or process", name, rt.Type)
		}
	}
	if rt, ok := c.Runtimes[c.DefaultRuntimeClass]; ok && !rt.IsEnabled() {
		return fmt.Errorf("defaultRuntimeClass: %q is a runtime that is not enabled", c.DefaultRuntimeClass)
	}
	if errs := validation.IsDNS1123Subdomain(c.DefaultRuntimeClass); len(errs) > 0 {
		return fmt.Errorf("defaultRuntimeClass: %q: %s", c.DefaultRuntimeClass, errs[0])
	}
	return nil
}
