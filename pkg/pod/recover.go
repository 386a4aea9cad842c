package pod

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
)

// Recover takes over what an earlier process left in StateDir. A pod whose
// shim still answers (the daemon was restarted, upgraded or killed, and its
// shims ran on) is adopted: it runs on, supervised, probed and restarted by
// this Runtime as if it had started it, and its Status is returned. What
// cannot be adopted (no shim: the machine restarted, or the pods ran
// without shims; a pod of a handler this Runtime lacks) is removed: its
// containers, sidecars included (found through each handler's Recover),
// root filesystem mounts, network namespaces and directories, and egress
// attachments of pods that are gone. Call it once, before the first Run.
func (r *Runtime) Recover(ctx context.Context) ([]Status, error) {
	dir := r.opts.StateDir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	r.mu.RLock()
	live := map[string]bool{}
	for id := range r.pods {
		live[id] = true
	}
	r.mu.RUnlock()

	left := map[string]string{} // pod id -> its network namespace's name
	var adopted []Status
	for _, e := range ents {
		if !e.IsDir() || live[e.Name()] {
			continue
		}
		netns := e.Name()
		var st podState
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), stateFile)); err == nil {
			if err := json.Unmarshal(b, &st); err == nil && st.Spec.ID == e.Name() && st.NetNS != "" {
				netns = st.NetNS
				if p := r.adopt(ctx, st); p != nil {
					adopted = append(adopted, p.status())
					live[p.spec.ID] = true
					continue
				}
			}
		}
		left[e.Name()] = netns
	}
	if len(adopted) > 0 {
		r.log.Info("adopted the pods of an earlier run", "pods", len(adopted))
	}
	if len(left) == 0 {
		return adopted, errors.Join(r.recoverEgress(ctx, live)...)
	}

	var errs []error
	// Containers first: they hold the mounts and the namespaces.
	containers := 0
	for _, n := range r.Handlers() {
		cs, err := r.opts.Handlers[n].Recover(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("recover: handler %s: %w", n, err))
			continue
		}
		for _, c := range cs {
			// A sidecar's id names its pod too.
			if _, ok := left[podOf(c.ID())]; !ok {
				continue
			}
			if err := c.Delete(ctx); err != nil {
				errs = append(errs, fmt.Errorf("recover: delete %s container %s: %w", n, c.ID(), err))
				continue
			}
			containers++
		}
	}

	nss, err := network.List(r.netnsRoot)
	if err != nil {
		errs = append(errs, fmt.Errorf("recover: %w", err))
	}
	removed := 0
	for id, netns := range left {
		pdir := filepath.Join(dir, id)
		ok := true
		for _, ns := range nss {
			if ns.Name == netns {
				if eg := r.opts.Egress; eg != nil {
					if err := eg.Detach(ctx, ns); err != nil {
						errs = append(errs, fmt.Errorf("recover: %w", err))
						ok = false
						continue
					}
				}
				if err := ns.Delete(); err != nil {
					errs = append(errs, fmt.Errorf("recover: %w", err))
					ok = false
				}
			}
		}
		if err := image.Unmount(pdir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			ok = false
		}
		if err := unmountUnder(pdir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			ok = false
		}
		if !ok {
			continue
		}
		if err := os.RemoveAll(pdir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			continue
		}
		removed++
	}
	errs = append(errs, r.recoverEgress(ctx, live)...)
	r.log.Info("removed what an earlier run left", "pods", removed, "containers", containers, "failed", len(errs))
	return adopted, errors.Join(errs...)
}

// adoptTimeout bounds asking a shim what it runs.
const adoptTimeout = 5 * time.Second

// adopt takes over the pod st describes if its shim answers, and starts
// supervising it; nil when it cannot be adopted. A pod that cannot be
// adopted but whose shim answers has its containers deleted and its shim
// shut down through the shim, so that the removal that follows finds them
// gone.
func (r *Runtime) adopt(ctx context.Context, st podState) *pod {
	dir := filepath.Join(r.opts.StateDir, st.Spec.ID)
	client := &shimClient{dir: dir}
	cctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	resp, err := client.call(cctx, shimRequest{Op: "state"})
	if err != nil {
		return nil // no shim: removed as a leftover
	}
	spec := st.Spec
	_, known := r.opts.Handlers[spec.Handler]
	ns := &network.NS{Name: st.NetNS, Path: filepath.Join(r.netnsRoot, st.NetNS)}
	_, nsErr := os.Stat(ns.Path)
	// A Sequential pod (a build) is not adopted: what it was doing is
	// known only to the process that ran it, so it ends and its owner
	// reports it interrupted.
	// A prepared pod (containers created, never started) is not adopted
	// either: nothing waits for it now, and whoever prepared it prepares
	// again what it needs.
	_, markErr := os.Lstat(filepath.Join(dir, preparedMarker))
	prepared := markErr == nil
	if !known || nsErr != nil || len(r.opts.ShimCommand) == 0 || spec.validate() != nil || spec.Sequential || prepared {
		r.log.Warn("a pod of an earlier run cannot be adopted: removing it", "pod", spec.ID, "handler", spec.Handler, "handlerKnown", known, "netnsErr", nsErr, "prepared", prepared)
		for _, c := range resp.Containers {
			_, _ = client.call(cctx, shimRequest{Op: "kill", ID: c.ID, Signal: int(syscall.SIGKILL)})
			_, _ = client.call(cctx, shimRequest{Op: "delete", ID: c.ID})
		}
		_, _ = client.call(cctx, shimRequest{Op: "shutdown"})
		return nil
	}
	p := newPod(r, spec)
	p.created = st.Created
	p.st.Created, p.st.Pulling, p.st.Running = st.Created, false, true
	p.prepared, p.mon, p.ns = true, shimMonitor{client}, ns
	p.vols = make(map[string]oci.Volume, len(spec.Volumes))
	for i, v := range spec.Volumes {
		p.vols[v.Name] = oci.Volume{Path: filepath.Join(dir, "volumes", strconv.Itoa(i)), Writable: v.EmptyDir}
	}
	p.ctrs = p.newCtrs()
	if hook := r.opts.Network; hook != nil {
		// What served the pod in its namespace ended with the process
		// that served it; /etc/resolv.conf is already in place.
		if _, stop, err := hook(ctx, &p.spec, ns); err != nil {
			r.log.Warn("an adopted pod's network services", "pod", spec.ID, "err", err)
		} else {
			p.netStop = stop
		}
	}
	found := map[string]shimContainerState{}
	for _, c := range resp.Containers {
		found[c.ID] = c
	}
	p.adopted = true
	for _, c := range p.ctrs {
		c.mounted = true
		c.pinned = true // its staging directory (pinner) holds the earlier run's mounts
		if cs, ok := found[c.id]; ok {
			c.t = &shimTask{c: client, id: c.id, pid: cs.Pid}
		} else {
			p.adopted = false // started again as a whole
		}
	}
	if !p.adopted {
		p.st.Running = false
	}
	p.lastStarted = time.Now()
	r.mu.Lock()
	r.pods[spec.ID] = p
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		p.run(r.ctx)
	}()
	r.log.Info("pod adopted", "pod", spec.ID, "containers", len(resp.Containers), "shimPid", resp.ShimPid)
	return p
}

// recoverEgress detaches what the egress bridge still holds for pods that
// are not live: those whose directory or namespace went before their
// attachment did (a crash in between, or a reboot that took the namespaces
// and the firewall rules but not the addresses kept in the data dir).
func (r *Runtime) recoverEgress(ctx context.Context, live map[string]bool) []error {
	if r.opts.Egress == nil {
		return nil
	}
	ids, err := r.opts.Egress.Attached()
	if err != nil {
		return []error{fmt.Errorf("recover: %w", err)}
	}
	var errs []error
	for _, id := range ids {
		if live[id] {
			continue
		}
		ns := &network.NS{Name: id, Path: filepath.Join(r.netnsRoot, id)}
		if err := r.opts.Egress.Detach(ctx, ns); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
		}
	}
	return errs
}

// mountsUnder returns the mount points at or below dir in this process's
// mount namespace.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// unmountUnder unmounts everything mounted at or below dir, deepest first
// (lazily when busy).
func unmountUnder(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("unmount under %s: %w", dir, err)
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mps {
		err := unix.Unmount(mp, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(mp, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
