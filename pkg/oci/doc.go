// Package oci turns a Knative Revision's container, the image's config and
// what the runtime prepared on the host (root filesystem, network namespace,
// /etc files, volumes) into an OCI runtime spec (config.json) that satisfies
// the Knative runtime contract, with hardening the developer cannot turn off.
//
// It owns the spec and nothing else: Build has no side effects of its own
// (it reads the root filesystem's /etc/passwd and /etc/group, and writes
// nothing), and the package imports no other knbox package (the caller
// brings package safemount, below it, through Input.Pin). It does not run
// probes (readiness and liveness are the caller's), pull images or make
// namespaces.
//
// # Host paths
//
// Every host path Build puts into the spec as a bind mount's source (the
// /etc files, the termination log, /dev/log, each volume and each subPath)
// goes through the caller's Input.Pin, which returns the path to name
// instead. knbox's instances pin them with package safemount: each is
// opened below the directory knbox made for it with openat2 (no "..",
// absolute link or mount crossing out of it; knbox's own files without any
// link at all), bind-mounted by descriptor into a private staging
// directory, checked, and the spec names that mount. A container that
// shares a volume can therefore not swap a subPath component for a link
// to a host directory between knbox's check and the runtime's mount (the
// kubelet's CVE-2017-1002101). A subPath that is missing in a writable
// volume (an emptyDir) is made, as the kubelet makes it. Without Pin (the
// golden tests) the paths go in as they are, subPaths resolved to a string.
//
// # What Build decides
//
// Process. args follow Kubernetes: command replaces the image's Entrypoint
// and drops its Cmd, args replaces Cmd, and $(VAR) references in both are
// expanded from Input.Env as the kubelet does ($$ escapes, unknown references
// stay as written). cwd is workingDir, else the image's WorkingDir, else "/".
// The environment is Input.Env (deduplicated, the last value of a name wins),
// then the image's variables that Input.Env does not set, then HOSTNAME,
// PATH (the usual default) and HOME (from /etc/passwd, else "/") when nobody
// set them. terminal is false: stdin reads EOF.
//
// User. runAsUser and runAsGroup of the container's securityContext, else of
// the pod's, else the image's USER resolved against the root filesystem's
// /etc/passwd and /etc/group (see ResolveUser), else root. A runAsUser without
// runAsGroup takes the user's primary group from /etc/passwd (0 if the uid is
// not listed), as containerd does. additionalGids are the primary gid, the
// groups of /etc/group that list the user, the pod's supplementalGroups and
// its fsGroup, in that order and without duplicates. Root is refused when the
// operator's Policy.RefuseRoot is set (or the runtime handler refuses it) or
// securityContext.runAsNonRoot is true, with an error that names the field
// that chose it.
//
// Capabilities. The default set is NET_BIND_SERVICE alone (the operator's
// Policy.DefaultCapabilities replaces it): the effect of the Kubernetes
// "restricted" Pod Security profile and of Knative's secure-pod-defaults,
// where Docker and containerd give NET_RAW, MKNOD, SETUID, DAC_OVERRIDE and
// more. securityContext.capabilities.drop is applied after add ("ALL"
// empties the set); add may name capabilities of the default set or of the
// addable list: Policy.AddableCapabilities, else DefaultAddableCapabilities
// (the "baseline" profile's list: Docker's set without NET_RAW). Knative's
// admission lets capabilities.add through only when config-features enables
// kubernetes.containerspec-addcapabilities (NET_BIND_SERVICE alone under
// secure-pod-defaults), so that flag keeps its meaning. The set is the
// bounding set; for uid 0 also the permitted and effective sets; a process
// of any other uid has none effective or permitted, which is what the kernel
// leaves it after execve (runc's result) and what runsc would not do by
// itself. Inheritable and ambient stay empty. noNewPrivileges is always
// true, whatever allowPrivilegeEscalation says. privileged and procMount
// Unmasked are refused.
//
// rlimits. RLIMIT_NOFILE 1048576 soft and hard (Policy.OpenFiles): what
// containers get on Kubernetes nodes (containerd's LimitNOFILE=infinity) and
// the kernel's default fs.nr_open, so servers need not raise it. A runtime
// cannot grant more than its own hard limit unless it has CAP_SYS_RESOURCE;
// MaxOpenFiles tells the daemon what it can grant. RLIMIT_CORE 0: a
// crash-looping instance would otherwise fill its writable layer with cores.
//
// Filesystems. The root is Input.Rootfs, read-only when
// readOnlyRootFilesystem is true. Mounts, sorted parents first:
//
//	/proc            proc
//	/dev             tmpfs, mode 755, nosuid, strictatime
//	/dev/pts         devpts, newinstance, ptmxmode 0666, mode 0620, gid 5
//	/dev/shm         tmpfs, 64 MiB, mode 1777, nosuid, noexec, nodev
//	/dev/mqueue      mqueue
//	/sys             sysfs, read-only
//	/sys/fs/cgroup   cgroup, read-only (with the cgroup namespace the
//	                 container sees its own limits there; on cgroup v1 runc
//	                 puts each hierarchy, read-only, on a tmpfs of its own;
//	                 a runtime handler that manages cgroups, as runsc's
//	                 does, puts read-only binds of the memory and cpu
//	                 cgroups there instead: see package runtime)
//	/tmp             tmpfs, mode 1777 (writable by any uid), nosuid, nodev
//	/var/log         tmpfs, mode 1777, nosuid, nodev, noexec; or a bind of
//	                 Input.VarLog (read-write) when the caller keeps logs
//	                 on the host, which must then be writable by the user
//	/etc/hosts, /etc/hostname, /etc/resolv.conf
//	                 read-only binds of the host files, when given
//	terminationMessagePath (default /dev/termination-log)
//	                 read-write bind of Input.TerminationLog, when given
//	/dev/log         bind of Input.SyslogSocket, when given
//	volume mounts    binds of Input.Volumes (read-only unless the volume is
//	                 Writable and the mount is not readOnly), with subPath
//	                 pinned inside the volume (see "Host paths")
//
// The tmpfs at /tmp and /var/log is sized to the memory limit when there is
// one; its pages are charged to the container's memory cgroup either way. A
// volume may take the place of /tmp, /var/log, /dev/shm and the /etc files
// (an emptyDir at /tmp is common with a read-only root; the kubelet lets a
// volume replace /etc/hosts too). Volumes may not go at /, /dev, /dev/log,
// /dev/pts, /dev/mqueue or anywhere in /proc and /sys.
//
// Devices. The spec lists no linux.devices and relies on the OCI runtime for
// the spec's default devices: /dev/null, zero, full, random, urandom and tty,
// /dev/ptmx as a link to pts/ptmx, and the links /dev/fd, /dev/stdin,
// /dev/stdout and /dev/stderr (runc makes all of these on a tmpfs /dev, as
// the runtime-spec requires of every runtime; the contract test in this
// package checks it with the real runc). There is no /dev/console because
// there is no terminal. The device cgroup starts with "deny all"; the runtime
// then allows exactly its default devices.
//
// Namespaces. pid, ipc, uts, mount, cgroup and network (Input.NetNSPath if
// given, else a new empty one). Never a host namespace, never a user
// namespace. hostname is Input.Hostname (else "localhost"); no sysctls
// (a pod securityContext with sysctls is refused).
//
// Masked and read-only paths. containerd's defaults unless the operator's
// Policy sets others: masked /proc/acpi, /proc/asound, /proc/kcore,
// /proc/keys, /proc/latency_stats, /proc/timer_list, /proc/timer_stats,
// /proc/sched_debug, /proc/scsi, /sys/firmware and
// /sys/devices/virtual/powercap; read-only /proc/bus, /proc/fs, /proc/irq,
// /proc/sys and /proc/sysrq-trigger.
//
// Seccomp. Policy.Seccomp if the operator set one, else DefaultSeccomp,
// knbox's RuntimeDefault profile: deny by default (EPERM) with an allow
// list of the calls programs and their runtimes make, as containerd's and
// Docker's profiles are built; clone only without namespace flags, socket
// for every family but AF_VSOCK, personality with the harmless values; the
// calls a capability governs (mount and setns with CAP_SYS_ADMIN, ptrace
// with CAP_SYS_PTRACE, chroot with CAP_SYS_CHROOT, ...) only when the
// container's bounding set holds it; clone3 and io_uring fail with ENOSYS so
// that libc and runtimes fall back to clone and epoll; keyrings, userfaultfd,
// kexec and swap never. The developer's seccompProfile is ignored: the
// contract puts seccomp with the operator, and nothing a developer can ask
// for is stricter than RuntimeDefault.
//
// Resources. memory: limit = limits.memory, swap (memory+swap) = the same
// (no swap; on cgroup v1 runc needs swap accounting, memory.memsw.*, for it). cpu: period 100000 µs, quota = limits.cpu × period (at least
// 1000 µs); shares = requests.cpu in milliCPU × 1024 / 1000 (at least 2,
// at most 262144), with requests defaulting to limits as on Kubernetes.
// pids: Policy.PidsLimit, default 4096 tasks (threads count): generous for
// thread-per-request servers and JVMs, small enough that a fork bomb cannot
// exhaust the host's pid space. oomScoreAdj: 1000 without memory request or
// limit (Kubernetes' BestEffort), else Kubernetes' Burstable formula
// 1000 - 1000 × request / MachineMemory, kept within [2, 999]: never below
// knbox's own 0, so the kernel kills instances before the daemon.
//
// Errors name the field that caused them, relative to the container (for
// example "securityContext.runAsUser") or to the Revision spec for pod-level
// fields ("spec.securityContext.sysctls"); see FieldError.
package oci
