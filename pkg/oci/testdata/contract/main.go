// Command contract runs inside a container built from an oci.Build spec and
// prints, as JSON, what the Knative runtime contract lets a container observe.
// The contract test in package oci builds it statically and runs it with runc.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Report is what the container saw. Errors are strings: "" means success.
type Report struct {
	PID      int
	Args     []string
	Env      []string
	Cwd      string
	Hostname string
	UID, GID int
	Groups   []int
	Status   map[string]string // of /proc/self/status: Cap*, NoNewPrivs, Seccomp
	OOMScore string

	StdinEOF string

	Writable map[string]string // path -> error creating a file in it
	FSType   map[string]string // path -> filesystem magic (hex)
	Mode     map[string]string // path -> mode
	Files    map[string]string // path -> content (or "error: ...")
	Links    map[string]string // path -> link target (or "error: ...")
	Devices  map[string]string // path -> "c major:minor" (or "error: ...")
	Exists   map[string]bool

	Cgroup map[string]string

	Syscalls map[string]string // name -> errno name ("" on success)

	Rlimits map[string][2]uint64

	Interfaces []string // name/flags

	Syslog          string
	TerminationLog  string
	SubPathContent  string
	VolumeWriteable string
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		serve()
		return
	}
	r := Report{
		PID: os.Getpid(), Args: os.Args, Env: os.Environ(),
		UID: os.Getuid(), GID: os.Getgid(),
		Status: map[string]string{}, Writable: map[string]string{}, FSType: map[string]string{},
		Mode: map[string]string{}, Files: map[string]string{}, Links: map[string]string{},
		Devices: map[string]string{}, Exists: map[string]bool{}, Cgroup: map[string]string{},
		Syscalls: map[string]string{}, Rlimits: map[string][2]uint64{},
	}
	r.Cwd, _ = os.Getwd()
	r.Hostname, _ = os.Hostname()
	r.Groups, _ = os.Getgroups()

	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if strings.HasPrefix(k, "Cap") || k == "NoNewPrivs" || k == "Seccomp" {
				r.Status[k] = strings.TrimSpace(v)
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		r.OOMScore = strings.TrimSpace(string(b))
	}

	buf := make([]byte, 1)
	n, err := os.Stdin.Read(buf)
	if n == 0 && err == io.EOF {
		r.StdinEOF = "EOF"
	} else {
		r.StdinEOF = fmt.Sprintf("read %d bytes, %v", n, err)
	}

	for _, dir := range []string{"/tmp", "/var/log", "/", "/etc", "/sys", "/proc/sys", "/dev/shm", "/data", "/sys/fs/cgroup"} {
		f, err := os.CreateTemp(dir, "probe")
		if err == nil {
			f.Close()
			os.Remove(f.Name())
		}
		r.Writable[dir] = errString(err)
	}
	for _, p := range []string{"/tmp", "/var/log", "/dev", "/dev/shm", "/dev/pts", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/proc"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			r.FSType[p] = errString(err)
		} else {
			r.FSType[p] = strconv.FormatInt(int64(st.Type), 16)
		}
	}
	for _, p := range []string{"/tmp", "/var/log", "/dev", "/dev/log", "/dev/termination-log"} {
		if fi, err := os.Stat(p); err != nil {
			r.Mode[p] = errString(err)
		} else {
			r.Mode[p] = fi.Mode().String()
		}
	}
	for _, p := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/data/key", "/sub/key", "/proc/self/mountinfo"} {
		b, err := os.ReadFile(p)
		if err != nil {
			r.Files[p] = "error: " + errString(err)
		} else {
			r.Files[p] = string(b)
		}
	}
	for _, p := range []string{"/etc/hosts", "/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids/pids.max"} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		r.Writable[p] = errString(err)
	}
	if ents, err := os.ReadDir("/sys/firmware"); err == nil {
		r.Files["/sys/firmware"] = strconv.Itoa(len(ents)) + " entries"
	} else {
		r.Files["/sys/firmware"] = "error: " + errString(err)
	}
	for _, p := range []string{"/dev/ptmx", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"} {
		t, err := os.Readlink(p)
		if err != nil {
			t = "error: " + errString(err)
		}
		r.Links[p] = t
	}
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts/ptmx"} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			r.Devices[p] = "error: " + errString(err)
			continue
		}
		kind := "?"
		if st.Mode&unix.S_IFMT == unix.S_IFCHR {
			kind = "c"
		}
		r.Devices[p] = fmt.Sprintf("%s %d:%d", kind, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	// The device cgroup: /dev/null works, a device made with mknod does not.
	if f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0); err != nil {
		r.Syscalls["open /dev/null"] = errString(err)
	} else {
		_, err = f.Write([]byte("x"))
		r.Syscalls["open /dev/null"] = errString(err)
		f.Close()
	}
	if err := unix.Mknod("/tmp/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))); err != nil {
		r.Syscalls["mknod sda"] = errString(err)
	} else {
		f, err := os.Open("/tmp/sda")
		if err == nil {
			f.Close()
		}
		r.Syscalls["mknod sda"] = "open: " + errString(err)
	}
	for _, p := range []string{"/dev/console", "/dev/kmsg", "/dev/mem"} {
		_, err := os.Lstat(p)
		r.Exists[p] = err == nil
	}

	for _, p := range []string{
		"memory/memory.limit_in_bytes", "memory/memory.memsw.limit_in_bytes",
		"cpu/cpu.cfs_period_us", "cpu/cpu.cfs_quota_us", "cpu/cpu.shares", "pids/pids.max",
		"devices/devices.list",
	} {
		b, err := os.ReadFile("/sys/fs/cgroup/" + p)
		if err != nil {
			r.Cgroup[p] = "error: " + errString(err)
		} else {
			r.Cgroup[p] = strings.TrimSpace(string(b))
		}
	}

	r.Syscalls["unshare(CLONE_NEWUSER)"] = errString(unix.Unshare(unix.CLONE_NEWUSER))
	r.Syscalls["unshare(CLONE_NEWNS)"] = errString(unix.Unshare(unix.CLONE_NEWNS))
	r.Syscalls["setns"] = errString(unix.Setns(0, 0))
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, 0 /* KEYCTL_GET_KEYRING_ID */, ^uintptr(2) /* KEY_SPEC_PROCESS_KEYRING=-2 */, 0)
	r.Syscalls["keyctl"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	r.Syscalls["clone3"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
	r.Syscalls["io_uring_setup"] = errString(errnoOrNil(e))
	r.Syscalls["mount"] = errString(unix.Mount("none", "/tmp", "tmpfs", 0, ""))
	_, _, e = unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
	r.Syscalls["ptrace"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_BPF, 0, 0, 0)
	r.Syscalls["bpf"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
	r.Syscalls["userfaultfd"] = errString(errnoOrNil(e))
	// The profile is an allow list: a harmless call nobody listed fails too.
	_, _, e = unix.Syscall(unix.SYS_SYSFS, 3 /* the number of file system types */, 0, 0)
	r.Syscalls["sysfs"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff /* query */, 0, 0)
	r.Syscalls["personality(query)"] = errString(errnoOrNil(e))
	_, _, e = unix.Syscall(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */, 0, 0)
	r.Syscalls["personality(ADDR_NO_RANDOMIZE)"] = errString(errnoOrNil(e))
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err != nil {
		r.Syscalls["socket(AF_VSOCK)"] = errString(err)
	} else {
		unix.Close(fd)
		r.Syscalls["socket(AF_VSOCK)"] = ""
	}
	r.Syscalls["chroot"] = errString(unix.Chroot("/tmp"))
	r.Syscalls["getpid"] = "" // a control: allowed syscalls work

	for name, res := range map[string]int{"NOFILE": unix.RLIMIT_NOFILE, "CORE": unix.RLIMIT_CORE} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err == nil {
			r.Rlimits[name] = [2]uint64{l.Cur, l.Max}
		}
	}

	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			r.Interfaces = append(r.Interfaces, i.Name+" "+i.Flags.String())
		}
	}

	if c, err := net.Dial("unixgram", "/dev/log"); err != nil {
		r.Syslog = "error: " + errString(err)
	} else {
		_, err = c.Write([]byte("<14>contract: hello syslog"))
		r.Syslog = errString(err)
		c.Close()
	}
	r.TerminationLog = errString(os.WriteFile("/dev/termination-log", []byte("contract: goodbye"), 0))
	r.VolumeWriteable = errString(os.WriteFile("/data/new", []byte("x"), 0o644))

	if err := json.NewEncoder(os.Stdout).Encode(&r); err != nil {
		os.Exit(1)
	}
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// serve answers one HTTP request on $PORT (all addresses, as servers do) with
// the hostname and the interfaces it sees, then exits.
func serve() {
	l, err := net.Listen("tcp", ":"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := l.Accept()
	if err != nil {
		os.Exit(1)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	c.Read(buf) // the request; its content does not matter
	host, _ := os.Hostname()
	var names []string
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			names = append(names, i.Name)
		}
	}
	body := fmt.Sprintf("hello from %s (%s)", host, strings.Join(names, ","))
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
