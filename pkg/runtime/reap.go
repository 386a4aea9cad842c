package runtime

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A container made with Prepare outlives the runtime command that created it
// (`runc create` exits once the container's init waits on its exec FIFO), so
// its init is re-parented to the nearest child subreaper: the process that
// supervises it must be one (BecomeSubreaper) to read its exit status, as
// containerd's shims are. A subreaper also inherits every other orphan below
// it (runsc's gofer), which it must reap: ReapOrphans does, sparing the
// children this package waits for itself (its runtime commands, registered
// while they run, and the inits of prepared containers).

// owned are the children some goroutine of this package waits for by pid.
var owned = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// startCmd starts cmd and records its pid as owned, atomically with respect
// to ReapOrphans.
func startCmd(cmd *exec.Cmd) error {
	owned.Lock()
	defer owned.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	owned.pids[cmd.Process.Pid] = true
	return nil
}

// waitCmd waits for a command startCmd started.
func waitCmd(cmd *exec.Cmd) error {
	err := cmd.Wait()
	disown(cmd.Process.Pid)
	return err
}

// runCmd is cmd.Run for startCmd.
func runCmd(cmd *exec.Cmd) error {
	if err := startCmd(cmd); err != nil {
		return err
	}
	return waitCmd(cmd)
}

func disown(pid int) {
	owned.Lock()
	delete(owned.pids, pid)
	owned.Unlock()
}

// BecomeSubreaper makes this process a child subreaper
// (PR_SET_CHILD_SUBREAPER): orphans below it become its children. The
// caller must then call ReapOrphans on every SIGCHLD.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// isSubreaper tells whether this process is a child subreaper.
func isSubreaper() bool {
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return false
	}
	return v != 0
}

// maxReap bounds one ReapOrphans pass.
const maxReap = 4096

// ReapOrphans reaps this process's children that have exited and that no
// goroutine of this package waits for: orphans a subreaper inherited. It
// returns how many it reaped.
func ReapOrphans() int {
	owned.Lock()
	defer owned.Unlock()
	n := 0
	for _, pid := range children() {
		if n >= maxReap {
			break
		}
		if owned.pids[pid] || !zombie(pid) {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}

// children lists this process's children from /proc/self/task/*/children.
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// zombie tells whether pid has exited and awaits its reaping.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// reapInit waits for the exit of pid, a child of this process (the init of
// a prepared container, inherited as a subreaper), and returns its status.
func reapInit(pid int) (ExitStatus, error) {
	defer disown(pid)
	if f, ok, err := openPidfd(pid, unix.PIDFD_NONBLOCK); err == nil && ok {
		awaitPidfd(f)
		f.Close()
	}
	for i := 0; i < 100; i++ {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return ExitStatus{Code: -1}, err
		}
		if ws.Exited() {
			// As `runc run` reports it, and runsc's sandbox exits: a
			// code past 128 is death by signal code-128.
			return fromCode(ws.ExitStatus()), nil
		}
		return fromWaitStatus(ws), nil
	}
	return ExitStatus{Code: -1}, syscall.EINTR
}
