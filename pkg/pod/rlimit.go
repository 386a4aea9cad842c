package pod

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// rlimitTypes maps the spec's rlimit names to resources.
var rlimitTypes = map[string]int{
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_CPU": unix.RLIMIT_CPU,
	"RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_LOCKS": unix.RLIMIT_LOCKS,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO, "RLIMIT_RTTIME": unix.RLIMIT_RTTIME, "RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_STACK": unix.RLIMIT_STACK,
}

var canRaiseRlimits = sync.OnceValue(func() bool { return hasCapability(unix.CAP_SYS_RESOURCE) })

// clampRlimits lowers the spec's rlimits to what the runtime can set on
// this host: without CAP_SYS_RESOURCE (a sandboxed daemon) no limit can be
// raised above this process's hard limit, and NOFILE never above
// fs.nr_open. A limit the runtime cannot set would fail every start.
func clampRlimits(s *specs.Spec) {
	if s.Process == nil {
		return
	}
	for i := range s.Process.Rlimits {
		rl := &s.Process.Rlimits[i]
		res, ok := rlimitTypes[rl.Type]
		if !ok {
			continue
		}
		max := uint64(unix.RLIM_INFINITY)
		if !canRaiseRlimits() {
			var cur unix.Rlimit
			if err := unix.Getrlimit(res, &cur); err == nil {
				max = cur.Max
			}
		}
		if res == unix.RLIMIT_NOFILE {
			if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
				if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
					max = min(max, n)
				}
			}
		}
		rl.Hard = min(rl.Hard, max)
		rl.Soft = min(rl.Soft, rl.Hard)
	}
}

// hasCapability reports whether this process has capability c in its
// effective set.
func hasCapability(c int) bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		return err == nil && mask&(1<<uint(c)) != 0
	}
	return false
}
