package pod

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/filepages"
	"github.com/knbox/knbox/pkg/runtime"
)

// A pod's shim is a small process of its own (knbox re-executed as `knbox
// shim`, in a session of its own) that runs the pod's containers through
// the handler (the runtime's monitor processes are its children, so it
// reads their exact exit statuses), owns their stdout and stderr and the
// pod's /dev/log socket, and writes the pod's log. It outlives the daemon:
// a restart, an upgrade or a kill -9 of knbox leaves the containers
// running and their output flowing, and the next daemon re-adopts the pod
// by connecting to the shim's socket (shim.sock in the pod's directory).
//
// The protocol is one JSON request and one JSON response per connection;
// "wait" answers when the container has exited (or never, if the daemon
// goes away first).

// shimSocket is the name of the shim's socket in the pod's directory.
const shimSocket = "shim.sock"

// shimProtocol is the protocol's version, in every request: a shim of an
// older knbox refuses what it does not know.
const shimProtocol = 1

type shimRequest struct {
	V      int    `json:"v"`
	Op     string `json:"op"` // start, create, begin, kill, wait, delete, log, state, shutdown; bind (idle shims only)
	ID     string `json:"id,omitempty"`
	Bundle string `json:"bundle,omitempty"`
	Tag    string `json:"tag,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Line   string `json:"line,omitempty"`
	// Dir, Log and Handler: what "bind" gives an idle shim (see
	// runIdleShim), as --dir, --log and --handler give a shim started
	// for its pod.
	Dir     string `json:"dir,omitempty"`
	Log     string `json:"log,omitempty"`
	Handler string `json:"handler,omitempty"`
}

type shimContainerState struct {
	ID     string              `json:"id"`
	Pid    int                 `json:"pid"`
	Exited bool                `json:"exited,omitempty"`
	Status *runtime.ExitStatus `json:"status,omitempty"`
}

type shimResponse struct {
	Error      string               `json:"error,omitempty"`
	Pid        int                  `json:"pid,omitempty"`
	Status     *runtime.ExitStatus  `json:"status,omitempty"`
	Tail       string               `json:"tail,omitempty"`
	Containers []shimContainerState `json:"containers,omitempty"`
	ShimPid    int                  `json:"shimPid,omitempty"`
	// CannotPrepare: "create" failed because the handler cannot prepare.
	CannotPrepare bool `json:"cannotPrepare,omitempty"`
}

// shimContainer is a container the shim runs.
type shimContainer struct {
	t      task
	done   chan struct{}
	status runtime.ExitStatus
}

// shim is the shim process's state.
type shim struct {
	dir string
	mon *localMonitor
	ln  *net.UnixListener
	log *slog.Logger

	mu    sync.Mutex
	ctrs  map[string]*shimContainer
	ended chan struct{} // closed by shutdown
	once  sync.Once
}

// ShimMain is `knbox shim`: it runs one pod's shim until the daemon asks it
// to shut down, and returns the process's exit code. args: --dir (the
// pod's directory), --log (the pod's log file), --handler (the handler's
// runtime.Description as JSON). File descriptor 3, if open, is told
// "ready" once the socket listens.
func ShimMain(args []string) int {
	// Started with GOGC=off (see startShim): what it runs must not inherit
	// it, and its own collector starts with Go's default target once the
	// start is over.
	gcOff := os.Getenv("GOGC") == "off"
	if gcOff {
		os.Unsetenv("GOGC")
	}
	time.AfterFunc(shimGCAfter, func() {
		if gcOff {
			debug.SetGCPercent(shimGCPercent)
			// Init's garbage is collected now, at rest, rather than by
			// the first allocations past the new target: those of a
			// prepared container's start, on a request's path.
			goruntime.GC()
		}
		// The shim is knbox's binary: its start ran every package's
		// initialisation and mapped some 40 MiB of it, of which it runs
		// little. It unmaps them (they stay in the page cache, which the
		// daemon maps too); what it runs later faults back in from there.
		_, _ = filepages.Unmap(filepages.Self)
	})
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	dir := fs.String("dir", "", "the pod's directory (with --idle: the idle shim's own)")
	logPath := fs.String("log", "", "the pod's log file")
	handler := fs.String("handler", "", "the handler's description (JSON)")
	idle := fs.Bool("idle", false, "start idle, for a pod that a later bind request names (see shimPool)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("shim", filepath.Base(*dir))
	run := func() error { return runShim(*dir, *logPath, *handler, log) }
	if *idle {
		run = func() error { return runIdleShim(*dir, log) }
	}
	if err := run(); err != nil {
		log.Error("shim", "err", err)
		return 1
	}
	return 0
}

// shimGCAfter is how long after its start a shim runs without a garbage
// collector: its start and its first container's, on a cold start (the
// pod's first container starts within tens of milliseconds of its shim,
// more under a burst's contention). It allocates little meanwhile.
const shimGCAfter = 2 * time.Second

// shimGCPercent is the shim's GC target from then on: Go's default.
const shimGCPercent = 100

func runShim(dir, logPath, handler string, log *slog.Logger) error {
	// The daemon's terminal or service manager must not end the pod.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE)
	s, err := newShim(dir, logPath, handler, log)
	if err != nil {
		return err
	}
	tellReady()
	return s.serveAll()
}

// tellReady tells the daemon, on file descriptor 3 if it is open, that the
// shim listens.
func tellReady() {
	if ready := os.NewFile(3, "ready"); ready != nil {
		_, _ = ready.Write([]byte("ready\n"))
		ready.Close()
	}
}

// newShim makes the shim of the pod in dir: its handler (described by
// handler, JSON), the pod's log at logPath and /dev/log socket, and its
// socket, listening.
func newShim(dir, logPath, handler string, log *slog.Logger) (*shim, error) {
	var d runtime.Description
	if err := json.Unmarshal([]byte(handler), &d); err != nil {
		return nil, fmt.Errorf("--handler: %w", err)
	}
	h, err := runtime.FromDescription(d)
	if err != nil {
		return nil, err
	}
	if _, ok := h.(runtime.Preparer); ok {
		// Prepared containers' inits are re-parented to the shim when
		// the runtime's create exits: it reads their exit statuses as a
		// subreaper, and reaps the other orphans it inherits.
		if err := runtime.BecomeSubreaper(); err != nil {
			return nil, fmt.Errorf("subreaper: %w", err)
		}
		sigchld := make(chan os.Signal, 1)
		signal.Notify(sigchld, syscall.SIGCHLD)
		go func() {
			for range sigchld {
				runtime.ReapOrphans()
			}
		}()
	}
	mon, err := newLocalMonitor(h, logPath, dir)
	if err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(dir, shimSocket))
	ln, err := listenUnixIn(dir, shimSocket)
	if err != nil {
		mon.close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return &shim{dir: dir, mon: mon, ln: ln, log: log, ctrs: map[string]*shimContainer{}, ended: make(chan struct{})}, nil
}

// serveAll answers requests until shutdown.
func (s *shim) serveAll() error {
	go func() {
		<-s.ended
		s.ln.Close()
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.ended:
				_ = os.Remove(filepath.Join(s.dir, shimSocket))
				return s.mon.close()
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return s.mon.close()
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go s.serve(c)
	}
}

// runIdleShim is a shim started ahead of need (see shimPool): it listens
// in dir, its own, says it is ready, and waits for the one request that
// makes it a pod's shim, "bind", which names the pod's directory, log and
// handler: it then does what a shim started for the pod does, answers, and
// removes dir. Until then, the end of the daemon (EOF on the lifeline, file
// descriptor 4, a pipe of its own whose write end only the daemon holds) or
// a "shutdown" request ends it, and it removes dir: an idle shim never
// outlives the daemon that started it, even one killed with SIGKILL.
func runIdleShim(dir string, log *slog.Logger) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE)
	// Non-blocking, so that closing it ends the read below (Go's poller).
	if err := unix.SetNonblock(4, true); err != nil {
		return fmt.Errorf("idle shim: no lifeline (file descriptor 4): %w", err)
	}
	lifeline := os.NewFile(4, "lifeline")
	ln, err := listenUnixIn(dir, shimSocket)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var mu sync.Mutex
	bound := false
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		mu.Lock() // held to the exit: a bind cannot begin
		if !bound {
			_ = os.RemoveAll(dir)
			os.Exit(0)
		}
		mu.Unlock()
	}()
	tellReady()
	// At rest until bound: init's garbage is collected now, off any
	// request's path. The freed pages stay mapped for the start of the
	// pod that binds it (returned at once, FreeOSMemory, they fault in
	// again there: a prepared start measured slower so); the runtime's
	// scavenger returns them in the background.
	goruntime.GC()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var req shimRequest
		if err := json.NewDecoder(io.LimitReader(c, maxShimRequest)).Decode(&req); err != nil {
			c.Close()
			continue
		}
		answer := func(resp shimResponse) {
			_ = json.NewEncoder(c).Encode(resp)
			c.Close()
		}
		switch {
		case req.V != shimProtocol:
			answer(shimResponse{Error: fmt.Sprintf("shim protocol %d, this shim speaks %d", req.V, shimProtocol)})
		case req.Op == "state":
			answer(shimResponse{ShimPid: os.Getpid()})
		case req.Op == "shutdown":
			ln.Close()
			_ = os.RemoveAll(dir)
			answer(shimResponse{})
			return nil
		case req.Op == "bind":
			mu.Lock()
			bound = true
			mu.Unlock()
			s, err := bindShim(req, log)
			ln.Close()
			_ = os.RemoveAll(dir)
			if err != nil {
				answer(shimResponse{Error: err.Error()})
				return err
			}
			lifeline.Close()
			answer(shimResponse{ShimPid: os.Getpid()})
			return s.serveAll()
		default:
			answer(shimResponse{Error: fmt.Sprintf("idle shim: %q before bind", req.Op)})
		}
	}
}

// bindShim makes an idle shim the shim of the pod that req names: its
// diagnostics go to the pod's shim.log from here on, as a shim started for
// the pod writes them.
func bindShim(req shimRequest, log *slog.Logger) (*shim, error) {
	if req.Dir == "" || req.Log == "" || req.Handler == "" {
		return nil, errors.New("bind: dir, log and handler are required")
	}
	diag, err := os.OpenFile(filepath.Join(req.Dir, "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	defer diag.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(diag.Fd()), fd, 0); err != nil {
			return nil, fmt.Errorf("bind: %w", err)
		}
	}
	s, err := newShim(req.Dir, req.Log, req.Handler, log.With("shim", filepath.Base(req.Dir)))
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	return s, nil
}

// listenUnixIn listens on dir/name, binding through /proc/self/fd so that a
// long dir does not overflow sun_path; only this user may connect.
func listenUnixIn(dir, name string) (*net.UnixListener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// dialUnixIn dials dir/name the same way.
func dialUnixIn(ctx context.Context, dir, name string) (net.Conn, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var dialer net.Dialer
	return dialer.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
}

// maxShimRequest bounds a request.
const maxShimRequest = 64 << 10

func (s *shim) serve(c *net.UnixConn) {
	defer c.Close()
	var req shimRequest
	if err := json.NewDecoder(io.LimitReader(c, maxShimRequest)).Decode(&req); err != nil {
		return
	}
	// A wait ends early when the caller goes away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if req.Op == "wait" {
		go func() {
			_, _ = io.Copy(io.Discard, c) // EOF when the caller closes
			cancel()
		}()
	}
	resp := s.handle(ctx, req)
	_ = json.NewEncoder(c).Encode(resp)
	if req.Op == "shutdown" && resp.Error == "" {
		// Only once answered: the process ends soon after, and the
		// daemon would read EOF instead of the answer.
		s.once.Do(func() { close(s.ended) })
	}
}

func (s *shim) container(id string) (*shimContainer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("no container %q", id)
	}
	return c, nil
}

func (s *shim) handle(ctx context.Context, req shimRequest) shimResponse {
	fail := func(err error) shimResponse { return shimResponse{Error: err.Error()} }
	if req.V != shimProtocol {
		return fail(fmt.Errorf("shim protocol %d, this shim speaks %d", req.V, shimProtocol))
	}
	switch req.Op {
	case "start", "create":
		s.mu.Lock()
		if s.ctrs[req.ID] != nil {
			s.mu.Unlock()
			return fail(fmt.Errorf("container %q exists", req.ID))
		}
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		create := s.mon.start
		if req.Op == "create" {
			create = s.mon.prepare
		}
		t, err := create(cctx, req.ID, req.Bundle, req.Tag)
		if err != nil {
			resp := fail(err)
			resp.CannotPrepare = errors.Is(err, errCannotPrepare)
			return resp
		}
		c := &shimContainer{t: t, done: make(chan struct{})}
		s.mu.Lock()
		s.ctrs[req.ID] = c
		s.mu.Unlock()
		go func() {
			st, _ := t.Wait(context.Background())
			c.status = st
			close(c.done)
		}()
		return shimResponse{Pid: t.Pid()}
	case "begin":
		c, err := s.container(req.ID)
		if err != nil {
			return fail(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := c.t.start(cctx); err != nil {
			return fail(err)
		}
		return shimResponse{}
	case "kill":
		c, err := s.container(req.ID)
		if err != nil {
			return fail(err)
		}
		kctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
		if err := c.t.Kill(kctx, syscall.Signal(req.Signal)); err != nil {
			return fail(err)
		}
		return shimResponse{}
	case "wait":
		c, err := s.container(req.ID)
		if err != nil {
			return fail(err)
		}
		select {
		case <-c.done:
			st := c.status
			return shimResponse{Status: &st, Tail: c.t.tail()}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	case "delete":
		c, err := s.container(req.ID)
		if err != nil {
			return shimResponse{} // deleted already
		}
		dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
		if err := c.t.Delete(dctx); err != nil {
			return fail(err)
		}
		s.mu.Lock()
		delete(s.ctrs, req.ID)
		s.mu.Unlock()
		return shimResponse{}
	case "log":
		s.mon.log(req.Line)
		return shimResponse{}
	case "state":
		s.mu.Lock()
		defer s.mu.Unlock()
		resp := shimResponse{ShimPid: os.Getpid()}
		for id, c := range s.ctrs {
			cs := shimContainerState{ID: id, Pid: c.t.Pid()}
			select {
			case <-c.done:
				st := c.status
				cs.Exited, cs.Status = true, &st
			default:
			}
			resp.Containers = append(resp.Containers, cs)
		}
		return resp
	case "shutdown":
		s.mu.Lock()
		n := len(s.ctrs)
		s.mu.Unlock()
		if n > 0 {
			return fail(fmt.Errorf("%d containers are not deleted", n))
		}
		return shimResponse{} // serve ends the shim once it has answered
	}
	return fail(fmt.Errorf("unknown operation %q", req.Op))
}

// shimClient talks to a pod's shim.
type shimClient struct {
	dir string
	cmd *exec.Cmd // nil for a shim this process adopted
}

// call sends one request and reads its response.
func (c *shimClient) call(ctx context.Context, req shimRequest) (shimResponse, error) {
	req.V = shimProtocol
	conn, err := dialUnixIn(ctx, c.dir, shimSocket)
	if err != nil {
		return shimResponse{}, &shimGoneError{fmt.Errorf("shim of %s: %w", filepath.Base(c.dir), err)}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return shimResponse{}, fmt.Errorf("shim of %s: %s: %w", filepath.Base(c.dir), req.Op, err)
	}
	var resp shimResponse
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&resp); err != nil {
		if ctx.Err() != nil {
			return shimResponse{}, ctx.Err()
		}
		return shimResponse{}, fmt.Errorf("shim of %s: %s: %w", filepath.Base(c.dir), req.Op, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// shimGoneError says the shim does not answer: it is gone (killed, or the
// machine restarted), and with it the pod's containers' output.
type shimGoneError struct{ err error }

func (e *shimGoneError) Error() string { return e.err.Error() }
func (e *shimGoneError) Unwrap() error { return e.err }

func isShimGone(err error) bool {
	var g *shimGoneError
	return errors.As(err, &g)
}
