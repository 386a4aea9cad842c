package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// managedControllers are the cgroup v1 controllers whose cgroups a handler
// with ManageCgroups makes, fills and removes itself: memory, so that its OOM
// kill counter outlives the container, and cpu, so that the container can be
// shown its quota, period and shares. Every other controller is left to the
// runtime, which makes, fills and removes its cgroups as it always does.
var managedControllers = []string{"memory", "cpu"}

// cgroupRemoveTimeout bounds how long Delete waits for a managed cgroup to
// empty. The runtime's helpers (runsc's gofer and ptrace stubs) may still be
// exiting when what Delete waited for is gone (an adopted container's
// sandbox process), and cgroup v1 has no event for "empty": rmdir is retried
// while it says EBUSY.
const cgroupRemoveTimeout = 10 * time.Second

// cgroupSet is the cgroups a handler made for one container. It is also the
// record kept on disk until they are removed, so that Recover finds them
// after a crash even when the runtime has forgotten the container.
type cgroupSet struct {
	ID   string            `json:"id"`
	Dirs map[string]string `json:"dirs"` // controller -> cgroup directory
}

func (s *cgroupSet) memory() string { return s.Dirs["memory"] }

// cgroupManager makes and removes the managed cgroups of one handler.
type cgroupManager struct {
	// records is a directory with one <id>.json per cgroupSet not yet
	// removed. It sits next to the runtime's state root, not in it: runc and
	// crun take every directory there for a container.
	records string

	mu     sync.Mutex
	active map[string]bool // ids whose cgroups a live Container of this process owns
}

func newCgroupManager(records string) (*cgroupManager, error) {
	if err := os.MkdirAll(records, 0o700); err != nil {
		return nil, err
	}
	return &cgroupManager{records: records, active: map[string]bool{}}, nil
}

// prepare makes the managed cgroups at the spec's cgroupsPath, writes the
// spec's resources for those controllers into them and, when the spec mounts
// cgroupfs at /sys/fs/cgroup, rewrites config.json so that the container sees
// them there instead, read-only. It returns nil when there is nothing to
// manage: no cgroupsPath, or no cgroup v1 hierarchy for any managed
// controller (a cgroup v2 host), where the runtime does everything itself.
func (m *cgroupManager) prepare(ctx context.Context, id, bundle string, spec *specs.Spec) (_ *cgroupSet, err error) {
	if spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return nil, nil
	}
	cgPath := spec.Linux.CgroupsPath
	if !path.IsAbs(cgPath) || strings.Contains(cgPath, ":") {
		// Relative paths are resolved by the runtime against its own
		// cgroup, and systemd's slice:prefix:name by systemd: neither is
		// a directory this process can make in advance.
		return nil, fmt.Errorf("linux.cgroupsPath %q: a handler that manages cgroups needs an absolute path", cgPath)
	}
	set := &cgroupSet{ID: id, Dirs: map[string]string{}}
	mounts := cgroupMounts().v1
	for _, c := range managedControllers {
		if mnt, ok := mounts[c]; ok {
			set.Dirs[c] = underMount(mnt.point, mnt.root, cgPath)
		}
	}
	if len(set.Dirs) == 0 {
		return nil, nil
	}
	writes, err := cgroupWrites(spec.Linux.Resources)
	if err != nil {
		return nil, err
	}

	// The record goes first: whatever exists of the cgroups is on record.
	m.mu.Lock()
	m.active[id] = true
	m.mu.Unlock()
	if err := m.save(set); err != nil {
		m.forget(id)
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = m.remove(context.WithoutCancel(ctx), set)
		}
	}()
	for _, c := range slices.Sorted(maps.Keys(set.Dirs)) {
		if err := os.MkdirAll(set.Dirs[c], 0o755); err != nil {
			return nil, fmt.Errorf("make cgroup: %w", err)
		}
	}
	for _, w := range writes {
		dir, ok := set.Dirs[w.controller]
		if !ok {
			if w.optional {
				continue
			}
			return nil, fmt.Errorf("linux.resources: no cgroup v1 %s hierarchy on this host for %s", w.controller, w.file)
		}
		file := filepath.Join(dir, w.file)
		if w.optional {
			if _, err := os.Stat(file); err != nil {
				continue
			}
		}
		if err := os.WriteFile(file, []byte(w.value), 0); err != nil {
			return nil, fmt.Errorf("set %s to %s: %w", w.file, w.value, err)
		}
	}
	if err := showCgroups(bundle, set); err != nil {
		return nil, err
	}
	return set, nil
}

// cgroupWrite is one value to write into a managed cgroup's control file.
type cgroupWrite struct {
	controller, file, value string
	// optional writes are skipped when the file does not exist; they only
	// prepare for the writes after them.
	optional bool
}

// cgroupWrites turns linux.resources into cgroup v1 writes, in an order the
// kernel accepts whatever the cgroup held before (it may be left over from a
// crash): limits that others are checked against are lifted first. Fields
// of the managed controllers that it cannot write are refused rather than
// silently dropped; fields of other controllers are the runtime's.
func cgroupWrites(r *specs.LinuxResources) ([]cgroupWrite, error) {
	if r == nil {
		return nil, nil
	}
	var ws []cgroupWrite
	add := func(controller, file, value string) {
		ws = append(ws, cgroupWrite{controller: controller, file: file, value: value})
	}
	if mem := r.Memory; mem != nil {
		// memory.kernel, obsolete since Linux 5.4, is deprecated in the
		// runtime-spec, which lets runtimes ignore it: it is.
		switch {
		case mem.KernelTCP != nil:
			return nil, unsupported("memory.kernelTCP")
		case mem.UseHierarchy != nil:
			return nil, unsupported("memory.useHierarchy")
		}
		if mem.Limit != nil || mem.Swap != nil {
			// memory+swap may not be below memory: lift it first.
			ws = append(ws, cgroupWrite{controller: "memory", file: "memory.memsw.limit_in_bytes", value: "-1", optional: true})
		}
		if mem.Limit != nil {
			add("memory", "memory.limit_in_bytes", strconv.FormatInt(*mem.Limit, 10))
		}
		if mem.Swap != nil {
			// Without swap accounting (no memory.memsw.* files) this
			// fails, as it does with runc.
			add("memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(*mem.Swap, 10))
		}
		if mem.Reservation != nil {
			add("memory", "memory.soft_limit_in_bytes", strconv.FormatInt(*mem.Reservation, 10))
		}
		if mem.Swappiness != nil {
			add("memory", "memory.swappiness", strconv.FormatUint(*mem.Swappiness, 10))
		}
		if mem.DisableOOMKiller != nil && *mem.DisableOOMKiller {
			add("memory", "memory.oom_control", "1")
		}
	}
	if cpu := r.CPU; cpu != nil {
		switch {
		case cpu.RealtimeRuntime != nil:
			return nil, unsupported("cpu.realtimeRuntime")
		case cpu.RealtimePeriod != nil:
			return nil, unsupported("cpu.realtimePeriod")
		}
		// cpus and mems belong to the cpuset controller: the runtime's.
		if cpu.Shares != nil {
			add("cpu", "cpu.shares", strconv.FormatUint(*cpu.Shares, 10))
		}
		if cpu.Period != nil || cpu.Quota != nil {
			// The kernel checks a quota against the period and the
			// parent's: drop any old quota before setting either.
			add("cpu", "cpu.cfs_quota_us", "-1")
		}
		if cpu.Period != nil {
			add("cpu", "cpu.cfs_period_us", strconv.FormatUint(*cpu.Period, 10))
		}
		if cpu.Quota != nil {
			add("cpu", "cpu.cfs_quota_us", strconv.FormatInt(*cpu.Quota, 10))
		}
		if cpu.Burst != nil {
			add("cpu", "cpu.cfs_burst_us", strconv.FormatUint(*cpu.Burst, 10))
		}
		if cpu.Idle != nil {
			add("cpu", "cpu.idle", strconv.FormatInt(*cpu.Idle, 10))
		}
	}
	return ws, nil
}

func unsupported(field string) error {
	return fmt.Errorf("linux.resources.%s is not supported by a handler that manages cgroups", field)
}

// cgroupMountPoint is where a spec mounts cgroupfs for the container.
const cgroupMountPoint = "/sys/fs/cgroup"

// showCgroups replaces a cgroup mount at /sys/fs/cgroup in bundle's
// config.json with read-only bind mounts of the managed cgroups at
// /sys/fs/cgroup/<controller>, the layout a cgroup v1 container sees. It
// does nothing when there is no such mount, and changes nothing else in the
// file (fields this package does not know survive).
//
// Read-only always, whatever the spec's mount says: these are the host's
// cgroups that confine the whole sandbox, not a view of the container's own.
func showCgroups(bundle string, set *cgroupSet) error {
	file := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("read config.json: %w", err)
	}
	var mounts []json.RawMessage
	if m, ok := doc["mounts"]; ok {
		if err := json.Unmarshal(m, &mounts); err != nil {
			return fmt.Errorf("read config.json mounts: %w", err)
		}
	}
	var out []json.RawMessage
	replaced := false
	for _, m := range mounts {
		var mnt specs.Mount
		if err := json.Unmarshal(m, &mnt); err != nil {
			return fmt.Errorf("read config.json mounts: %w", err)
		}
		if (mnt.Type != "cgroup" && mnt.Type != "cgroup2") || path.Clean(mnt.Destination) != cgroupMountPoint {
			out = append(out, m)
			continue
		}
		replaced = true
		for _, c := range slices.Sorted(maps.Keys(set.Dirs)) {
			b, err := json.Marshal(specs.Mount{
				Destination: cgroupMountPoint + "/" + c,
				Type:        "bind",
				Source:      set.Dirs[c],
				Options:     []string{"bind", "ro", "nosuid", "nodev", "noexec"},
			})
			if err != nil {
				return err
			}
			out = append(out, b)
		}
	}
	if !replaced {
		return nil
	}
	if doc["mounts"], err = json.Marshal(out); err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "\t")
	if err != nil {
		return err
	}
	return writeFileAtomic(file, b, 0o644)
}

// save writes set's record.
func (m *cgroupManager) save(set *cgroupSet) error {
	b, err := json.Marshal(set)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(m.records, set.ID+".json"), b, 0o600); err != nil {
		return fmt.Errorf("record cgroups: %w", err)
	}
	return nil
}

// load returns the recorded cgroup sets by container id. Records that cannot
// be read are skipped: they name nothing that could be removed safely.
func (m *cgroupManager) load() (map[string]*cgroupSet, error) {
	ents, err := os.ReadDir(m.records)
	if err != nil {
		return nil, fmt.Errorf("cgroup records: %w", err)
	}
	sets := map[string]*cgroupSet{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || checkID(id) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.records, e.Name()))
		if err != nil {
			continue
		}
		set := new(cgroupSet)
		if err := json.Unmarshal(b, set); err != nil || set.ID != id || !m.plausible(set) {
			continue
		}
		sets[id] = set
	}
	return sets, nil
}

// plausible refuses a record whose directories are not cgroups of a managed
// controller below that controller's hierarchy: Recover must never rmdir
// anything else.
func (m *cgroupManager) plausible(set *cgroupSet) bool {
	mounts := cgroupMounts().v1
	for c, dir := range set.Dirs {
		mnt, ok := mounts[c]
		if !ok || !slices.Contains(managedControllers, c) || filepath.Clean(dir) != dir ||
			!strings.HasPrefix(dir, mnt.point+"/") {
			return false
		}
	}
	return len(set.Dirs) > 0
}

// isActive says whether a Container of this process owns id's cgroups.
func (m *cgroupManager) isActive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active[id]
}

func (m *cgroupManager) forget(id string) {
	m.mu.Lock()
	delete(m.active, id)
	m.mu.Unlock()
}

// remove removes set's cgroups (parents stay, as runc leaves them) and then
// its record. A cgroup that still has processes after cgroupRemoveTimeout is
// an error, and the record stays so that a later Delete or Recover can try
// again.
func (m *cgroupManager) remove(ctx context.Context, set *cgroupSet) error {
	var errs []error
	for _, c := range slices.Sorted(maps.Keys(set.Dirs)) {
		if err := removeCgroupDir(ctx, set.Dirs[c]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(m.records, set.ID+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup record: %w", err)
	}
	m.forget(set.ID)
	return nil
}

func removeCgroupDir(ctx context.Context, dir string) error {
	deadline := time.Now().Add(cgroupRemoveTimeout)
	delay := 5 * time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("remove cgroup %s: %w (%w)", dir, err, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// writeFileAtomic replaces file with b through a temporary file and a
// rename, so that a reader (or a crash) never sees half of it.
func writeFileAtomic(file string, b []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// removeEmptyCgroups removes the cgroup at the absolute cgroupsPath from
// every hierarchy under cgroupMountPoint (and from a cgroup2 mounted there
// itself), where it exists and is empty. It waits a little for processes
// that are still exiting (rmdir says EBUSY until the cgroup is empty).
// Relative and systemd paths are left alone: they are not knbox's.
func removeEmptyCgroups(cgroupsPath string) {
	if !path.IsAbs(cgroupsPath) || strings.Contains(cgroupsPath, ":") || path.Clean(cgroupsPath) == "/" {
		return
	}
	dirs := []string{filepath.Join(cgroupMountPoint, cgroupsPath)}
	if ents, err := os.ReadDir(cgroupMountPoint); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(cgroupMountPoint, e.Name(), cgroupsPath))
			}
		}
	}
	// One second for all of them: a cgroup in use stays busy.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, d := range dirs {
		_ = removeCgroupDir(ctx, d) // what is missing or in use stays as it is
	}
}
