package oci

import (
	"maps"
	goruntime "runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Errno values of DefaultSeccomp; the same numbers on every architecture
// it lists.
const (
	errnoEPERM  = 1
	errnoENOSYS = 38
)

// Syscalls every container may make: what programs, their libcs and
// language runtimes use to do their work inside their own namespaces. The
// list is grouped by what the calls do; a name a kernel or an architecture
// does not have is skipped by the runtime. What is not here fails with
// EPERM, unless a rule below allows it (with a capability, or for some
// arguments only).
var allowedSyscalls = [][]string{
	// Files, directories, links and their metadata.
	{
		"access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range",
		"creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
		"fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
		"fcntl", "fcntl64", "fdatasync", "flock", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
		"fsync", "ftruncate", "ftruncate64", "futimesat", "getcwd", "getdents", "getdents64",
		"lchown", "lchown32", "link", "linkat", "_llseek", "lseek", "lstat", "lstat64", "mkdir", "mkdirat",
		"mknod", "mknodat", "name_to_handle_at", "newfstatat", "open", "openat", "openat2",
		"pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead",
		"readlink", "readlinkat", "readv", "rename", "renameat", "renameat2", "rmdir",
		"sendfile", "sendfile64", "splice", "stat", "stat64", "statfs", "statfs64", "statx",
		"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "truncate64",
		"umask", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vmsplice",
		"write", "writev", "cachestat",
	},
	// Extended attributes.
	{
		"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr",
		"listxattr", "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
	},
	// Waiting for events: poll, select, epoll, inotify, fanotify marks,
	// eventfd, signalfd, timers and clocks.
	{
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
		"epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark",
		"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
		"poll", "ppoll", "ppoll_time64", "pselect6", "pselect6_time64", "select", "_newselect",
		"signalfd", "signalfd4",
		"alarm", "getitimer", "setitimer", "nanosleep", "clock_nanosleep", "clock_nanosleep_time64",
		"clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64", "gettimeofday", "time",
		"adjtimex", "clock_adjtime", "clock_adjtime64", // reading; setting the clock needs CAP_SYS_TIME
		"timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64",
		"timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
		"timerfd_settime", "timerfd_settime64", "times",
	},
	// Asynchronous I/O (io_uring: see enosysSyscalls).
	{"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_setup", "io_submit"},
	// Memory.
	{
		"brk", "madvise", "membarrier", "memfd_create", "memfd_secret", "mincore", "mlock", "mlock2",
		"mlockall", "mmap", "mmap2", "mprotect", "mremap", "msync", "munlock", "munlockall", "munmap",
		"pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages", "process_mrelease", "mseal",
	},
	// Processes, threads and their scheduling (clone: see the rules below).
	{
		"execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid", "waitpid",
		"getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setpgid", "setsid",
		"getpriority", "setpriority", "ioprio_get", "ioprio_set", "getcpu",
		"sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max",
		"sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
		"sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
		"sched_setscheduler", "sched_yield",
		"futex", "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
		"get_robust_list", "set_robust_list", "set_tid_address", "rseq", "restart_syscall",
		"get_thread_area", "set_thread_area", "prctl", "seccomp",
		"getrlimit", "setrlimit", "prlimit64", "ugetrlimit", "getrusage", "sysinfo", "uname",
		"capget", "capset",
		"pidfd_open", "pidfd_send_signal",
		"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
	},
	// Users and groups (within what the process's capabilities allow).
	{
		"getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32",
		"getresgid", "getresgid32", "getresuid", "getresuid32", "getuid", "getuid32",
		"setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32",
		"setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32",
		"setreuid", "setreuid32", "setuid", "setuid32",
	},
	// Signals.
	{
		"kill", "tkill", "tgkill", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
		"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
		"sigaltstack", "sigprocmask", "sigreturn", "pause",
	},
	// Sockets (socket itself: see the rules below) and pipes.
	{
		"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
		"recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg", "sendmsg",
		"sendto", "setsockopt", "shutdown", "socketcall", "socketpair", "pipe", "pipe2",
	},
	// System V and POSIX IPC, in the container's own IPC namespace.
	{
		"ipc", "msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop",
		"semtimedop_time64", "shmat", "shmctl", "shmdt", "shmget",
		"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
		"mq_timedsend", "mq_timedsend_time64", "mq_unlink",
	},
	// Devices and terminals (the device cgroup decides which may be opened).
	{"ioctl", "getrandom"},
}

// archSyscalls are allowed on the architecture (GOARCH) they belong to.
var archSyscalls = map[string][]string{
	"amd64":   {"arch_prctl", "modify_ldt", "map_shadow_stack", "uretprobe"},
	"386":     {"modify_ldt"},
	"arm64":   {"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"},
	"arm":     {"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"},
	"ppc64le": {"sync_file_range2", "swapcontext"},
	"s390x":   {"s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr"},
	"riscv64": {"riscv_flush_icache"},
}

// capSyscalls are allowed to a container whose bounding set holds the
// capability: the calls it governs, which without it fail anyway, but
// whose kernel code then stays out of reach. A capability is in the
// bounding set only if the operator's policy let the container have it.
var capSyscalls = map[string][]string{
	"CAP_SYS_ADMIN": {
		"bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen", "fspick",
		"lookup_dcookie", "mount", "mount_setattr", "move_mount", "open_tree", "perf_event_open",
		"quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns", "syslog", "umount",
		"umount2", "unshare",
	},
	"CAP_SYS_BOOT":        {"reboot"},
	"CAP_SYS_CHROOT":      {"chroot"},
	"CAP_SYS_MODULE":      {"delete_module", "init_module", "finit_module"},
	"CAP_SYS_PACCT":       {"acct"},
	"CAP_SYS_PTRACE":      {"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace"},
	"CAP_SYS_RAWIO":       {"iopl", "ioperm"},
	"CAP_SYS_TIME":        {"settimeofday", "stime", "clock_settime", "clock_settime64"},
	"CAP_SYS_TTY_CONFIG":  {"vhangup"},
	"CAP_SYS_NICE":        {"get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"},
	"CAP_SYSLOG":          {"syslog"},
	"CAP_BPF":             {"bpf"},
	"CAP_PERFMON":         {"perf_event_open"},
	"CAP_DAC_READ_SEARCH": {"open_by_handle_at"},
}

// enosysSyscalls fail with ENOSYS rather than EPERM: libraries read it as
// "not implemented here" and fall back, glibc's clone3 to clone (whose
// flags the profile can inspect; clone3's live in memory it cannot), and
// io_uring users to epoll. io_uring bypasses seccomp for the operations it
// queues, so it stays closed even with CAP_SYS_ADMIN.
var enosysSyscalls = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// Flags of clone and unshare that make namespaces: CLONE_NEWNS,
// CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
// CLONE_NEWNET.
const cloneNamespaceFlags = 0x7E020000

// afVsock is AF_VSOCK, the host's side channel into virtual machines.
const afVsock = 40

// personalities are the personality(2) values a container may set: Linux,
// PER_LINUX32, UNAME26, both, and 0xffffffff, which only reads the current
// one. Others (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) weaken the
// process's own hardening.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// seccompArches are the architectures a profile for GOARCH lists: the
// native one and those whose syscall entry points the same kernel offers
// (x86's int 0x80 and x32 on amd64, arm32 on arm64), so that none of them
// is a way around the filter.
var seccompArches = map[string][]specs.Arch{
	"amd64":   {specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
	"386":     {specs.ArchX86},
	"arm64":   {specs.ArchAARCH64, specs.ArchARM},
	"arm":     {specs.ArchARM},
	"ppc64le": {specs.ArchPPC64LE},
	"s390x":   {specs.ArchS390X, specs.ArchS390},
	"riscv64": {specs.ArchRISCV64},
}

// DefaultSeccomp returns knbox's RuntimeDefault seccomp profile for a
// container whose bounding set is caps: deny by default (EPERM) and allow a
// list, as containerd's and Docker's default profiles do. Allowed always:
// allowedSyscalls and the architecture's archSyscalls; socket for every
// family but AF_VSOCK; personality with the values in personalities; clone
// without namespace flags. Allowed with a capability of the bounding set:
// capSyscalls (with CAP_SYS_ADMIN clone, clone3, unshare and setns without
// restriction). ENOSYS: enosysSyscalls (clone3 only without CAP_SYS_ADMIN).
// Never allowed, whatever the capabilities: keyrings (add_key, keyctl,
// request_key), userfaultfd, kexec, swap, pivot_root and the other calls
// no list names.
func DefaultSeccomp(caps []string) *specs.LinuxSeccomp {
	return defaultSeccomp(goruntime.GOARCH, caps)
}

func defaultSeccomp(arch string, caps []string) *specs.LinuxSeccomp {
	eperm, enosys := uint(errnoEPERM), uint(errnoENOSYS)
	var allow []string
	for _, g := range allowedSyscalls {
		allow = append(allow, g...)
	}
	allow = append(allow, archSyscalls[arch]...)
	sysAdmin := slices.Contains(caps, "CAP_SYS_ADMIN")
	for _, c := range slices.Sorted(maps.Keys(capSyscalls)) {
		if slices.Contains(caps, c) {
			allow = append(allow, capSyscalls[c]...)
		}
	}
	slices.Sort(allow)
	allow = slices.Compact(allow)
	enosysNames := slices.DeleteFunc(slices.Clone(enosysSyscalls), func(n string) bool { return slices.Contains(allow, n) })

	rules := []specs.LinuxSyscall{{Names: allow, Action: specs.ActAllow}}
	rules = append(rules, specs.LinuxSyscall{
		Names: []string{"socket"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: afVsock, Op: specs.OpNotEqual}},
	})
	for _, v := range personalities {
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: v, Op: specs.OpEqualTo}},
		})
	}
	if !sysAdmin {
		// clone's flags are its first argument, but on s390.
		flags := uint(0)
		if arch == "s390x" {
			flags = 1
		}
		rules = append(rules, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: flags, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
		})
	}
	rules = append(rules, specs.LinuxSyscall{Names: enosysNames, Action: specs.ActErrno, ErrnoRet: &enosys})
	arches, ok := seccompArches[arch]
	if !ok {
		arches = nil // the native one only
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		// The default errno, spelled out for the rules' readers (runc and
		// runsc take EPERM when it is absent).
		DefaultErrnoRet: &eperm,
		Architectures:   slices.Clone(arches),
		Syscalls:        rules,
	}
}
