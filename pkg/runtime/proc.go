package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// openPidfd opens a pidfd for pid; with unix.PIDFD_NONBLOCK the runtime's
// poller can wait on it. ok is false when the process is already gone.
func openPidfd(pid, flags int) (f *os.File, ok bool, err error) {
	fd, err := unix.PidfdOpen(pid, flags)
	if errors.Is(err, unix.ESRCH) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid)), true, nil
}

// awaitPidfd blocks until the process behind the pidfd has exited. A pidfd
// turns readable when its process exits, whether or not it is our child; the
// wait parks in the runtime's poller instead of holding a thread.
func awaitPidfd(f *os.File) {
	exited := func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	}
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool { return exited(fd) })
	}
	if err == nil {
		return
	}
	// Not pollable here: fall back to a blocking poll.
	_ = rc.Control(func(fd uintptr) {
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, -1); n > 0 || (err != nil && err != unix.EINTR) {
				return
			}
		}
	})
}

// startTime is field 22 of /proc/<pid>/stat, the process's start in clock
// ticks since boot; with the pid it names a process uniquely.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')') // comm may contain spaces and parentheses
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// cgroupMount is where a cgroup hierarchy is mounted and which cgroup path
// the mount's root stands for.
type cgroupMount struct{ point, root string }

// cgroupMounts finds where each v1 controller's hierarchy and the cgroup2
// hierarchy are mounted. Controllers that share a hierarchy (cpu,cpuacct)
// map to the same mount.
var cgroupMounts = sync.OnceValue(func() (m struct {
	v1 map[string]cgroupMount
	v2 cgroupMount
}) {
	m.v1 = map[string]cgroupMount{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				if _, seen := m.v1[o]; !seen && v1Controller(o) {
					m.v1[o] = cgroupMount{point: pf[4], root: pf[3]}
				}
			}
		case "cgroup2":
			if m.v2.point == "" {
				m.v2 = cgroupMount{point: pf[4], root: pf[3]}
			}
		}
	}
	return m
})

// v1Controller tells a v1 controller's name from the other super options of
// a cgroup mount (rw, relatime, name=systemd, ...).
func v1Controller(opt string) bool {
	switch opt {
	case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children", "noprefix", "cpuset_v2_mode":
		return false
	}
	return !strings.ContainsAny(opt, "=")
}

// memoryCgroup returns the directory of the memory cgroup that /proc/<pid>/cgroup
// (or "self") names, or "" if there is none.
func memoryCgroup(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return ""
	}
	m := cgroupMounts()
	var v2 string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if mem, ok := m.v1["memory"]; c == "memory" && ok {
				return underMount(mem.point, mem.root, parts[2])
			}
		}
	}
	if v2 != "" && m.v2.point != "" {
		dir := underMount(m.v2.point, m.v2.root, v2)
		if _, err := os.Stat(filepath.Join(dir, "memory.events")); err == nil {
			return dir
		}
	}
	return ""
}

// memoryCgroupFromSpec is where a runtime with the cgroupfs driver puts a
// container with this cgroupsPath: absolute paths from the hierarchy's root,
// relative ones below the cgroup this process (and so its child, the runtime)
// runs in.
func memoryCgroupFromSpec(cgroupsPath string) string {
	if cgroupsPath == "" || strings.Contains(cgroupsPath, ":") { // empty, or systemd's slice:prefix:name
		return ""
	}
	if path.IsAbs(cgroupsPath) {
		m := cgroupMounts()
		if mem, ok := m.v1["memory"]; ok {
			return underMount(mem.point, mem.root, cgroupsPath)
		}
		if m.v2.point != "" {
			return underMount(m.v2.point, m.v2.root, cgroupsPath)
		}
		return ""
	}
	self := memoryCgroup("self")
	if self == "" {
		return ""
	}
	return filepath.Join(self, cgroupsPath)
}

func underMount(mountpoint, mountRoot, cgroupPath string) string {
	if mountRoot != "/" {
		if rel, ok := strings.CutPrefix(cgroupPath, mountRoot); ok {
			cgroupPath = rel
		}
	}
	return filepath.Join(mountpoint, filepath.Clean("/"+cgroupPath))
}

// oomKills reads the OOM kill counter of a memory cgroup directory: cgroup v1
// memory.oom_control or cgroup v2 memory.events, both with an "oom_kill N"
// line. ok is false when neither can be read (e.g. the cgroup is gone).
func oomKills(dir string) (n int, ok bool) {
	if dir == "" {
		return 0, false
	}
	for _, name := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, "oom_kill "); found {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					return n, true
				}
			}
		}
	}
	return 0, false
}
