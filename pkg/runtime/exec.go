package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// ExecProcess is a further process to run in a running container, as
// `kubectl exec` asks for one: the container's environment, user and
// working directory with other arguments.
type ExecProcess struct {
	Args []string
	// Stdin, if not nil, is the process's standard input (else it reads
	// EOF); Stdout and Stderr, if not nil, receive its output.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Execer is implemented by handlers that can run a further process in a
// running container (runc exec, runsc exec, crun exec).
type Execer interface {
	// Exec runs p in container id until it exits or ctx ends (then it is
	// killed) and returns its exit code.
	Exec(ctx context.Context, id string, p ExecProcess) (int, error)
}

// ErrExecArgs: an exec without a command.
var ErrExecArgs = errors.New("exec: no command")

// Exec runs `<runtime> exec <id> <args>`: the runtime starts the process
// with the container's process spec (environment, user, cwd,
// capabilities, seccomp) and the arguments given.
func (h *ociHandler) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	if err := checkID(id); err != nil {
		return -1, err
	}
	if len(p.Args) == 0 {
		return -1, ErrExecArgs
	}
	args := append([]string{"exec", id}, p.Args...)
	cmd := exec.CommandContext(ctx, h.bin, h.argv(args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.Stdin, p.Stdout, p.Stderr
	cmd.WaitDelay = 2 * time.Second
	err := runCmd(cmd)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.Exited() && ctx.Err() == nil:
		return ee.ExitCode(), nil
	default:
		return -1, fmt.Errorf("%s exec %s: %w", h.name, id, err)
	}
}

var _ Execer = (*ociHandler)(nil)
