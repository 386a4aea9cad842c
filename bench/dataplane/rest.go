package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// restCost is what prepared sandboxes cost at rest: medians over those
// measured.
type restCost struct {
	runtime  string
	n        int
	pss, rss int64
	pids     int
}

// restCost waits (bounded) until every revision in revs has its prepared
// sandbox (knbox marks its directory "prepared"), then measures each one's
// shim and the processes below it.
func (e *env) restCost(ctx context.Context, rt string, revs []string) (restCost, error) {
	pods := filepath.Join(e.dir, "data", "instances", "instances")
	var dirs []string
	err := poll(ctx, 90*time.Second, 100*time.Millisecond, "prepared sandboxes", func() (bool, error) {
		dirs = dirs[:0]
		ents, err := os.ReadDir(pods)
		if err != nil {
			return false, nil
		}
		for _, en := range ents {
			for _, r := range revs {
				if strings.HasPrefix(en.Name(), r+"-") {
					if _, err := os.Stat(filepath.Join(pods, en.Name(), "prepared")); err == nil {
						dirs = append(dirs, filepath.Join(pods, en.Name()))
					}
				}
			}
		}
		if len(dirs) < len(revs) {
			return false, nil
		}
		// Prepared: the runtime holds each one's container, created.
		return createdContainers(rt, filepath.Join(e.dir, "data", "runtimes", rt), revs) >= len(revs), nil
	})
	if err != nil {
		return restCost{}, fmt.Errorf("%w (%d of %d)", err, len(dirs), len(revs))
	}
	shims := shimsOf(dirs)
	var pss, rss []int64
	pids := 0
	for _, pid := range shims {
		p, r, n := tree(pid)
		pss, rss = append(pss, p), append(rss, r)
		pids = max(pids, n)
	}
	if len(pss) == 0 {
		return restCost{}, fmt.Errorf("no shim process of the %d prepared sandboxes found", len(dirs))
	}
	slices.Sort(pss)
	slices.Sort(rss)
	return restCost{runtime: rt, n: len(pss), pss: pss[len(pss)/2], rss: rss[len(rss)/2], pids: pids}, nil
}

// createdContainers counts the containers of revs (ids "<rev>-...") that
// the runtime, on state root root, lists as created.
func createdContainers(rt, root string, revs []string) int {
	out, err := exec.Command(rt, "--root", root, "list", "--format", "json").Output()
	if err != nil {
		return 0
	}
	var es []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &es) != nil {
		return 0
	}
	n := 0
	for _, c := range es {
		for _, r := range revs {
			if c.Status == "created" && strings.HasPrefix(c.ID, r+"-") {
				n++
			}
		}
	}
	return n
}

// shimsOf finds the shim processes whose --dir is one of dirs.
func shimsOf(dirs []string) []int {
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + en.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) < 2 || args[1] != "shim" {
			continue
		}
		for i := range args[:len(args)-1] {
			if args[i] == "--dir" && want[args[i+1]] {
				out = append(out, pid)
			}
		}
	}
	return out
}

// tree sums the PSS and RSS of pid and its descendants (at most 64).
func tree(pid int) (pss, rss int64, n int) {
	queue := []int{pid}
	for len(queue) > 0 && n < 64 {
		p := queue[0]
		queue = queue[1:]
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			continue
		}
		n++
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Pss:":
				pss += kb << 10
			case "Rss:":
				rss += kb << 10
			}
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, t := range tasks {
			c, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(c)) {
				if k, err := strconv.Atoi(f); err == nil {
					queue = append(queue, k)
				}
			}
		}
	}
	return pss, rss, n
}
