package pod

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxCostProcs bounds the processes Cost counts.
const maxCostProcs = 256

// Cost measures what a pod holds of the machine's memory and processes:
// the proportional set size (PSS: resident memory, a page shared by n
// processes counted 1/n in each, so that the shims' common binary is not
// counted once per shim; RSS where the kernel has no smaps_rollup) and number
// of the processes of its shim and all that runs below it (the runtime's
// waiting init of a prepared pod; runsc's sandbox and gofer), or of its
// containers' inits when it has no shim. ok is false for a pod that does
// not exist or has nothing to measure yet.
func (r *Runtime) Cost(id string) (rss int64, pids int, ok bool) {
	p := r.pod(id)
	if p == nil {
		return 0, 0, false
	}
	var roots []int
	p.mu.Lock()
	if sm, isShim := p.costMon.(shimMonitor); isShim && sm.c.cmd != nil && sm.c.cmd.Process != nil {
		roots = append(roots, sm.c.cmd.Process.Pid)
	}
	roots = append(roots, p.costPids...)
	p.mu.Unlock()
	if len(roots) == 0 {
		return 0, 0, false
	}
	seen := map[int]bool{}
	page := int64(os.Getpagesize())
	for len(roots) > 0 && len(seen) < maxCostProcs {
		pid := roots[0]
		roots = roots[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if n, ok := memoryOf(pid, page); ok {
			rss += n
			pids++
		}
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					roots = append(roots, c)
				}
			}
		}
	}
	return rss, pids, pids > 0
}

// memoryOf is pid's PSS (else RSS) in bytes.
func memoryOf(pid int, page int64) (int64, bool) {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						return kb << 10, true
					}
				}
			}
		}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	return n * page, err == nil
}
