package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// OCIConfig configures a handler for a runc-compatible CLI (runc, runsc, crun).
type OCIConfig struct {
	// Name is the handler's name, as a RuntimeClass's handler names it.
	// Empty means the binary's base name.
	Name string
	// Binary is the runtime's path, or a name looked up in PATH.
	Binary string
	// Root is the runtime's state directory (--root), made if missing. It
	// must belong to this handler alone: Recover returns all it holds. With
	// ManageCgroups, so must Root+".cgroups".
	Root string
	// Args are global arguments put before every subcommand, e.g. runsc's
	// "--network=host" (see the package documentation).
	Args []string
	// ManageCgroups makes the handler create the container's memory and
	// cpu cgroups itself, write linux.resources into them, show them to
	// the container read-only at /sys/fs/cgroup when the spec mounts
	// cgroupfs there, and remove them at Delete; for runtimes that remove
	// the cgroups they made when the container exits and show none inside
	// it (runsc). See "cgroups" in the package documentation.
	ManageCgroups bool
	// SandboxENOSYS is for runtimes with a kernel of their own that answer
	// EPERM to every SCMP_ACT_ERRNO rule of a seccomp profile whatever its
	// errnoRet (runsc 20221219): Create turns the profile's ENOSYS rules
	// into allow rules, and the sandbox answers those calls itself. See
	// letSandboxAnswerENOSYS.
	SandboxENOSYS bool
}

// cliTimeout bounds the runtime's short commands (kill, delete, list) when the
// caller's context has no deadline.
const cliTimeout = 30 * time.Second

type ociHandler struct {
	name, bin, root string
	args            []string
	keep            bool           // "run --keep" exists: the container and its cgroup outlive its exit until Delete
	cgroups         *cgroupManager // nil unless ManageCgroups
	sandboxENOSYS   bool
}

// NewOCI returns a handler for a runc-compatible CLI. It fails if the binary
// is missing or the state directory cannot be made.
func NewOCI(cfg OCIConfig) (Handler, error) { return newOCI(cfg, nil) }

// newOCI is NewOCI; keep, when known, says whether the binary's run has
// --keep (else it is asked).
func newOCI(cfg OCIConfig, keep *bool) (Handler, error) {
	name := cfg.Name
	if name == "" {
		name = filepath.Base(cfg.Binary)
	}
	if cfg.Binary == "" {
		return nil, fmt.Errorf("oci handler %s: no binary", name)
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("oci handler %s: %w", name, err)
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("oci handler %s: no state root", name)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("oci handler %s: %w", name, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("oci handler %s: %w", name, err)
	}
	h := &ociHandler{name: name, bin: bin, root: root, args: append([]string(nil), cfg.Args...), sandboxENOSYS: cfg.SandboxENOSYS}
	if cfg.ManageCgroups {
		if h.cgroups, err = newCgroupManager(root + ".cgroups"); err != nil {
			return nil, fmt.Errorf("oci handler %s: %w", name, err)
		}
	}
	if keep != nil {
		h.keep = *keep
		return h, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// runc has "run --keep"; runsc and crun do not. Their help output says.
	help, _ := exec.CommandContext(ctx, bin, "run", "--help").CombinedOutput()
	h.keep = bytes.Contains(help, []byte("--keep"))
	return h, nil
}

func (h *ociHandler) Name() string { return h.name }

// MultiContainer is true: every container of an instance is a container
// of its own (runsc: a sandbox of its own) that joins the instance's
// network namespace and bind-mounts its volumes, as the bundles say.
func (h *ociHandler) MultiContainer() bool { return true }

func (h *ociHandler) argv(sub ...string) []string {
	a := make([]string, 0, 2+len(h.args)+len(sub))
	a = append(a, "--root", h.root)
	a = append(a, h.args...)
	return append(a, sub...)
}

// run runs one short runtime command and returns its stdout; errors carry
// its stderr.
func (h *ociHandler) run(ctx context.Context, id string, sub ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cliTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, h.bin, h.argv(sub...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := runCmd(cmd); err != nil {
		what := h.name + " " + sub[0]
		if id != "" {
			what += " " + id
		}
		if msg := trimOutput(stderr.Bytes()); msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", what, err, msg)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return stdout.Bytes(), nil
}

type listEntry struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

func (h *ociHandler) list(ctx context.Context) ([]listEntry, error) {
	out, err := h.run(ctx, "", "list", "--format=json")
	if err != nil {
		return nil, err
	}
	var es []listEntry // runc prints "null" when there is none
	if err := json.Unmarshal(bytes.TrimSpace(out), &es); err != nil {
		return nil, fmt.Errorf("%s list: %w", h.name, err)
	}
	return es, nil
}

// lookup returns the runtime's entry for id, nil if it has none.
func (h *ociHandler) lookup(ctx context.Context, id string) (*listEntry, error) {
	es, err := h.list(ctx)
	if err != nil {
		return nil, err
	}
	for i := range es {
		if es[i].ID == id {
			return &es[i], nil
		}
	}
	return nil, nil
}

// setUp checks id, reads the bundle's spec and makes what the container
// needs before the runtime is called: the sandbox's ENOSYS answer and the
// managed cgroups (the caller removes them if the container does not
// start). Create and Prepare share it.
func (h *ociHandler) setUp(ctx context.Context, id, bundle string) (string, *specs.Spec, *cgroupSet, error) {
	if err := checkID(id); err != nil {
		return "", nil, nil, err
	}
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return "", nil, nil, err
	}
	spec, err := loadSpec(bundle)
	if err != nil {
		return "", nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return "", nil, nil, err
	}
	if h.sandboxENOSYS {
		if err := letSandboxAnswerENOSYS(bundle); err != nil {
			return "", nil, nil, err
		}
	}
	var cgs *cgroupSet
	if h.cgroups != nil {
		if cgs, err = h.cgroups.prepare(ctx, id, bundle, spec); err != nil {
			return "", nil, nil, err
		}
	}
	return bundle, spec, cgs, nil
}

func (h *ociHandler) Create(ctx context.Context, id, bundle string, cio IO) (Container, error) {
	fail := func(err error) (Container, error) {
		return nil, fmt.Errorf("%s create %s: %w", h.name, id, err)
	}
	bundle, spec, cgs, err := h.setUp(ctx, id, bundle)
	if err != nil {
		return fail(err)
	}
	// undo removes the managed cgroups when the container does not start.
	undo := func() {
		if cgs != nil {
			_ = h.cgroups.remove(context.WithoutCancel(ctx), cgs)
		}
	}
	pidFile := filepath.Join(bundle, id+".pid")
	_ = os.Remove(pidFile)
	defer os.Remove(pidFile)

	st, err := newStdio()
	if err != nil {
		undo()
		return fail(err)
	}
	sub := []string{"run", "--bundle", bundle, "--pid-file", pidFile}
	if h.keep {
		sub = append(sub, "--keep")
	}
	// The monitor is deliberately not bound to ctx: it lives as long as the
	// container does. Its own process group keeps a terminal's ^C away from
	// it (runc would forward the signal to the container).
	cmd := exec.Command(h.bin, h.argv(append(sub, id)...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = st.stdin, st.outW, st.errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := startCmd(cmd); err != nil {
		st.close()
		undo()
		return fail(err)
	}
	st.closeChildEnds()
	monitorDone := make(chan struct{})
	go func() {
		_ = waitCmd(cmd) // the status is in cmd.ProcessState
		close(monitorDone)
	}()

	pid, err := awaitPidFile(ctx, pidFile, monitorDone)
	if err != nil {
		select {
		case <-monitorDone:
			err = fmt.Errorf("%w (%s)", err, cmd.ProcessState)
		default:
			_ = cmd.Process.Kill()
			<-monitorDone
		}
		if msg := trimOutput(st.readStderr(time.Second)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		st.close()
		// Whatever the runtime got to make stays behind: remove it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cliTimeout)
		defer cancel()
		if derr := h.removeFailed(dctx, id); derr != nil {
			err = fmt.Errorf("%w; removing what it left: %v", err, derr)
		}
		undo()
		if spec.Linux != nil {
			// A runtime killed while it set up (runsc) leaves the cgroups
			// it made, empty, and no state that delete could find.
			removeEmptyCgroups(spec.Linux.CgroupsPath)
		}
		return fail(err)
	}

	c := &ociContainer{h: h, id: id, pid: pid, exit: newExitState(), cgroups: cgs}
	if cgs != nil && cgs.memory() != "" {
		c.memcg = cgs.memory()
	} else if c.memcg = memoryCgroup(strconv.Itoa(pid)); c.memcg == "" && spec.Linux != nil {
		c.memcg = memoryCgroupFromSpec(spec.Linux.CgroupsPath)
	}
	stdout, stderr := startPump(st.outR, cio.Stdout), startPump(st.errR, cio.Stderr)
	go func() {
		<-monitorDone
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		var es ExitStatus
		if ws.Exited() {
			es = fromCode(ws.ExitStatus())
		} else {
			// The monitor itself was killed. The container may live on
			// without it: its exit, when it comes, has no known code.
			es = c.awaitAdopted()
		}
		c.checkOOM(&es)
		drain(drainGrace, stdout, stderr)
		c.exit.set(es)
	}()
	return c, nil
}

// removeFailed deletes what a "run" that failed left of container id. runc
// run --keep whose container fails to start (a mount it cannot make, an
// executable it cannot find) leaves its state directory without a
// state.json: "list" does not show it, yet every later "run" of the id fails
// with "container with given ID already exists", hiding the real error. So
// the delete is not conditional on list; "delete --force" removes such a
// directory too, and is a no-op for an id the runtime does not know.
func (h *ociHandler) removeFailed(ctx context.Context, id string) error {
	_, err := h.run(ctx, id, "delete", "--force", id)
	if err == nil {
		return nil
	}
	// Some runtimes refuse to delete an id they do not know: that is success.
	if e, lerr := h.lookup(ctx, id); lerr == nil && e == nil {
		if _, serr := os.Lstat(filepath.Join(h.root, id)); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
	}
	return err
}

func (h *ociHandler) Recover(ctx context.Context) ([]Container, error) {
	es, err := h.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	var sets map[string]*cgroupSet
	if h.cgroups != nil {
		if sets, err = h.cgroups.load(); err != nil {
			return nil, fmt.Errorf("recover: %w", err)
		}
	}
	var cs []Container
	for _, e := range es {
		c := &ociContainer{h: h, id: e.ID, pid: e.Pid, exit: newExitState(), cgroups: sets[e.ID]}
		delete(sets, e.ID)
		if c.cgroups != nil && c.cgroups.memory() != "" {
			c.memcg = c.cgroups.memory()
		} else if e.Pid > 0 {
			c.memcg = memoryCgroup(strconv.Itoa(e.Pid))
		}
		if e.Status == "stopped" || e.Pid <= 0 {
			c.exit.set(ExitStatus{Code: -1, At: time.Now()})
		} else {
			go func() { c.exit.set(c.awaitAdopted()) }()
		}
		cs = append(cs, c)
	}
	// Managed cgroups whose container the runtime no longer knows: runsc
	// forgets a container once it has exited, also when this process was
	// not there to Delete it. They come back as exited containers whose
	// Delete removes the cgroups. Those of a container this process still
	// owns are its owner's to remove.
	for _, id := range slices.Sorted(maps.Keys(sets)) {
		if h.cgroups.isActive(id) {
			continue
		}
		c := &ociContainer{h: h, id: id, exit: newExitState(), cgroups: sets[id]}
		c.exit.set(ExitStatus{Code: -1, At: time.Now()})
		cs = append(cs, c)
	}
	return cs, nil
}

type ociContainer struct {
	h       *ociHandler
	id      string
	pid     int
	memcg   string     // memory cgroup directory, for OOM detection
	cgroups *cgroupSet // the cgroups the handler made for it, nil if none
	exit    *exitState
	// created: made by Prepare; its runtime state stays until Delete.
	created bool

	mu      sync.Mutex // serialises Delete
	deleted bool
}

func (c *ociContainer) ID() string { return c.id }
func (c *ociContainer) Pid() int   { return c.pid }

// awaitAdopted waits for the exit of an init that is not a descendant of this
// process any more (or whose monitor died): its exit code is unknown.
func (c *ociContainer) awaitAdopted() ExitStatus {
	if c.pid > 0 {
		if f, ok, err := openPidfd(c.pid, unix.PIDFD_NONBLOCK); err == nil && ok {
			awaitPidfd(f)
			f.Close()
		}
	}
	return ExitStatus{Code: -1, At: time.Now()}
}

// checkOOM applies the OOM heuristic: killed by SIGKILL, and the memory
// cgroup counts an OOM kill.
func (c *ociContainer) checkOOM(es *ExitStatus) {
	if es.Signal != syscall.SIGKILL {
		return
	}
	if n, ok := oomKills(c.memcg); ok && n > 0 {
		es.OOMKilled = true
	}
}

func (c *ociContainer) Kill(ctx context.Context, sig syscall.Signal) error {
	if c.exit.exited() {
		return nil
	}
	_, err := c.h.run(ctx, c.id, "kill", c.id, strconv.Itoa(int(sig)))
	if err == nil || c.exit.exited() {
		return nil
	}
	// The runtime refuses to signal a container that has stopped, which it
	// may have done since the check above.
	if e, lerr := c.h.lookup(ctx, c.id); lerr == nil && (e == nil || e.Status == "stopped") {
		return nil
	}
	return err
}

func (c *ociContainer) Wait(ctx context.Context) (ExitStatus, error) {
	return c.exit.wait(ctx, c.h.name+" container "+c.id)
}

func (c *ociContainer) Delete(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	if err := c.deleteRuntime(ctx); err != nil {
		return err
	}
	// The managed cgroups go last: the exit status has been read from them.
	if c.cgroups != nil {
		if err := c.h.cgroups.remove(ctx, c.cgroups); err != nil {
			return fmt.Errorf("%s delete %s: %w", c.h.name, c.id, err)
		}
	}
	c.deleted = true
	return nil
}

// deleteRuntime removes the runtime's container, killing it first if it
// still runs, and waits for its monitor.
func (c *ociContainer) deleteRuntime(ctx context.Context) error {
	if !c.exit.exited() {
		// Kill and wait before the runtime's delete, so that the exit is
		// read (and the OOM counter with it) before the cgroup goes.
		if err := c.Kill(ctx, syscall.SIGKILL); err == nil {
			_, _ = c.exit.wait(ctx, "")
		}
	}
	if !c.h.keep && !c.created && c.exit.exited() {
		// Without --keep the runtime removed the container when it exited;
		// one list costs less than a delete that fails and a list.
		if e, err := c.h.lookup(ctx, c.id); err == nil && e == nil {
			return nil
		}
	}
	if _, err := c.h.run(ctx, c.id, "delete", "--force", c.id); err != nil {
		// runsc and crun delete a container themselves once it has exited,
		// and a repeated delete finds nothing: both are success.
		if e, lerr := c.h.lookup(ctx, c.id); lerr != nil || e != nil {
			return err
		}
	}
	// The monitor ends with the container; it must not outlive Delete.
	if _, err := c.exit.wait(ctx, c.h.name+" container "+c.id); err != nil {
		return fmt.Errorf("%s delete %s: %w", c.h.name, c.id, err)
	}
	return nil
}

// awaitPidFile waits until file holds a pid (the runtime writes it once the
// container runs), the runtime exits without writing it, or ctx is done.
func awaitPidFile(ctx context.Context, file string, exited <-chan struct{}) (int, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return 0, fmt.Errorf("inotify_init1: %w", err)
	}
	in := os.NewFile(uintptr(fd), "inotify")
	defer in.Close()
	// runc writes a temporary file and renames it; runsc writes in place.
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(file), unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		return 0, fmt.Errorf("watch %s: %w", filepath.Dir(file), err)
	}
	events := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := in.Read(buf); err != nil {
				return // closed when awaitPidFile returns
			}
			select {
			case events <- struct{}{}:
			default:
			}
		}
	}()
	for {
		if pid, ok := readPidFile(file); ok {
			return pid, nil
		}
		select {
		case <-events:
		case <-exited:
			if pid, ok := readPidFile(file); ok {
				return pid, nil
			}
			return 0, errors.New("runtime exited before the container started")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func readPidFile(file string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

var (
	_ Handler   = (*ociHandler)(nil)
	_ Container = (*ociContainer)(nil)
)
