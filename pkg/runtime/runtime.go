package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// IO is where a container's stdout and stderr go. Stdin is always empty: it
// reads EOF at once, as the Knative runtime contract requires. The handler
// copies until the container has exited; a nil writer discards. When Stdout and
// Stderr are the same writer, it must be safe for concurrent use. A writer that
// fails is replaced by a discarding one, so a container never blocks on it.
type IO struct {
	Stdout, Stderr io.Writer
}

// ExitStatus is how a container ended.
type ExitStatus struct {
	// Code is the exit code; 128+n when the process was killed by signal n;
	// -1 when this process could not observe it (a container adopted through
	// Recover).
	Code int
	// Signal is the signal that killed the process, 0 if it exited normally
	// or the status is unknown.
	Signal syscall.Signal
	// OOMKilled is set when the process was killed by SIGKILL and its memory
	// cgroup counts an OOM kill.
	OOMKilled bool
	// At is when the exit was observed.
	At time.Time
}

func (s ExitStatus) String() string {
	switch {
	case s.Code < 0:
		return "exit status unknown"
	case s.OOMKilled:
		return "OOM-killed"
	case s.Signal != 0:
		return fmt.Sprintf("killed by signal %d (%v)", int(s.Signal), s.Signal)
	default:
		return fmt.Sprintf("exit code %d", s.Code)
	}
}

// Container is one container created by a Handler.
type Container interface {
	ID() string
	// Pid is the host pid of the container's init (runsc: of its sandbox;
	// process: of the child).
	Pid() int
	// Kill sends sig to the container's init. It is a no-op once the
	// container has exited.
	Kill(ctx context.Context, sig syscall.Signal) error
	// Wait blocks until the container has exited (and, for a container this
	// process created, its output has been copied) or ctx is done. It may be
	// called many times and concurrently.
	Wait(ctx context.Context) (ExitStatus, error)
	// Delete removes the container's runtime state, killing it first if it
	// still runs. Deleting a deleted container is not an error.
	Delete(ctx context.Context) error
}

// Handler creates containers with one runtime.
type Handler interface {
	Name() string
	// Create creates and starts the container id from bundle. The process is
	// running when Create returns.
	Create(ctx context.Context, id, bundle string, io IO) (Container, error)
	// Recover finds the containers this handler's state directory still has
	// (e.g. after the daemon was killed with kill -9) so that the caller can
	// adopt them (Kill, Wait and Delete work; output is no longer captured)
	// or delete them.
	Recover(ctx context.Context) ([]Container, error)
}

// MultiContainer is implemented by handlers that can run several containers
// of one instance side by side, each from its own bundle, sharing the
// network namespace and the mounts the bundles name (a Knative Revision
// with sidecars). A handler without it runs one container per instance.
type MultiContainer interface {
	MultiContainer() bool
}

// RootRefuser is implemented by handlers that refuse to run a container as
// uid 0 (process): a caller that builds specs can refuse such a container
// earlier, naming the field of the user's spec that made it root.
type RootRefuser interface {
	RefusesRoot() bool
}

// Unisolated is implemented by handlers that do not isolate their
// containers from the host (process). Unisolated says so, and what they
// lack, in a sentence for operators: the RuntimeClass registered for the
// handler carries it.
type Unisolated interface {
	Unisolated() string
}

// validID reports whether id is what runc accepts as a container id
// (^[A-Za-z0-9][A-Za-z0-9_.+-]{0,253}$), starting with a letter or digit so
// that it never reads as a flag or a hidden file. A loop, not a regexp: the
// bounded repetition compiles to hundreds of states, at every start of the
// binary (every shim included), for a check the daemon seldom makes.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 254 || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '.' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func checkID(id string) error {
	if !validID(id) {
		return fmt.Errorf("invalid container id %q: want letters, digits and _.+- (at most 254, not starting with a symbol)", id)
	}
	return nil
}

// loadSpec reads bundle/config.json and refuses what no handler here supports.
func loadSpec(bundle string) (*specs.Spec, error) {
	f, err := os.Open(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	spec := new(specs.Spec)
	if err := json.NewDecoder(f).Decode(spec); err != nil {
		return nil, fmt.Errorf("read config.json: %w", err)
	}
	if spec.Process == nil || len(spec.Process.Args) == 0 {
		return nil, errors.New("config.json: process.args is empty")
	}
	if spec.Process.Terminal {
		return nil, errors.New("config.json: process.terminal is not supported (stdio are pipes)")
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return nil, errors.New("config.json: root.path is empty")
	}
	return spec, nil
}

// rootPath is the spec's root.path, made absolute against the bundle.
func rootPath(bundle string, spec *specs.Spec) string {
	if filepath.IsAbs(spec.Root.Path) {
		return spec.Root.Path
	}
	return filepath.Join(bundle, spec.Root.Path)
}

// fromCode makes an ExitStatus from a shell-style exit code, reading codes
// 129..192 as death by signal code-128.
func fromCode(code int) ExitStatus {
	st := ExitStatus{Code: code, At: time.Now()}
	if code > 128 && code <= 128+64 {
		st.Signal = syscall.Signal(code - 128)
	}
	return st
}

// fromWaitStatus makes an ExitStatus from a wait status.
func fromWaitStatus(ws syscall.WaitStatus) ExitStatus {
	switch {
	case ws.Exited():
		return ExitStatus{Code: ws.ExitStatus(), At: time.Now()}
	case ws.Signaled():
		return ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal(), At: time.Now()}
	default:
		return ExitStatus{Code: -1, At: time.Now()}
	}
}

// exitState is the part of a Container that records its end: a channel closed
// once, and the status behind it.
type exitState struct {
	done   chan struct{}
	once   sync.Once
	status ExitStatus
}

func newExitState() *exitState { return &exitState{done: make(chan struct{})} }

func (e *exitState) set(st ExitStatus) {
	e.once.Do(func() {
		e.status = st
		close(e.done)
	})
}

func (e *exitState) exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *exitState) wait(ctx context.Context, what string) (ExitStatus, error) {
	select {
	case <-e.done:
		return e.status, nil
	case <-ctx.Done():
		return ExitStatus{}, fmt.Errorf("wait for %s: %w", what, ctx.Err())
	}
}

// trimOutput makes a runtime's stderr fit into an error message.
func trimOutput(b []byte) string {
	s := strings.TrimSpace(string(b))
	const max = 2048
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}
