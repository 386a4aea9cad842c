package pod

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/knbox/knbox/pkg/runtime"
)

// shimStartTimeout bounds a shim's start.
const shimStartTimeout = 30 * time.Second

// startShim starts the shim of the pod in dir: argv[0] with the rest of
// argv (e.g. knbox shim), in a session of its own, its diagnostics in
// dir/shim.log.
func startShim(argv []string, dir, logPath string, h runtime.Handler) (*shimClient, error) {
	d, err := describe(h)
	if err != nil {
		return nil, err
	}
	cmd, _, err := launchShim(argv, dir, nil, "--dir", dir, "--log", logPath, "--handler", string(d))
	if err != nil {
		return nil, err
	}
	return &shimClient{dir: dir, cmd: cmd}, nil
}

// describe is h's description for a shim, as JSON.
func describe(h runtime.Handler) ([]byte, error) {
	desc, ok := h.(runtime.Describer)
	if !ok {
		return nil, fmt.Errorf("handler %s cannot be run by a shim (no Describe)", h.Name())
	}
	return json.Marshal(desc.Describe())
}

// launchShim runs argv plus args in a session of its own, its diagnostics
// in dir/shim.log, extra as its file descriptors from 4 on, and returns
// once it says it is ready (file descriptor 3), or fails; exited is closed
// once it has exited (it is reaped by this process).
func launchShim(argv []string, dir string, extra []*os.File, args ...string) (cmd *exec.Cmd, exited <-chan struct{}, err error) {
	diag, err := os.OpenFile(filepath.Join(dir, "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("start shim: %w", err)
	}
	defer diag.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start shim: %w", err)
	}
	defer readyR.Close()
	cmd = exec.Command(argv[0], append(append([]string(nil), argv[1:]...), args...)...)
	cmd.Stdout, cmd.Stderr = diag, diag
	cmd.ExtraFiles = append([]*os.File{readyW}, extra...)
	// GOGC=off: no collection during the shim's package init (the whole
	// knbox binary's: megabytes of scheme registrations, mostly garbage),
	// about a third of its start's CPU, spent on every cold instance's
	// path; ShimMain turns the collector on once the shim is up.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GOGC=off"}
	// Its own session: the daemon's terminal, process group and exit do
	// not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		return nil, nil, fmt.Errorf("start shim: %w", err)
	}
	readyW.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaped here while this process lives
		close(done)
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(readyR).ReadString('\n')
		line <- s
	}()
	t := time.NewTimer(shimStartTimeout)
	defer t.Stop()
	select {
	case s := <-line:
		if strings.TrimSpace(s) == "ready" {
			return cmd, done, nil
		}
	case <-t.C:
		_ = cmd.Process.Kill()
	}
	<-done
	b, _ := os.ReadFile(filepath.Join(dir, "shim.log"))
	return nil, nil, fmt.Errorf("start shim: it did not get ready (%s): %s", cmd.ProcessState, strings.TrimSpace(string(b)))
}

// shimMonitor is the monitor of a pod whose containers run under its shim.
type shimMonitor struct{ c *shimClient }

func (m shimMonitor) start(ctx context.Context, id, bundle, tag string) (task, error) {
	resp, err := m.c.call(ctx, shimRequest{Op: "start", ID: id, Bundle: bundle, Tag: tag})
	if err != nil {
		return nil, err
	}
	return &shimTask{c: m.c, id: id, pid: resp.Pid}, nil
}

func (m shimMonitor) prepare(ctx context.Context, id, bundle, tag string) (task, error) {
	resp, err := m.c.call(ctx, shimRequest{Op: "create", ID: id, Bundle: bundle, Tag: tag})
	if err != nil {
		if resp.CannotPrepare {
			return nil, errCannotPrepare
		}
		return nil, err
	}
	return &shimTask{c: m.c, id: id, pid: resp.Pid}, nil
}

func (m shimMonitor) log(line string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = m.c.call(ctx, shimRequest{Op: "log", Line: line})
}

// close shuts the shim down (its containers are deleted).
func (m shimMonitor) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := m.c.call(ctx, shimRequest{Op: "shutdown"}); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(m.c.dir, shimSocket))
	return nil
}

// shimTask is a container that runs under a pod's shim.
type shimTask struct {
	c   *shimClient
	id  string
	pid int

	mu       sync.Mutex
	lastTail string
}

func (t *shimTask) ID() string { return t.id }
func (t *shimTask) Pid() int   { return t.pid }

func (t *shimTask) Kill(ctx context.Context, sig syscall.Signal) error {
	_, err := t.c.call(ctx, shimRequest{Op: "kill", ID: t.id, Signal: int(sig)})
	return err
}

func (t *shimTask) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	resp, err := t.c.call(ctx, shimRequest{Op: "wait", ID: t.id})
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	if resp.Status == nil {
		return runtime.ExitStatus{}, errors.New("shim: wait answered no status")
	}
	t.mu.Lock()
	t.lastTail = resp.Tail
	t.mu.Unlock()
	return *resp.Status, nil
}

func (t *shimTask) Delete(ctx context.Context) error {
	_, err := t.c.call(ctx, shimRequest{Op: "delete", ID: t.id})
	return err
}

func (t *shimTask) start(ctx context.Context) error {
	_, err := t.c.call(ctx, shimRequest{Op: "begin", ID: t.id})
	return err
}

func (t *shimTask) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastTail
}

var (
	_ monitor = shimMonitor{}
	_ task    = (*shimTask)(nil)
)
