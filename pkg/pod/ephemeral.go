package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/knbox/knbox/pkg/disk"
)

// Ephemeral storage, as the kubelet's eviction manager bounds it.
//
// What a pod writes on the data dir's disk is its containers' writable
// layers (each container's overlay upper directory) and its emptyDir
// volumes that are not of medium Memory. Every EphemeralStorage.Interval
// (the kubelet's 10s) the pod's goroutine measures them while its
// containers run (a walk that opens every directory relative to its parent
// without following links, counts allocated blocks, each hard-linked inode
// once, and never crosses into another file system; bounded in entries and
// depth) and evicts the pod when, in the kubelet's order:
//
//   - an emptyDir holds more than its sizeLimit: "Usage of EmptyDir volume
//     "x" exceeds the limit "10Mi".";
//   - the pod holds more than the sum of its containers'
//     limits.ephemeral-storage (counted when at least one container has
//     one, as the kubelet does): "Pod ephemeral local storage usage exceeds
//     the total limit of containers 10Mi.";
//   - a container's writable layer holds more than its own limit:
//     "Container app exceeded its local ephemeral storage limit "10Mi".".
//
// A container without a limit gets EphemeralStorage.DefaultLimit (0:
// none, as on Kubernetes). A pod whose storage cannot be measured within
// the walk's bounds (more entries than MaxFiles, deeper than MaxDepth) is
// evicted too: a container cannot hide its usage from the measurement.
//
// Eviction kills the pod's containers at once (the kubelet's grace period
// 0 for local storage), records a Failure with ReasonEvicted and the
// message, sends an Evicted event and writes a "knbox: evicted: ..." line
// to the pod's log. Where Kubernetes' ReplicaSet would then make a new
// pod, knbox starts the evicted pod again in place after the restart
// backoff, as a new pod would be: fresh root filesystems and empty
// emptyDir volumes, the same id and network namespace.
//
// Two writable places never reach the disk and need no measure: an emptyDir
// of medium Memory is a tmpfs mounted on the host of its sizeLimit (or the
// pod's memory limit when that is smaller or there is no sizeLimit, else
// the machine's memory), so it cannot exceed it and its pages are charged
// to the memory cgroup of the container that writes them; and each
// container's termination log is the one file of a tmpfs of Kubernetes'
// 4096 bytes (termlog/ in its bundle), so a write past that fails with
// ENOSPC instead of filling the disk.
//
// As the kubelet's, the bound is a measure, not a quota: between two
// measures a container writes at the disk's speed (a dd of 1 GiB under a
// 10Mi limit was measured at 1 GiB when evicted, at the default 10s, under
// runc and runsc alike). The space comes back at the eviction (the
// writable layer is removed); a shorter Interval tightens the bound at the
// price of more walks.
//
// The containers' output is not counted (the kubelet counts it): the log
// store bounds it per instance by rotation (package logs).
//
// Under runsc (the gVisor release installed here, 20221219, whose
// --overlay2 is off by default) the sandbox's gofer writes the root
// filesystem's changes through to the host's overlay, so the upper
// directory is measured as under runc (TestEphemeralStorageEviction runs
// both). With --overlay2=root:memory in the handler's args the writes stay
// in the sandbox's memory, bounded by its memory limit, and the upper
// directory stays empty; later gVisor releases default to root:self, whose
// filestore file is created in the root filesystem's host directory, that
// is in the upper directory, where its allocated blocks are measured (not
// tried here).

// Defaults of EphemeralStorage.
const (
	// DefaultEphemeralStorageInterval is the kubelet's housekeeping
	// interval, at which its eviction manager measures pods.
	DefaultEphemeralStorageInterval = 10 * time.Second
	// DefaultEphemeralStorageMaxFiles bounds the entries one measure of a
	// pod walks (as images' maxImageFiles).
	DefaultEphemeralStorageMaxFiles = 500000
	// DefaultEphemeralStorageMaxDepth bounds the depth of that walk (one
	// open directory per level).
	DefaultEphemeralStorageMaxDepth = 256
)

// EphemeralStorage configures the measure and limits of pods' local
// storage; the zero value of each field is its documented default.
type EphemeralStorage struct {
	// Interval between measures (0: DefaultEphemeralStorageInterval).
	Interval time.Duration
	// DefaultLimit is the limit, in bytes, of a container without
	// limits.ephemeral-storage (0: none).
	DefaultLimit int64
	// MaxFiles and MaxDepth bound a measure's walk (0: the defaults).
	MaxFiles int
	MaxDepth int
}

// termLogDir is the tmpfs that holds a container's termination log.
const termLogDir = "termlog"

// termLogSize is the size of that tmpfs: the 4096 bytes the kubelet reads
// of a termination log.
const termLogSize = maxTerminationMessage

// storageLimits are a pod's local storage limits.
type storageLimits struct {
	ctrs []*resource.Quantity // by container; nil: none
	pod  *resource.Quantity   // the sum of ctrs; nil: none has one
	dirs []diskDir            // the emptyDirs on disk
}

// diskDir is an emptyDir on the data dir's disk.
type diskDir struct {
	idx   int
	name  string
	limit *resource.Quantity // nil: none of its own
}

// enforced tells whether there is a limit to measure against.
func (l *storageLimits) enforced() bool {
	if l.pod != nil {
		return true
	}
	for _, d := range l.dirs {
		if d.limit != nil {
			return true
		}
	}
	return false
}

// newStorageLimits reads spec's limits, with defaultLimit for containers
// without one.
func newStorageLimits(spec *Spec, defaultLimit int64) storageLimits {
	var l storageLimits
	for i := range spec.Containers {
		var lim *resource.Quantity
		if q, ok := spec.Containers[i].Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
			lim = &q
		} else if defaultLimit > 0 {
			lim = resource.NewQuantity(defaultLimit, resource.BinarySI)
		}
		l.ctrs = append(l.ctrs, lim)
		if lim != nil {
			if l.pod == nil {
				q := lim.DeepCopy()
				l.pod = &q
			} else {
				l.pod.Add(*lim)
			}
		}
	}
	for i, v := range spec.Volumes {
		if !v.EmptyDir || v.Medium == corev1.StorageMediumMemory {
			continue
		}
		d := diskDir{idx: i, name: v.Name}
		if v.SizeLimit != nil && v.SizeLimit.Sign() > 0 {
			d.limit = v.SizeLimit
		}
		l.dirs = append(l.dirs, d)
	}
	return l
}

// checkEmptyDir refuses an emptyDir the runtime cannot make.
func checkEmptyDir(v Volume) error {
	if !v.EmptyDir {
		if v.Medium != "" || v.SizeLimit != nil {
			return errors.New("medium and sizeLimit are an emptyDir's")
		}
		return nil
	}
	if v.Medium != corev1.StorageMediumDefault && v.Medium != corev1.StorageMediumMemory {
		return fmt.Errorf("emptyDir.medium: %q is not supported (want \"\" or %q)", v.Medium, corev1.StorageMediumMemory)
	}
	if v.SizeLimit != nil && v.SizeLimit.Sign() < 0 {
		return fmt.Errorf("emptyDir.sizeLimit: must not be negative, was %s", v.SizeLimit.String())
	}
	return nil
}

// memoryVolumeSize is the size of a Memory emptyDir's tmpfs: its
// sizeLimit, or the pod's memory limit (the sum of its containers' when
// each has one) when that is smaller or there is no sizeLimit, and at most
// the machine's memory, as the kubelet sizes it.
func (p *pod) memoryVolumeSize(v Volume) int64 {
	size := p.rt.memory
	var sum int64
	all := true
	for i := range p.spec.Containers {
		q, ok := p.spec.Containers[i].Resources.Limits[corev1.ResourceMemory]
		if !ok || q.Sign() <= 0 {
			all = false
			break
		}
		sum = min(sum, math.MaxInt64-q.Value()) + q.Value() // saturating
	}
	if all && (size <= 0 || sum < size) {
		size = sum
	}
	if v.SizeLimit != nil && v.SizeLimit.Sign() > 0 && (size <= 0 || v.SizeLimit.Value() < size) {
		size = v.SizeLimit.Value()
	}
	return size
}

// mountTmpfs mounts a tmpfs of size bytes (0: the kernel's default) at
// dir, unless one is mounted there already (a pod adopted after a restart).
func mountTmpfs(dir string, size int64, mode uint32) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if mounted, err := disk.IsMountPoint(dir); err != nil {
		return err
	} else if mounted {
		return nil
	}
	data := "mode=" + strconv.FormatUint(uint64(mode), 8)
	if size > 0 {
		data += ",size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount tmpfs at %s: %w", dir, err)
	}
	return nil
}

// makeTermLog makes c's termination log, empty, on its tmpfs, and returns
// its path.
func (c *ctr) makeTermLog() (string, error) {
	dir := filepath.Join(c.dir, termLogDir)
	// Enough blocks for the file; inodes for it and a spare.
	if err := mountTmpfs(dir, termLogSize, 0o711); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		return "", err
	}
	if err := os.Chmod(path, 0o666); err != nil { // past the umask
		return "", err
	}
	return path, nil
}

// termLogPath is where c's termination log is.
func (c *ctr) termLogPath() string { return filepath.Join(c.dir, termLogDir, "termination-log") }

// watchStorage measures the pod's local storage every interval and sends
// the eviction on evict when it is over a limit.
func (p *pod) watchStorage(ctx context.Context, evict chan<- *eviction) {
	for sleepCtx(ctx, p.rt.storage.Interval) {
		ev := p.checkStorage(ctx)
		if ev == nil {
			continue
		}
		select {
		case evict <- ev:
		default:
		}
		return
	}
}

// eviction is a pod over a limit: the failure to record, and the bytes
// used of what was over it (what the measure found, for knbox's log; the
// kubelet's message does not say).
type eviction struct {
	f    *Failure
	used int64
}

// checkStorage measures the pod's local storage and returns the eviction
// when it is over a limit; nil when it is not (or could not be measured
// for a reason of the host's, which is logged).
func (p *pod) checkStorage(ctx context.Context) *eviction {
	l := &p.limits
	b := walkBounds{maxFiles: p.rt.storage.MaxFiles, maxDepth: p.rt.storage.MaxDepth}
	evicted := func(container, msg string, used int64) *eviction {
		return &eviction{f: &Failure{Reason: ReasonEvicted, Container: container, Message: msg, At: time.Now()}, used: used}
	}
	unmeasurable := func(what string, err error, used int64) *eviction {
		var be *walkBoundError
		if ctx.Err() != nil {
			return nil // the containers are being stopped
		}
		if errors.As(err, &be) {
			return evicted("", fmt.Sprintf("Pod ephemeral local storage cannot be measured: %s holds %s.", what, be), used)
		}
		p.log.Warn("measure ephemeral storage", "of", what, "err", err)
		return nil
	}
	var total int64
	for _, d := range l.dirs {
		u, err := diskUsage(ctx, filepath.Join(p.dir, "volumes", strconv.Itoa(d.idx)), b)
		if err != nil {
			if ev := unmeasurable(fmt.Sprintf("emptyDir volume %q", d.name), err, u.bytes); ev != nil {
				return ev
			}
			continue
		}
		if d.limit != nil && u.bytes > d.limit.Value() {
			return evicted("", fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q.", d.name, d.limit.String()), u.bytes)
		}
		total += u.bytes
	}
	used := make([]int64, len(p.ctrs))
	for i, c := range p.ctrs {
		u, err := diskUsage(ctx, filepath.Join(c.dir, "upper"), b)
		if err != nil {
			if ev := unmeasurable(fmt.Sprintf("the writable layer of container %s", c.name), err, u.bytes); ev != nil {
				ev.f.Container = c.name
				return ev
			}
			continue
		}
		used[i] = u.bytes
		total += u.bytes
	}
	p.log.Debug("ephemeral storage", "bytes", total)
	if l.pod != nil && total > l.pod.Value() {
		return evicted("", fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s.", l.pod.String()), total)
	}
	for i, c := range p.ctrs {
		if lim := l.ctrs[i]; lim != nil && used[i] > lim.Value() {
			return evicted(c.name, fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q.", c.name, lim.String()), used[i])
		}
	}
	return nil
}

// emptyVolumes empties the pod's emptyDir volumes (its containers are
// gone): an evicted pod starts again as a new pod would.
func (p *pod) emptyVolumes() {
	for i, v := range p.spec.Volumes {
		if !v.EmptyDir {
			continue
		}
		dir := filepath.Join(p.dir, "volumes", strconv.Itoa(i))
		ents, err := os.ReadDir(dir)
		if err != nil {
			p.log.Warn("empty volume", "volume", v.Name, "err", err)
			continue
		}
		for _, e := range ents {
			// RemoveAll follows no link.
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				p.log.Warn("empty volume", "volume", v.Name, "err", err)
			}
		}
	}
}

// walkBounds bound a measure.
type walkBounds struct {
	maxFiles, maxDepth int
}

// walkBoundError says a walk stopped at a bound.
type walkBoundError struct {
	what  string
	bound int
}

func (e *walkBoundError) Error() string { return fmt.Sprintf("more than %d %s", e.bound, e.what) }

// usage is what a walk found.
type usage struct {
	bytes int64 // allocated, as du counts
	files int
}

// diskUsage measures the tree at root (nothing if it does not exist), as
// du -s counts it: allocated blocks, a hard-linked inode once, not
// crossing into other file systems. It opens every directory relative to
// its parent's descriptor without following links, so that a tree that
// changes under it (a directory swapped for a link to /) cannot lead it out.
// It stops when ctx ends.
func diskUsage(ctx context.Context, root string, b walkBounds) (usage, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return usage{}, nil
	}
	if err != nil {
		return usage{}, fmt.Errorf("open %s: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return usage{}, fmt.Errorf("stat %s: %w", root, err)
	}
	if b.maxFiles <= 0 {
		b.maxFiles = DefaultEphemeralStorageMaxFiles
	}
	if b.maxDepth <= 0 {
		b.maxDepth = DefaultEphemeralStorageMaxDepth
	}
	w := &walker{ctx: ctx, b: b, dev: st.Dev, seen: map[uint64]bool{}}
	w.add(&st)
	err = w.dir(fd, 1)
	return w.u, err
}

type walker struct {
	ctx  context.Context
	b    walkBounds
	dev  uint64
	seen map[uint64]bool // inodes with more than one link, counted
	u    usage
}

func (w *walker) add(st *unix.Stat_t) {
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if w.seen[st.Ino] {
			return
		}
		w.seen[st.Ino] = true
	}
	w.u.bytes += st.Blocks * 512
}

// dir walks the directory open at fd, at depth, and closes fd.
func (w *walker) dir(fd, depth int) error {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	for {
		names, rerr := f.Readdirnames(256)
		if err := w.ctx.Err(); err != nil {
			return err
		}
		for _, name := range names {
			w.u.files++
			if w.u.files > w.b.maxFiles {
				return &walkBoundError{what: "files", bound: w.b.maxFiles}
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed meanwhile
				}
				return fmt.Errorf("stat %s: %w", name, err)
			}
			w.add(&st)
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != w.dev {
				continue
			}
			if depth >= w.b.maxDepth {
				return &walkBoundError{what: "levels of directories", bound: w.b.maxDepth}
			}
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
					continue // removed or replaced meanwhile
				}
				return fmt.Errorf("open %s: %w", name, err)
			}
			if err := w.dir(cfd, depth+1); err != nil {
				return err
			}
		}
		if rerr == io.EOF || (rerr == nil && len(names) == 0) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read directory: %w", rerr)
		}
	}
}
