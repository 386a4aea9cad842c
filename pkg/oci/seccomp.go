package oci

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Errno values of the syscalls DefaultSeccomp denies; the same numbers on
// x86 and arm, the architectures the profile lists.
const (
	errnoEPERM  = 1
	errnoENOSYS = 38
)

// cloneNewUser is CLONE_NEWUSER.
const cloneNewUser = 0x10000000

// deniedSyscalls fail with EPERM under DefaultSeccomp. Most need a capability
// containers do not have anyway; denying them also closes the kernel code
// behind them to a process that gains one, and makes the failure certain.
var deniedSyscalls = []string{
	// Keyrings are not namespaced.
	"add_key", "keyctl", "request_key",
	// Mounts and the root: the runtime's job, never the container's.
	"mount", "umount", "umount2", "pivot_root",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	// Kernel modules and kexec.
	"init_module", "finit_module", "delete_module", "create_module",
	"query_module", "get_kernel_syms", "kexec_load", "kexec_file_load",
	// Tracing, profiling and other processes' memory.
	"bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev",
	"pidfd_getfd", "lookup_dcookie",
	// Namespaces: joining any (new user namespaces: see cloneRules).
	"setns",
	// Host-wide state: clocks, swap, accounting, quotas, power, kernel log.
	"settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
	"swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "reboot", "syslog",
	"nfsservctl", "_sysctl", "uselib", "ustat", "vhangup",
	// Known exploitation primitives.
	"userfaultfd", "open_by_handle_at",
	// Direct I/O port access and legacy x86 modes.
	"iopl", "ioperm", "vm86", "vm86old",
}

// enosysSyscalls fail with ENOSYS, which libraries read as "not implemented
// here" and fall back: glibc's clone3 to clone (whose flags the profile can
// inspect; clone3's live in memory it cannot), io_uring to epoll.
var enosysSyscalls = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// DefaultSeccomp returns knbox's default seccomp profile: allow every
// syscall except deniedSyscalls (EPERM), enosysSyscalls (ENOSYS), and clone
// and unshare with CLONE_NEWUSER (EPERM): a user namespace would give the
// process a full capability set against large parts of the kernel. It lists
// the x86 and arm architectures (64-bit, 32-bit and x32), so that the 32-bit
// syscall entry points are filtered too.
func DefaultSeccomp() *specs.LinuxSeccomp {
	eperm, enosys := uint(errnoEPERM), uint(errnoENOSYS)
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{
			specs.ArchX86_64, specs.ArchX86, specs.ArchX32,
			specs.ArchAARCH64, specs.ArchARM,
		},
		Syscalls: []specs.LinuxSyscall{
			{Names: append([]string(nil), deniedSyscalls...), Action: specs.ActErrno, ErrnoRet: &eperm},
			{Names: append([]string(nil), enosysSyscalls...), Action: specs.ActErrno, ErrnoRet: &enosys},
			{
				// flags is the first argument of clone on x86 and arm, and of unshare.
				Names:    []string{"clone", "unshare"},
				Action:   specs.ActErrno,
				ErrnoRet: &eperm,
				Args:     []specs.LinuxSeccompArg{{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: specs.OpMaskedEqual}},
			},
		},
	}
}
