package oci

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Default masked and read-only paths: containerd's.
var (
	defaultMaskedPaths = []string{
		"/proc/acpi",
		"/proc/asound",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

const defaultTerminationMessagePath = "/dev/termination-log"

// shmSize is /dev/shm's size, Docker's and containerd's default.
const shmSize = 64 << 20

// fixedMounts are the mounts every container gets, before the bind mounts.
// Those a volume takes the place of (skip) are left out, and their host
// paths not pinned.
func fixedMounts(in *Input, memLimit int64, skip map[string]bool) ([]specs.Mount, error) {
	tmpfsSize := ""
	if memLimit > 0 {
		tmpfsSize = ",size=" + strconv.FormatInt(memLimit, 10)
	}
	opts := func(s string) []string { return strings.Split(s, ",") }
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: opts("nosuid,noexec,nodev")},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: opts("nosuid,strictatime,mode=755,size=65536k")},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: opts("nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5")},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: opts("nosuid,noexec,nodev,mode=1777,size=" + strconv.Itoa(shmSize))},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: opts("nosuid,noexec,nodev")},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: opts("nosuid,noexec,nodev,ro")},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: opts("nosuid,noexec,nodev,relatime,ro")},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: opts("nosuid,nodev,mode=1777" + tmpfsSize)},
	}
	if in.VarLog != "" {
		if !skip["/var/log"] {
			src, err := in.pin(HostPath{Root: in.VarLog})
			if err != nil {
				return nil, fmt.Errorf("build spec: /var/log: %w", err)
			}
			m = append(m, specs.Mount{Destination: "/var/log", Type: "bind", Source: src, Options: opts("rbind,rw,nosuid,nodev,noexec")})
		}
	} else {
		m = append(m, specs.Mount{Destination: "/var/log", Type: "tmpfs", Source: "tmpfs", Options: opts("nosuid,nodev,noexec,mode=1777" + tmpfsSize)})
	}
	for _, f := range []struct{ dst, src string }{
		{"/etc/hosts", in.EtcHosts},
		{"/etc/hostname", in.EtcHostname},
		{"/etc/resolv.conf", in.ResolvConf},
	} {
		if f.src != "" && !skip[f.dst] {
			src, err := in.pinFile(f.src)
			if err != nil {
				return nil, fmt.Errorf("build spec: %s: %w", f.dst, err)
			}
			m = append(m, specs.Mount{Destination: f.dst, Type: "bind", Source: src, Options: opts("bind,ro,nosuid,nodev,noexec")})
		}
	}
	if in.SyslogSocket != "" {
		src, err := in.pinFile(in.SyslogSocket)
		if err != nil {
			return nil, fmt.Errorf("build spec: /dev/log: %w", err)
		}
		m = append(m, specs.Mount{Destination: "/dev/log", Type: "bind", Source: src, Options: opts("bind,rw,nosuid,nodev,noexec")})
	}
	return slices.DeleteFunc(m, func(x specs.Mount) bool { return skip[x.Destination] }), nil
}

// replaceable are fixed mounts a volume may take the place of, as the
// kubelet lets a volume replace /etc/hosts and as an emptyDir at /tmp or
// /dev/shm is common on Kubernetes.
var replaceable = []string{"/tmp", "/var/log", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/shm"}

// reserved reports whether a volume may not be mounted at p: Knative's
// reserved paths, the runtime's own mounts, and anything inside /proc and
// /sys.
func reserved(p string) bool {
	switch p {
	case "/", "/dev", "/dev/log", "/dev/pts", "/dev/mqueue":
		return true
	}
	for _, dir := range []string{"/proc", "/sys"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

func buildMounts(in *Input, memLimit int64) ([]specs.Mount, error) {
	c := &in.Container
	var mounts []specs.Mount
	seen := map[string]bool{}

	termPath := ""
	if in.TerminationLog != "" {
		p := c.TerminationMessagePath
		if p == "" {
			p = defaultTerminationMessagePath
		}
		if !path.IsAbs(p) {
			return nil, fieldErr("terminationMessagePath", "%q is not an absolute path", p)
		}
		p = path.Clean(p)
		if reserved(p) || slices.Contains(replaceable, p) {
			return nil, fieldErr("terminationMessagePath", "%q is a reserved path", p)
		}
		termPath = p
		seen[p] = true
		src, err := in.pinFile(in.TerminationLog)
		if err != nil {
			return nil, fmt.Errorf("build spec: %s: %w", p, err)
		}
		mounts = append(mounts, specs.Mount{Destination: p, Type: "bind", Source: src, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}

	for i, vm := range c.VolumeMounts {
		f := fmt.Sprintf("volumeMounts[%d]", i)
		vol, ok := in.Volumes[vm.Name]
		if !ok || vol.Path == "" {
			return nil, fieldErr(f+".name", "volume %q was not prepared", vm.Name)
		}
		if !path.IsAbs(vm.MountPath) {
			return nil, fieldErr(f+".mountPath", "%q is not an absolute path", vm.MountPath)
		}
		if strings.Contains(vm.MountPath, ":") {
			return nil, fieldErr(f+".mountPath", "%q must not contain ':'", vm.MountPath)
		}
		dst := path.Clean(vm.MountPath)
		switch {
		case reserved(dst):
			return nil, fieldErr(f+".mountPath", "%q is a reserved path", dst)
		case dst == termPath:
			return nil, fieldErr(f+".mountPath", "%q is the terminationMessagePath", dst)
		case seen[dst]:
			return nil, fieldErr(f+".mountPath", "%q is mounted twice", dst)
		}
		seen[dst] = true
		if vm.SubPathExpr != "" {
			return nil, fieldErr(f+".subPathExpr", "not supported")
		}
		var src string
		if vm.SubPath != "" {
			sub := vm.SubPath
			if path.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..") {
				return nil, fieldErr(f+".subPath", "%q must be a relative path without '..'", sub)
			}
			p, err := in.pin(HostPath{Root: vol.Path, Rel: sub, FollowSymlinks: true, MakeDirs: vol.Writable})
			if err != nil {
				return nil, fieldErr(f+".subPath", "%q in volume %q: %v", sub, vm.Name, err)
			}
			src = p
		} else {
			p, err := in.pin(HostPath{Root: vol.Path})
			if err != nil {
				return nil, fmt.Errorf("build spec: volume %q: %w", vm.Name, err)
			}
			src = p
		}
		mode := "ro"
		if vol.Writable && !vm.ReadOnly {
			mode = "rw"
		}
		mounts = append(mounts, specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}

	all, err := fixedMounts(in, memLimit, seen)
	if err != nil {
		return nil, err
	}
	all = append(all, mounts...)
	// Parents before children: a volume at /etc must not hide /etc/hosts.
	slices.SortStableFunc(all, func(a, b specs.Mount) int {
		return depth(a.Destination) - depth(b.Destination)
	})
	return all, nil
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
