package instance

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

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
)

// Recover removes what an earlier process that was killed left behind in
// StateDir: the containers of its instances, sidecars included (found
// through each handler's Recover), their root filesystem mounts, network namespaces and
// directories. Instances are not adopted: their output can no longer be
// captured, so the revisions start fresh ones when they are ensured again.
// Call it once, before the first Ensure.
func (m *Manager) Recover(ctx context.Context) error {
	dir := instancesDir(m.opts.StateDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	m.mu.Lock()
	live := map[string]bool{}
	for _, r := range m.revs {
		r.mu.Lock()
		for id := range r.instances {
			live[id] = true
		}
		r.mu.Unlock()
	}
	m.mu.Unlock()

	left := map[string]instanceState{}
	for _, e := range ents {
		if !e.IsDir() || live[e.Name()] {
			continue
		}
		st := instanceState{ID: e.Name(), NetNS: e.Name()}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), stateFile)); err == nil {
			if err := json.Unmarshal(b, &st); err != nil || st.ID != e.Name() {
				st = instanceState{ID: e.Name(), NetNS: e.Name()}
			}
		}
		left[e.Name()] = st
	}
	if len(left) == 0 {
		return errors.Join(m.recoverEgress(ctx, live)...)
	}

	var errs []error
	// Containers first: they hold the mounts and the namespaces.
	names := make([]string, 0, len(m.opts.Handlers))
	for n := range m.opts.Handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	containers := 0
	for _, n := range names {
		cs, err := m.opts.Handlers[n].Recover(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("recover: handler %s: %w", n, err))
			continue
		}
		for _, c := range cs {
			// A sidecar's id names its instance too.
			if _, ok := left[instanceOf(c.ID())]; !ok {
				continue
			}
			if err := c.Delete(ctx); err != nil {
				errs = append(errs, fmt.Errorf("recover: delete %s container %s: %w", n, c.ID(), err))
				continue
			}
			containers++
		}
	}

	nss, err := network.List(m.netnsRoot)
	if err != nil {
		errs = append(errs, fmt.Errorf("recover: %w", err))
	}
	removed := 0
	for id, st := range left {
		idir := filepath.Join(dir, id)
		ok := true
		for _, ns := range nss {
			if ns.Name == st.NetNS {
				if err := m.detachEgress(ctx, ns); err != nil {
					errs = append(errs, fmt.Errorf("recover: %w", err))
					ok = false
					continue
				}
				if err := ns.Delete(); err != nil {
					errs = append(errs, fmt.Errorf("recover: %w", err))
					ok = false
				}
			}
		}
		if err := image.Unmount(idir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			ok = false
		}
		if err := unmountUnder(idir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			ok = false
		}
		if !ok {
			continue
		}
		if err := os.RemoveAll(idir); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
			continue
		}
		removed++
	}
	errs = append(errs, m.recoverEgress(ctx, live)...)
	m.log.Info("recovered from an earlier run", "instances", removed, "containers", containers, "failed", len(errs))
	return errors.Join(errs...)
}

// detachEgress detaches ns from the egress bridge, if egress is on.
func (m *Manager) detachEgress(ctx context.Context, ns *network.NS) error {
	if m.opts.Egress == nil {
		return nil
	}
	return m.opts.Egress.Detach(ctx, ns)
}

// recoverEgress detaches what the egress bridge still holds for instances
// that are not live: those whose directory or namespace went before their
// attachment did (a crash in between, or a reboot that took the namespaces
// and the firewall rules but not the addresses kept in the data dir).
func (m *Manager) recoverEgress(ctx context.Context, live map[string]bool) []error {
	if m.opts.Egress == nil {
		return nil
	}
	ids, err := m.opts.Egress.Attached()
	if err != nil {
		return []error{fmt.Errorf("recover: %w", err)}
	}
	var errs []error
	for _, id := range ids {
		if live[id] {
			continue
		}
		ns := &network.NS{Name: id, Path: filepath.Join(m.netnsRoot, id)}
		if err := m.opts.Egress.Detach(ctx, ns); err != nil {
			errs = append(errs, fmt.Errorf("recover: %w", err))
		}
	}
	return errs
}

// mountsUnder returns the mount points at or below dir in this process's
// mount namespace, deepest last.
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
