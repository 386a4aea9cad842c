package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/knbox/knbox/pkg/runtime"
)

// # Idle shims
//
// A shim is knbox's own binary started again, whose package init alone
// costs ~10 ms of CPU: in a burst of cold starts on a small machine, the
// shims' starts compete with the instances' for the CPU. With
// Options.IdleShims, the Runtime keeps up to that many shims started ahead
// of need, idle (runIdleShim): a pod takes one and binds it to itself (its
// directory, log and handler: a request and a socket, ~1 ms), and starts
// one itself only when none is idle. They are started once the Runtime has
// run its first pod (a knbox that runs none holds none), and again after
// pods took some, each time once no pod was made for shimPoolQuiet (not
// during a burst, whose CPU they would take). Once no pod was made for
// Options.IdleShimsKeep, they end, until the next pod: a knbox at rest
// holds none.
//
// Idle shims live in dir (StateDir + ".shims"), one directory each, and
// each holds the read end of a pipe whose write end only this process holds
// (its lifeline; one pipe each: a shim sets its end non-blocking, which a
// shared pipe would impose on the others): when this process ends, even
// killed with SIGKILL, they see EOF, remove their directories and exit.
// Close and Detach end them at once; New removes what a crash may have left
// (a shim still idle there is told to shut down first).

// shimPoolQuiet is how long no pod must have been made before the pool
// starts more idle shims.
const shimPoolQuiet = time.Second

// shimPoolRetry is how long the pool waits after a shim failed to start.
const shimPoolRetry = 10 * time.Second

// shimPool keeps the idle shims.
type shimPool struct {
	argv []string
	dir  string
	size int
	keep time.Duration // without a pod made, the pool goes after keep
	log  *slog.Logger

	mu      sync.Mutex
	idle    []*idleShim
	seq     int
	started bool // the first pod ran: keep the pool full
	closed  bool
	lastPod time.Time // when the last pod was made

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// idleShim is one shim of the pool.
type idleShim struct {
	dir    string
	cmd    *exec.Cmd
	exited <-chan struct{}
	lifeW  *os.File // the write end of its lifeline
}

// newShimPool returns a pool of up to size idle shims started with argv in
// dir, kept while pods were made within keep, after removing what an
// earlier process left there.
func newShimPool(argv []string, dir string, size int, keep time.Duration, log *slog.Logger) (*shimPool, error) {
	removeShimPool(dir, log)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("idle shims: %w", err)
	}
	sp := &shimPool{argv: argv, dir: dir, size: size, keep: keep, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	sp.wg.Add(1)
	go func() {
		defer sp.wg.Done()
		sp.run()
	}()
	return sp, nil
}

// removeShimPool removes what an earlier process left in dir: idle shims
// still there (they end with their lifeline: one still answering is a
// race with its exit, or a bug) are told to shut down, then the directory
// goes.
func removeShimPool(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := (&shimClient{dir: filepath.Join(dir, e.Name())}).call(ctx, shimRequest{Op: "shutdown"}); err == nil {
			log.Info("idle shim left by an earlier process shut down", "shim", e.Name())
		}
		cancel()
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Warn("remove idle shims' directory", "err", err)
	}
}

// poke tells the pool that a pod is being made: the pool is kept full from
// the first on, refilled once no pod was made for shimPoolQuiet.
func (sp *shimPool) poke() {
	sp.mu.Lock()
	sp.started = true
	sp.lastPod = time.Now()
	sp.mu.Unlock()
	select {
	case sp.wake <- struct{}{}:
	default:
	}
}

// take binds an idle shim to the pod in dir (its log at logPath, its
// handler h) and returns its client; nil when none is idle or the bind
// failed (the caller starts one).
func (sp *shimPool) take(ctx context.Context, dir, logPath string, h runtime.Handler) *shimClient {
	defer sp.poke()
	d, err := describe(h)
	if err != nil {
		return nil
	}
	for {
		sp.mu.Lock()
		if sp.closed || len(sp.idle) == 0 {
			sp.mu.Unlock()
			return nil
		}
		is := sp.idle[len(sp.idle)-1]
		sp.idle = sp.idle[:len(sp.idle)-1]
		sp.mu.Unlock()
		select {
		case <-is.exited: // it died idle: the next
			sp.log.Warn("idle shim exited", "shim", filepath.Base(is.dir), "status", is.cmd.ProcessState.String())
			_ = os.RemoveAll(is.dir)
			continue
		default:
		}
		bctx, cancel := context.WithTimeout(ctx, shimStartTimeout)
		_, err := (&shimClient{dir: is.dir}).call(bctx, shimRequest{Op: "bind", Dir: dir, Log: logPath, Handler: string(d)})
		cancel()
		if err != nil {
			sp.log.Warn("idle shim did not bind; starting one", "pod", filepath.Base(dir), "err", err)
			is.kill()
			return nil
		}
		is.lifeW.Close() // a bound shim has let its lifeline go
		return &shimClient{dir: dir, cmd: is.cmd}
	}
}

// run starts idle shims while the pool is short of size, quiet and open,
// and ends them all once no pod was made for keep.
func (sp *shimPool) run() {
	var retryAt time.Time
	for {
		sp.mu.Lock()
		if sp.closed {
			sp.mu.Unlock()
			return
		}
		now := time.Now()
		next := time.Duration(-1) // -1: only when woken
		var drain []*idleShim
		startOne := false
		switch {
		case !sp.started:
		case now.Sub(sp.lastPod) >= sp.keep:
			// No pod for keep: the pool goes until the next.
			drain, sp.idle, sp.started = sp.idle, nil, false
		case len(sp.idle) < sp.size:
			if w := sp.lastPod.Add(shimPoolQuiet).Sub(now); w > 0 {
				next = w
			} else if w := retryAt.Sub(now); w > 0 {
				next = w
			} else {
				startOne = true
			}
		default:
			next = sp.lastPod.Add(sp.keep).Sub(now)
		}
		sp.mu.Unlock()
		if len(drain) > 0 {
			sp.log.Debug("idle shims ended: no pod made for a while", "shims", len(drain), "keep", sp.keep)
			for _, is := range drain {
				is.kill()
			}
		}
		if startOne {
			is, err := sp.start()
			if err != nil {
				sp.log.Warn("idle shim not started", "err", err, "retryIn", shimPoolRetry)
				retryAt = time.Now().Add(shimPoolRetry)
				continue
			}
			sp.mu.Lock()
			if sp.closed {
				sp.mu.Unlock()
				is.kill()
				return
			}
			sp.idle = append(sp.idle, is)
			sp.mu.Unlock()
			continue
		}
		var t *time.Timer
		var tc <-chan time.Time
		if next >= 0 {
			t = time.NewTimer(next)
			tc = t.C
		}
		select {
		case <-sp.wake:
		case <-tc:
		case <-sp.done:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// start starts an idle shim.
func (sp *shimPool) start() (*idleShim, error) {
	sp.mu.Lock()
	sp.seq++
	dir := filepath.Join(sp.dir, strconv.Itoa(sp.seq))
	sp.mu.Unlock()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start idle shim: %w", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start idle shim: %w", err)
	}
	cmd, exited, err := launchShim(sp.argv, dir, []*os.File{lifeR}, "--idle", "--dir", dir)
	lifeR.Close() // the shim's alone
	if err != nil {
		lifeW.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &idleShim{dir: dir, cmd: cmd, exited: exited, lifeW: lifeW}, nil
}

// kill ends an idle shim (this process's child) and removes its directory.
func (is *idleShim) kill() {
	is.lifeW.Close()
	_ = is.cmd.Process.Kill()
	<-is.exited
	_ = os.RemoveAll(is.dir)
}

// count is the number of idle shims.
func (sp *shimPool) count() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.idle)
}

// close ends every idle shim and removes the pool's directory; shims that
// pods took run on.
func (sp *shimPool) close() error {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		return nil
	}
	sp.closed = true
	idle := sp.idle
	sp.idle = nil
	sp.mu.Unlock()
	close(sp.done)
	sp.wg.Wait()
	for _, is := range idle {
		is.kill()
	}
	if err := os.RemoveAll(sp.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("idle shims: %w", err)
	}
	return nil
}
