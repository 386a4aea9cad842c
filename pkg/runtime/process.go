package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// processHandler runs a container's process as a plain child; see the package
// documentation for what that does and does not isolate.
type processHandler struct {
	dir string
}

// NewProcess returns the "process" handler, which keeps its state (a state
// file per container and, for read-only roots, the read-only bind mount) in
// stateDir.
func NewProcess(stateDir string) Handler { return &processHandler{dir: stateDir} }

func (h *processHandler) Name() string { return "process" }

// RefusesRoot is true: see RootRefuser.
func (h *processHandler) RefusesRoot() bool { return true }

// Unisolated says what the process handler does not do; see Unisolated.
func (h *processHandler) Unisolated() string {
	return "process runs the container's entrypoint as a plain child process of knbox, " +
		"chrooted into the image with the instance's network namespace, refusing uid 0, " +
		"with no capabilities and no_new_privs, but without PID, mount, IPC or UTS namespaces, " +
		"seccomp, cgroup limits or the runtime contract's mounts: it does not isolate containers " +
		"from the host or from each other; use it for trusted code only"
}

// processState is what Recover needs to find a container again.
type processState struct {
	Pid    int    `json:"pid"`
	Start  uint64 `json:"start"` // start time from /proc/<pid>/stat: tells a reused pid apart
	Bundle string `json:"bundle"`
}

const stateFile = "state.json"

func (h *processHandler) Create(ctx context.Context, id, bundle string, cio IO) (_ Container, err error) {
	fail := func(err error) (Container, error) {
		return nil, fmt.Errorf("process create %s: %w", id, err)
	}
	if err := checkID(id); err != nil {
		return fail(err)
	}
	if bundle, err = filepath.Abs(bundle); err != nil {
		return fail(err)
	}
	spec, err := loadSpec(bundle)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if spec.Process.User.UID == 0 {
		return fail(errors.New("process.user.uid is 0: the process runtime does not run root " +
			"(it does not isolate: root in a chroot is root on the host)"))
	}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return fail(err)
	}
	c := &processContainer{id: id, dir: filepath.Join(h.dir, id), exit: newExitState()}
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fail(errors.New("container exists"))
		}
		return fail(err)
	}
	state := processState{Bundle: bundle}
	defer func() {
		if err != nil {
			_ = c.removeState()
		}
	}()

	root := rootPath(bundle, spec)
	if spec.Root.Readonly {
		ro := filepath.Join(c.dir, "rootfs")
		if err := readonlyBind(root, ro); err != nil {
			return fail(err)
		}
		root = ro
	}

	p := spec.Process
	env := append([]string{}, p.Env...) // non-nil: nothing is inherited
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	argv0, err := lookPathIn(root, p.Args[0], pathOf(env), cwd)
	if err != nil {
		return fail(err)
	}
	st, err := newStdio()
	if err != nil {
		return fail(err)
	}
	groups := make([]uint32, len(p.User.AdditionalGids))
	copy(groups, p.User.AdditionalGids)
	cmd := &exec.Cmd{
		Path:   argv0, // resolved after the chroot, by execve
		Args:   p.Args,
		Env:    env,
		Dir:    cwd,
		Stdin:  st.stdin,
		Stdout: st.outW,
		Stderr: st.errW,
		SysProcAttr: &syscall.SysProcAttr{
			Chroot:     root,
			Credential: &syscall.Credential{Uid: p.User.UID, Gid: p.User.GID, Groups: groups},
			Setpgid:    true,
		},
	}
	netns, newNetns := networkNamespace(spec)
	if newNetns {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if err := startUnprivileged(cmd, netns); err != nil {
		st.close()
		return fail(err)
	}
	st.closeChildEnds()
	c.pid = cmd.Process.Pid
	c.signal = func(sig syscall.Signal) error {
		if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return nil
	}
	state.Pid = c.pid
	state.Start, _ = startTime(c.pid)
	stdout, stderr := startPump(st.outR, cio.Stdout), startPump(st.errR, cio.Stderr)
	go c.monitor(cmd, stdout, stderr)
	if err := writeState(c.dir, state); err != nil {
		_ = c.signal(syscall.SIGKILL)
		<-c.exit.done
		return fail(err)
	}
	c.state = state
	return c, nil
}

func (h *processHandler) Recover(ctx context.Context) ([]Container, error) {
	ents, err := os.ReadDir(h.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("process recover: %w", err)
	}
	var cs []Container
	for _, e := range ents {
		if !e.IsDir() || checkID(e.Name()) != nil {
			continue
		}
		c := &processContainer{id: e.Name(), dir: filepath.Join(h.dir, e.Name()), exit: newExitState(), adopted: true}
		c.signal = func(syscall.Signal) error { return nil }
		b, err := os.ReadFile(filepath.Join(c.dir, stateFile))
		if err == nil {
			err = json.Unmarshal(b, &c.state)
		}
		if err != nil {
			// Created but never recorded (or unreadable): nothing runs that
			// could be found; Delete removes what is left.
			c.exit.set(ExitStatus{Code: -1, At: time.Now()})
			cs = append(cs, c)
			continue
		}
		c.pid = c.state.Pid
		if f := c.adopt(); f != nil {
			c.pidfd = f
			c.signal = func(sig syscall.Signal) error {
				rc, err := f.SyscallConn()
				if err != nil {
					return err
				}
				var serr error
				if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
					return err
				}
				if errors.Is(serr, unix.ESRCH) {
					return nil
				}
				return serr
			}
			go func() {
				awaitPidfd(f)
				c.exit.set(ExitStatus{Code: -1, At: time.Now()})
			}()
		} else {
			c.exit.set(ExitStatus{Code: -1, At: time.Now()})
		}
		cs = append(cs, c)
	}
	return cs, nil
}

type processContainer struct {
	id     string
	pid    int
	dir    string
	state  processState
	signal func(syscall.Signal) error // to the main process; nil error once it has exited
	exit   *exitState
	// adopted is set for a container found by Recover: this process is not
	// its parent, so no monitor ends its process group.
	adopted bool
	pidfd   *os.File // an adopted process's, closed by Delete

	mu      sync.Mutex
	deleted bool
}

func (c *processContainer) ID() string { return c.id }
func (c *processContainer) Pid() int   { return c.pid }

// adopt opens a pidfd for a recorded process if it is still the process that
// was recorded (same pid and start time), nil if it is gone.
func (c *processContainer) adopt() *os.File {
	if c.pid <= 0 {
		return nil
	}
	f, ok, err := openPidfd(c.pid, unix.PIDFD_NONBLOCK)
	if err != nil || !ok {
		return nil
	}
	// Checked after the pidfd is open, so the pidfd is for that process.
	if st, err := startTime(c.pid); err != nil || st != c.state.Start {
		f.Close()
		return nil
	}
	return f
}

// monitor waits for the child, ends its process group and records the exit.
func (c *processContainer) monitor(cmd *exec.Cmd, pumps ...*pump) {
	// Learn of the exit without reaping: while the zombie is unreaped, its
	// pid cannot be reused, so the group id below still names its group.
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
	_ = unix.Kill(-c.pid, unix.SIGKILL) // what the main process left running
	_ = waitCmd(cmd)
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	es := fromWaitStatus(ws)
	drain(drainGrace, pumps...)
	c.exit.set(es)
}

func (c *processContainer) Kill(ctx context.Context, sig syscall.Signal) error {
	if c.exit.exited() {
		return nil
	}
	if err := c.signal(sig); err != nil {
		return fmt.Errorf("process kill %s: %w", c.id, err)
	}
	return nil
}

func (c *processContainer) Wait(ctx context.Context) (ExitStatus, error) {
	return c.exit.wait(ctx, "process container "+c.id)
}

func (c *processContainer) Delete(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		return nil
	}
	if !c.exit.exited() {
		if c.adopted && c.pid > 0 {
			// The main process still runs, so its pid still names its group.
			_ = unix.Kill(-c.pid, unix.SIGKILL)
		}
		if err := c.signal(syscall.SIGKILL); err != nil {
			return fmt.Errorf("process delete %s: %w", c.id, err)
		}
		if _, err := c.exit.wait(ctx, "process container "+c.id); err != nil {
			return fmt.Errorf("process delete %s: %w", c.id, err)
		}
	}
	if err := c.removeState(); err != nil {
		return fmt.Errorf("process delete %s: %w", c.id, err)
	}
	if c.pidfd != nil {
		c.pidfd.Close()
	}
	c.deleted = true
	return nil
}

// removeState unmounts the read-only view of the root, if there is one, and
// removes the state directory file by file: never recursively, so that a bind
// mount that failed to go away cannot take the bundle's root with it.
func (c *processContainer) removeState() error {
	ro := filepath.Join(c.dir, "rootfs")
	if err := unix.Unmount(ro, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", ro, err)
	}
	for _, p := range []string{filepath.Join(c.dir, stateFile), ro, c.dir} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func writeState(dir string, st processState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// readonlyBind makes dst a read-only view of src.
func readonlyBind(src, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return fmt.Errorf("remount %s read-only: %w", dst, err)
	}
	return nil
}

// networkNamespace reads the spec's network namespace: a path to join, or
// fresh for a namespace listed without a path.
func networkNamespace(spec *specs.Spec) (nsPath string, fresh bool) {
	if spec.Linux == nil {
		return "", false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return ns.Path, ns.Path == ""
		}
	}
	return "", false
}

// startUnprivileged starts cmd in the network namespace at nsPath ("" for
// this process's) with no capabilities it could ever use and no way to gain
// privileges: an empty bounding set, empty inheritable and ambient sets, and
// no_new_privs, so that neither a setuid-root file nor file capabilities in
// the image give the child anything. Its uid, which Create makes sure is not
// 0, clears its effective and permitted sets when it switches to it, as
// setuid(2) does without SECBIT_KEEP_CAPS.
//
// A child inherits these attributes, and its network namespace, from the
// thread that forks it, so the fork happens on a locked thread changed for
// it. That thread never goes back to the Go scheduler: it stays locked and
// ends with its goroutine.
func startUnprivileged(cmd *exec.Cmd, nsPath string) error {
	var target *os.File
	if nsPath != "" {
		f, err := os.Open(nsPath)
		if err != nil {
			return fmt.Errorf("network namespace: %w", err)
		}
		defer f.Close()
		target = f
	}
	lastCap, err := lastCapability()
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: see above
		if target != nil {
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				errc <- fmt.Errorf("join network namespace %s: %w", nsPath, err)
				return
			}
		}
		if err := dropPrivileges(lastCap); err != nil {
			errc <- err
			return
		}
		errc <- startCmd(cmd)
	}()
	return <-errc
}

// dropPrivileges empties the calling thread's bounding, inheritable and
// ambient capability sets and sets its no_new_privs. The effective and
// permitted sets stay: the child needs CAP_SYS_CHROOT, CAP_SETUID and
// CAP_SETGID until it has switched to its user.
func dropPrivileges(lastCap int) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// lastCapability is the highest capability number this kernel knows.
func lastCapability() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("read the last capability: %q", b)
	}
	return n, nil
}

// pathOf returns the PATH in env, as the container will see it.
func pathOf(env []string) string {
	p := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	return p
}

// lookPathIn finds the executable that file names inside root, as a shell in
// the container would, and returns its path as seen from inside.
func lookPathIn(root, file, pathEnv, cwd string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !path.IsAbs(p) {
			p = path.Join(cwd, p)
		}
		if err := checkExecutableIn(root, p); err != nil {
			return "", err
		}
		return p, nil
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if !path.IsAbs(dir) {
			continue
		}
		p := path.Join(dir, file)
		if checkExecutableIn(root, p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in the container's PATH %q", file, pathEnv)
}

func checkExecutableIn(root, p string) error {
	host, err := resolveIn(root, p)
	if err != nil {
		return fmt.Errorf("executable %s: %w", p, err)
	}
	fi, err := os.Stat(host)
	if err != nil {
		return fmt.Errorf("executable %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("executable %s: not an executable file", p)
	}
	return nil
}

// resolveIn resolves p inside root the way the kernel will after chroot:
// symbolic links are followed with root as "/", and ".." stops at root.
func resolveIn(root, p string) (string, error) {
	todo := strings.Split(p, "/")
	cur := "/"
	for links := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", unix.ELOOP
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(root, cur), nil
}

var (
	_ Handler   = (*processHandler)(nil)
	_ Container = (*processContainer)(nil)
)
