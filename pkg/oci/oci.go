package oci

import (
	"errors"
	"fmt"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// Input is what Build turns into a spec.
type Input struct {
	// Container is the revision's (defaulted) container.
	Container corev1.Container
	// PodSecurity is the revision's pod-level securityContext (may be nil).
	PodSecurity *corev1.PodSecurityContext
	// Image is the image's config.
	Image ImageConfig
	// Env is the fully resolved environment, NAME=value, in order: PORT,
	// K_SERVICE, K_CONFIGURATION, K_REVISION first, then the container's env
	// with valueFrom and envFrom resolved by the caller. Build merges the
	// image's env under it and expands $(VAR) in command and args from it.
	Env []string
	// Rootfs is the absolute path of the prepared root filesystem.
	Rootfs string
	// Hostname is the container's hostname ("" means "localhost").
	Hostname string
	// NetNSPath is an existing network namespace to join ("" makes a new,
	// empty one).
	NetNSPath string
	// CgroupsPath is linux.cgroupsPath ("" leaves it to the runtime).
	CgroupsPath string
	// EtcHosts, EtcHostname and ResolvConf are host files bind-mounted
	// read-only at /etc/hosts, /etc/hostname and /etc/resolv.conf ("" leaves
	// the image's file).
	EtcHosts, EtcHostname, ResolvConf string
	// TerminationLog is a host file bind-mounted read-write at the
	// container's terminationMessagePath (default /dev/termination-log).
	TerminationLog string
	// SyslogSocket is a host unix socket bind-mounted at /dev/log.
	SyslogSocket string
	// VarLog is a host directory mounted read-write at /var/log; "" mounts a
	// tmpfs there instead. The directory must be writable by the container's
	// user (Spec.Process.User).
	VarLog string
	// Volumes maps a volume name to what the caller prepared for it.
	Volumes map[string]Volume
	// MachineMemory is the machine's memory in bytes, for oomScoreAdj (0:
	// unknown, which scores like a small request).
	MachineMemory int64
	// Policy is the operator's policy.
	Policy Policy
	// Pin, when set, is called for every host path Build puts into the
	// spec as a bind mount's source (the /etc files, the termination log,
	// the syslog socket, VarLog, each volume and each subPath in it) and
	// returns the path to put there instead: one no container can redirect
	// between now and the runtime's mount (see package safemount). Without
	// it the paths go in as they are, subPaths resolved to a string: a
	// container that shares the volume can then swap a component for a
	// link between that check and the runtime's mount.
	Pin func(HostPath) (string, error)
}

// HostPath is a bind mount's source on the host: Rel (slash-separated; ""
// for Root itself) below Root, a directory knbox made.
type HostPath struct {
	Root, Rel string
	// FollowSymlinks: Rel may pass symbolic links that stay below Root (a
	// volume's subPath). knbox's own files are reached without any.
	FollowSymlinks bool
	// MakeDirs: what is missing of Rel is to be made as directories (the
	// subPath of a writable volume, an emptyDir, as the kubelet does).
	// Without Input.Pin a missing path is an error.
	MakeDirs bool
}

// pin returns where the spec finds hp (see Input.Pin).
func (in *Input) pin(hp HostPath) (string, error) {
	if in.Pin != nil {
		return in.Pin(hp)
	}
	if hp.Rel == "" {
		return hp.Root, nil
	}
	if hp.FollowSymlinks {
		return resolveInRoot(hp.Root, hp.Rel)
	}
	return path.Join(hp.Root, hp.Rel), nil
}

// pinFile pins a file knbox made at p (its directory is the root).
func (in *Input) pinFile(p string) (string, error) {
	return in.pin(HostPath{Root: path.Dir(p), Rel: path.Base(p)})
}

// ImageConfig is the part of an OCI image config that decides how the
// container's process starts.
type ImageConfig struct {
	Entrypoint, Cmd, Env []string
	WorkingDir, User     string
}

// Volume is a volume prepared on the host.
type Volume struct {
	// Path is the host directory with the volume's contents.
	Path string
	// Writable allows a read-write mount when the volume mount is not
	// readOnly (emptyDir); Secret and ConfigMap volumes are never writable.
	Writable bool
}

// Policy is what the operator decides, not the developer.
type Policy struct {
	// RefuseRoot fails containers that would run as uid 0.
	RefuseRoot bool
	// RootRefusedBy names who refuses root, for the error ("": the
	// operator's policy), e.g. a runtime handler that refuses it.
	RootRefusedBy string
	// Seccomp replaces the default profile (nil: DefaultSeccomp for the
	// container's capabilities).
	Seccomp *specs.LinuxSeccomp
	// Unconfined turns seccomp off: the spec has no profile (Seccomp is
	// ignored). For trusted code only.
	Unconfined bool
	// MaskedPaths and ReadonlyPaths replace the defaults (nil: defaults;
	// empty: none).
	MaskedPaths, ReadonlyPaths []string
	// PidsLimit is the pids cgroup limit (0: 4096; negative: unlimited).
	PidsLimit int64
	// OpenFiles is RLIMIT_NOFILE, soft and hard (0: DefaultOpenFiles). The
	// runtime can only grant what its own process may: see MaxOpenFiles.
	OpenFiles uint64
	// DefaultCapabilities is the set a container starts from (nil:
	// DefaultCapabilities, NET_BIND_SERVICE alone; empty: none).
	DefaultCapabilities []string
	// AddableCapabilities may be added by securityContext.capabilities.add
	// beyond the default set, when Knative's admission lets the add through
	// (config-features kubernetes.containerspec-addcapabilities). nil:
	// DefaultAddableCapabilities; empty: none.
	AddableCapabilities []string
}

// FieldError is an error in the input that names the field causing it.
type FieldError struct {
	// Field is the field's path, relative to the container
	// ("securityContext.runAsUser") or, prefixed "spec.", to the Revision
	// spec; "image.user" and the like name the image's config.
	Field string
	// Message says what is wrong.
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Build returns the OCI runtime spec for in. Errors are *FieldError when the
// input is at fault.
func Build(in Input) (*specs.Spec, error) {
	if in.Rootfs == "" || !path.IsAbs(in.Rootfs) {
		return nil, fmt.Errorf("build spec: rootfs %q is not an absolute path", in.Rootfs)
	}
	if p := path.Clean(in.NetNSPath); in.NetNSPath != "" && (!path.IsAbs(p) || strings.HasPrefix(p, "/proc/")) {
		// /proc/<pid>/ns/net is how one names another process's (the
		// host's) namespace: never an instance's.
		return nil, fmt.Errorf("build spec: network namespace %q is not a namespace made for the instance", in.NetNSPath)
	}
	c := &in.Container
	if err := refuseUnsafe(c, in.PodSecurity); err != nil {
		return nil, err
	}

	env, err := mergeEnv(in.Env, in.Image.Env)
	if err != nil {
		return nil, err
	}
	args, err := processArgs(c, in.Image, in.Env)
	if err != nil {
		return nil, err
	}
	cwd, err := workingDir(c, in.Image)
	if err != nil {
		return nil, err
	}
	user, home, err := processUser(in)
	if err != nil {
		return nil, err
	}
	caps, err := capabilities(c.SecurityContext, in.Policy, user.UID)
	if err != nil {
		return nil, err
	}
	res, err := resources(c.Resources, in.Policy.PidsLimit)
	if err != nil {
		return nil, err
	}
	var memLimit int64
	if res.Memory != nil && res.Memory.Limit != nil {
		memLimit = *res.Memory.Limit
	}
	mounts, err := buildMounts(&in, memLimit)
	if err != nil {
		return nil, err
	}

	hostname := in.Hostname
	if hostname == "" {
		hostname = "localhost"
	}
	env = addDefaultEnv(env, "HOSTNAME", hostname)
	env = addDefaultEnv(env, "PATH", defaultPath)
	env = addDefaultEnv(env, "HOME", home)

	oom := oomScoreAdj(c.Resources, in.MachineMemory)
	readonly := false
	if sc := c.SecurityContext; sc != nil && sc.ReadOnlyRootFilesystem != nil {
		readonly = *sc.ReadOnlyRootFilesystem
	}

	netns := specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: in.NetNSPath}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal:        false,
			User:            user,
			Args:            args,
			Env:             env,
			Cwd:             cwd,
			Capabilities:    caps,
			Rlimits:         rlimits(in.Policy.OpenFiles),
			NoNewPrivileges: true,
			OOMScoreAdj:     &oom,
		},
		Root:     &specs.Root{Path: in.Rootfs, Readonly: readonly},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
				netns,
			},
			Resources:     res,
			CgroupsPath:   in.CgroupsPath,
			MaskedPaths:   orDefault(in.Policy.MaskedPaths, defaultMaskedPaths),
			ReadonlyPaths: orDefault(in.Policy.ReadonlyPaths, defaultReadonlyPaths),
			Seccomp:       in.Policy.Seccomp,
		},
	}
	switch {
	case in.Policy.Unconfined:
		spec.Linux.Seccomp = nil
	case spec.Linux.Seccomp == nil:
		spec.Linux.Seccomp = DefaultSeccomp(caps.Bounding)
	}
	return spec, nil
}

// refuseUnsafe refuses what no developer may ask for, even where Knative's
// admission (with some feature flag) would let it through.
func refuseUnsafe(c *corev1.Container, pod *corev1.PodSecurityContext) error {
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged {
			return fieldErr("securityContext.privileged", "privileged containers are not supported")
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			return fieldErr("securityContext.procMount", "an unmasked /proc is not supported")
		}
	}
	if pod != nil && len(pod.Sysctls) > 0 {
		return fieldErr("spec.securityContext.sysctls", "sysctls are not supported: they are the operator's")
	}
	if c.TTY {
		return fieldErr("tty", "a terminal is not supported")
	}
	return nil
}

func orDefault(s, def []string) []string {
	if s == nil {
		s = def
	}
	return append([]string{}, s...)
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// mergeEnv returns env (later duplicates overwrite the value of the first
// occurrence, keeping its position) followed by the image's variables that
// env does not set.
func mergeEnv(env, image []string) ([]string, error) {
	out := make([]string, 0, len(env)+len(image)+3)
	idx := make(map[string]int, len(env)+len(image))
	for i, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fieldErr(fmt.Sprintf("env[%d]", i), "%q is not NAME=value", kv)
		}
		if j, dup := idx[name]; dup {
			out[j] = kv
			continue
		}
		idx[name] = len(out)
		out = append(out, kv)
	}
	for i, kv := range image {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fieldErr(fmt.Sprintf("image.env[%d]", i), "%q is not NAME=value", kv)
		}
		if j, dup := idx[name]; dup {
			if j >= len(env) { // a duplicate within the image's env: last wins
				out[j] = kv
			}
			continue
		}
		idx[name] = len(out)
		out = append(out, kv)
	}
	return out, nil
}

func addDefaultEnv(env []string, name, value string) []string {
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			return env
		}
	}
	return append(env, name+"="+value)
}

// envMap is the mapping $(VAR) expands from: the container's env (the image's
// env is not visible to the kubelet, so not here either).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			m[name] = value
		}
	}
	return m
}

// processArgs combines command/args with the image's Entrypoint/Cmd as
// Kubernetes does.
func processArgs(c *corev1.Container, img ImageConfig, env []string) ([]string, error) {
	var args []string
	m := envMap(env)
	switch {
	case len(c.Command) > 0:
		args = append(args, expandAll(c.Command, m)...)
		args = append(args, expandAll(c.Args, m)...)
	case len(c.Args) > 0:
		args = append(args, img.Entrypoint...)
		args = append(args, expandAll(c.Args, m)...)
	default:
		args = append(args, img.Entrypoint...)
		args = append(args, img.Cmd...)
	}
	if len(args) == 0 || args[0] == "" {
		return nil, fieldErr("command", "no command: neither the container nor the image's Entrypoint and Cmd give one")
	}
	return args, nil
}

func expandAll(in []string, m map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, m)
	}
	return out
}

func workingDir(c *corev1.Container, img ImageConfig) (string, error) {
	switch {
	case c.WorkingDir != "":
		if !path.IsAbs(c.WorkingDir) {
			return "", fieldErr("workingDir", "%q is not an absolute path", c.WorkingDir)
		}
		return path.Clean(c.WorkingDir), nil
	case img.WorkingDir != "":
		if !path.IsAbs(img.WorkingDir) {
			return "", fieldErr("image.workingDir", "%q is not an absolute path", img.WorkingDir)
		}
		return path.Clean(img.WorkingDir), nil
	}
	return "/", nil
}

// processUser decides the process's user and its HOME.
func processUser(in Input) (specs.User, string, error) {
	sc, pod := in.Container.SecurityContext, in.PodSecurity
	var (
		uid, gid       *int64
		uidField       string
		runAsNonRoot   *bool
		nonRootField   string
		u              specs.User
		home           = "/"
		supplementary  []uint32
		groupsFromUser string // name or numeric uid whose /etc/group memberships count
	)
	if pod != nil {
		if pod.RunAsUser != nil {
			uid, uidField = pod.RunAsUser, "spec.securityContext.runAsUser"
		}
		if pod.RunAsGroup != nil {
			gid = pod.RunAsGroup
		}
		if pod.RunAsNonRoot != nil {
			runAsNonRoot, nonRootField = pod.RunAsNonRoot, "spec.securityContext.runAsNonRoot"
		}
	}
	if sc != nil {
		if sc.RunAsUser != nil {
			uid, uidField = sc.RunAsUser, "securityContext.runAsUser"
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			runAsNonRoot, nonRootField = sc.RunAsNonRoot, "securityContext.runAsNonRoot"
		}
	}

	db := &userDB{root: in.Rootfs}
	if uid != nil {
		if *uid < 0 || *uid > maxID {
			return u, "", fieldErr(uidField, "%d is out of range", *uid)
		}
		u.UID = uint32(*uid)
		pw, err := db.userByID(u.UID)
		if err != nil {
			return u, "", fieldErr(uidField, "%v", err)
		}
		if pw != nil { // else gid 0, as containerd does for an unlisted uid
			u.GID, home, groupsFromUser = pw.gid, pw.home, pw.name
		}
	} else {
		uidField = "image.user"
		r, err := db.resolve(in.Image.User)
		if err != nil {
			return u, "", fieldErr("image.user", "%v", err)
		}
		u.UID, u.GID, home, groupsFromUser = r.uid, r.gid, r.home, r.name
		supplementary = r.groups
	}
	if gid != nil {
		f := "securityContext.runAsGroup"
		if sc == nil || sc.RunAsGroup == nil {
			f = "spec.securityContext.runAsGroup"
		}
		if *gid < 0 || *gid > maxID {
			return u, "", fieldErr(f, "%d is out of range", *gid)
		}
		u.GID = uint32(*gid)
	}
	if uid != nil && groupsFromUser != "" {
		g, err := db.groupsOf(groupsFromUser)
		if err != nil {
			return u, "", fieldErr(uidField, "%v", err)
		}
		supplementary = g
	}

	if u.UID == 0 {
		who := "root (uid 0)"
		if uidField == "image.user" {
			who = fmt.Sprintf("the image's USER %q is root (uid 0)", in.Image.User)
			if in.Image.User == "" {
				who = "the image sets no USER, so the container runs as root (uid 0)"
			}
		}
		switch {
		// The operator's refusal first: with it, knbox turns on
		// secure-pod-defaults, which writes runAsNonRoot into every
		// Revision, and the user should read why.
		case in.Policy.RefuseRoot:
			by := in.Policy.RootRefusedBy
			if by == "" {
				by = "the operator's policy"
			}
			msg := who + ": root is refused by " + by
			if uidField == "image.user" {
				msg += "; set securityContext.runAsUser to a non-root uid"
			}
			return u, "", fieldErr(uidField, "%s", msg)
		case runAsNonRoot != nil && *runAsNonRoot:
			f := nonRootField
			if uidField != "image.user" {
				f = uidField
			}
			return u, "", fieldErr(f, "%s, but runAsNonRoot is true", who)
		}
	}

	gids := []uint32{u.GID}
	gids = append(gids, supplementary...)
	if pod != nil {
		for i, g := range pod.SupplementalGroups {
			if g < 0 || g > maxID {
				return u, "", fieldErr(fmt.Sprintf("spec.securityContext.supplementalGroups[%d]", i), "%d is out of range", g)
			}
			gids = append(gids, uint32(g))
		}
		if pod.FSGroup != nil {
			if *pod.FSGroup < 0 || *pod.FSGroup > maxID {
				return u, "", fieldErr("spec.securityContext.fsGroup", "%d is out of range", *pod.FSGroup)
			}
			gids = append(gids, uint32(*pod.FSGroup))
		}
	}
	u.AdditionalGids = dedupe(gids)
	if home == "" {
		home = "/"
	}
	return u, home, nil
}

func dedupe(ids []uint32) []uint32 {
	out := ids[:0:0]
	seen := make(map[uint32]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// errNotFound is wrapped by lookups of names that /etc/passwd or /etc/group
// do not list.
var errNotFound = errors.New("not found")
