package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Policy is the operator's container policy, the "policy" section of the
// file: what every container gets whatever its Revision asks for. Unset
// keys take knbox's defaults, which are what an operator running strangers'
// code would choose (see "Security model" in the README); Knative's
// config-features flags (kubernetes.containerspec-addcapabilities,
// secure-pod-defaults, kubernetes.podspec-securitycontext) still decide what
// a Revision may ask for at admission.
type Policy struct {
	// RefuseRoot fails containers that would run as uid 0 (the image's
	// USER or runAsUser), with CreateContainerConfigError naming the field.
	// Default false, as Knative's: a developer who sets runAsNonRoot (or
	// config-features' secure-pod-defaults, which sets it) gets the same
	// refusal for their own containers.
	RefuseRoot bool `json:"refuseRoot,omitempty"`
	// AllowExecProbes lets Revisions have exec readiness and liveness
	// probes, run with the runtime's exec (runc exec, runsc exec) in the
	// serving container. Default false: refused at admission, as the
	// runtime contract says platforms SHOULD (Knative's TestProbeRuntime
	// needs them allowed).
	AllowExecProbes bool `json:"allowExecProbes,omitempty"`
	// SeccompProfile is "" or "RuntimeDefault" (knbox's deny-by-default
	// profile with an allow list, the default), "Unconfined" (no seccomp
	// filter: trusted code only), or the absolute path of a JSON file with
	// an OCI seccomp profile (the linux.seccomp object of config.json; not
	// Docker's format with archMap, includes and excludes), read at load.
	SeccompProfile string `json:"seccompProfile,omitempty"`
	// MaskedPaths and ReadonlyPaths replace containerd's defaults (unset:
	// the defaults; []: none).
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
	// PidsLimit is the pids cgroup limit of each container, threads
	// included (0: DefaultPidsLimit; -1: unlimited).
	PidsLimit int64 `json:"pidsLimit,omitempty"`
	// OpenFiles is RLIMIT_NOFILE, soft and hard (0: DefaultOpenFiles,
	// lowered to what the runtime can grant).
	OpenFiles uint64 `json:"openFiles,omitempty"`
	// DefaultCapabilities is the capability set every container starts
	// from (unset: NET_BIND_SERVICE alone, the "restricted" Pod Security
	// profile's; []: none). Names as Kubernetes writes them (NET_RAW) or
	// with CAP_.
	DefaultCapabilities []string `json:"defaultCapabilities,omitempty"`
	// AddableCapabilities are those securityContext.capabilities.add may
	// name beyond the default set, once Knative's admission lets the add
	// through (config-features kubernetes.containerspec-addcapabilities).
	// Unset: the "baseline" Pod Security profile's list (Docker's default
	// set without NET_RAW); []: none.
	AddableCapabilities []string `json:"addableCapabilities,omitempty"`

	// Seccomp is the profile read from SeccompProfile's file; nil for
	// RuntimeDefault and Unconfined.
	Seccomp *specs.LinuxSeccomp `json:"-"`
}

// Values of Policy.SeccompProfile that name no file.
const (
	SeccompRuntimeDefault = "RuntimeDefault"
	SeccompUnconfined     = "Unconfined"
)

// Defaults of the policy, as package oci applies them (the config carries
// 0 and nil for "default").
const (
	DefaultPidsLimit = 4096
	DefaultOpenFiles = 1 << 20
)

// maxSeccompProfile bounds the profile file knbox reads.
const maxSeccompProfile = 1 << 20

// capabilityName is how a capability may be written: NET_RAW, cap_net_raw.
// Whether Linux has it is checked where capabilities are known (package
// oci), when the daemon starts.
var capabilityName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)

// Unconfined reports whether the operator turned seccomp off.
func (p Policy) Unconfined() bool { return p.SeccompProfile == SeccompUnconfined }

// SecurePodDefaultsFeature is the config-features key of Knative's
// secure-pod-defaults.
const SecurePodDefaultsFeature = "secure-pod-defaults"

// appliesSecureDefaults tells whether every container already gets what
// Knative's secure-pod-defaults writes into a Revision (allowPrivilegeEscalation
// false, which knbox always applies; the RuntimeDefault seccomp profile; no
// capability beyond NET_BIND_SERVICE; runAsNonRoot), so turning the flag on
// changes only what the Revision says, not what runs. knbox then turns it on
// unless config-features sets it. Without refuseRoot it stays off: the flag
// would default runAsNonRoot to true and fail images whose USER is root,
// which knbox runs by default as Knative does (admission drops the
// "insecure default" warnings that knbox makes untrue; see package
// admission).
func (p Policy) appliesSecureDefaults() bool {
	if !p.RefuseRoot || p.Unconfined() {
		return false
	}
	if p.DefaultCapabilities == nil {
		return true
	}
	for _, c := range p.DefaultCapabilities {
		if !strings.EqualFold(strings.TrimPrefix(strings.ToUpper(c), "CAP_"), "NET_BIND_SERVICE") {
			return false
		}
	}
	return true
}

// validate checks the policy section.
func (p *Policy) validate() error {
	switch p.SeccompProfile {
	case "", SeccompRuntimeDefault, SeccompUnconfined:
	default:
		if !path.IsAbs(p.SeccompProfile) {
			return fmt.Errorf("policy.seccompProfile: %q is not RuntimeDefault, Unconfined or an absolute path", p.SeccompProfile)
		}
	}
	for _, l := range []struct {
		key   string
		paths []string
	}{{"maskedPaths", p.MaskedPaths}, {"readonlyPaths", p.ReadonlyPaths}} {
		for i, q := range l.paths {
			if !path.IsAbs(q) || path.Clean(q) != q || q == "/" {
				return fmt.Errorf("policy.%s[%d]: %q is not a clean absolute path below /", l.key, i, q)
			}
		}
	}
	if p.PidsLimit < -1 {
		return fmt.Errorf("policy.pidsLimit: %d: want a positive number, 0 for the default (%d) or -1 for no limit", p.PidsLimit, DefaultPidsLimit)
	}
	for _, l := range []struct {
		key  string
		caps []string
	}{{"defaultCapabilities", p.DefaultCapabilities}, {"addableCapabilities", p.AddableCapabilities}} {
		for i, c := range l.caps {
			if !capabilityName.MatchString(c) || strings.EqualFold(c, "ALL") {
				return fmt.Errorf("policy.%s[%d]: %q is not a capability name", l.key, i, c)
			}
		}
	}
	return nil
}

// load reads the seccomp profile file that SeccompProfile names, if any.
func (p *Policy) load() error {
	p.Seccomp = nil
	if p.SeccompProfile == "" || p.SeccompProfile == SeccompRuntimeDefault || p.SeccompProfile == SeccompUnconfined {
		return nil
	}
	b, err := readRegularFile(p.SeccompProfile, maxSeccompProfile)
	if err != nil {
		return fmt.Errorf("policy.seccompProfile: %w", err)
	}
	s, err := ParseSeccompProfile(b)
	if err != nil {
		return fmt.Errorf("policy.seccompProfile: %s: %w", p.SeccompProfile, err)
	}
	p.Seccomp = s
	return nil
}

// readRegularFile reads a regular file of at most max bytes; a FIFO or a
// device is refused without blocking on it.
func readRegularFile(file string, max int64) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", file)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, max)
	}
	return b, nil
}

// Seccomp actions, operators and architectures that runc and runsc know.
var (
	seccompActions = []specs.LinuxSeccompAction{
		specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
		specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog,
	}
	seccompOps = []specs.LinuxSeccompOperator{
		specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
		specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
	}
)

// ParseSeccompProfile reads an OCI seccomp profile (the linux.seccomp
// object of config.json) and checks what a runtime would otherwise refuse
// at every container start: unknown fields, actions and operators,
// argument indexes beyond the sixth, rules without names.
func ParseSeccompProfile(b []byte) (*specs.LinuxSeccomp, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s specs.LinuxSeccomp
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("not an OCI seccomp profile: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not an OCI seccomp profile: data after the object")
	}
	if !slices.Contains(seccompActions, s.DefaultAction) {
		return nil, fmt.Errorf("defaultAction: %q is not a seccomp action", s.DefaultAction)
	}
	for i, r := range s.Syscalls {
		if len(r.Names) == 0 {
			return nil, fmt.Errorf("syscalls[%d].names: empty", i)
		}
		for j, n := range r.Names {
			if n == "" {
				return nil, fmt.Errorf("syscalls[%d].names[%d]: empty", i, j)
			}
		}
		if !slices.Contains(seccompActions, r.Action) {
			return nil, fmt.Errorf("syscalls[%d].action: %q is not a seccomp action", i, r.Action)
		}
		for j, a := range r.Args {
			if a.Index > 5 {
				return nil, fmt.Errorf("syscalls[%d].args[%d].index: %d: a syscall has 6 arguments (0 to 5)", i, j, a.Index)
			}
			if !slices.Contains(seccompOps, a.Op) {
				return nil, fmt.Errorf("syscalls[%d].args[%d].op: %q is not a seccomp operator", i, j, a.Op)
			}
		}
	}
	return &s, nil
}
