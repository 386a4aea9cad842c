package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/knbox/knbox/pkg/runtime"
)

// ErrNoExec: the pod's handler cannot run a further process in a container
// (the process handler).
var ErrNoExec = errors.New("the runtime handler cannot exec into a container")

// Exec runs a further process in a running container of pod id (the
// container named container), as the kubelet's ExecSync/Exec: with the
// container's process spec and p's arguments and streams, until it exits
// or ctx ends. It returns the process's exit code.
func (r *Runtime) Exec(ctx context.Context, id, container string, p runtime.ExecProcess) (int, error) {
	pd := r.pod(id)
	if pd == nil {
		return -1, fmt.Errorf("pod %s does not exist", id)
	}
	ex, ok := pd.h.(runtime.Execer)
	if !ok {
		return -1, fmt.Errorf("%w: handler %s", ErrNoExec, pd.h.Name())
	}
	cid := ""
	for i, c := range pd.spec.Containers {
		if c.Name == container {
			cid = id
			if i != pd.spec.Serving {
				cid = sidecarID(id, c.Name)
			}
		}
	}
	if cid == "" {
		return -1, fmt.Errorf("pod %s has no container %q", id, container)
	}
	if st := pd.status(); !st.Running || st.Stopping {
		return -1, fmt.Errorf("container %s of pod %s is not running", container, id)
	}
	return ex.Exec(ctx, cid, p)
}

// DialPort connects to port on the loopback of pod id's network namespace
// (port forwarding).
func (r *Runtime) DialPort(ctx context.Context, id string, port int32) (net.Conn, error) {
	p := r.pod(id)
	if p == nil {
		return nil, fmt.Errorf("pod %s does not exist", id)
	}
	return p.dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

// execProbe runs an exec probe's command in the serving container (its id
// is the pod's), keeping the start of its output for the failure message.
func (p *pod) execProbe(ctx context.Context, cmd []string) (int, string, error) {
	ex, ok := p.h.(runtime.Execer)
	if !ok || !p.spec.ExecProbes {
		return -1, "", fmt.Errorf("%w: handler %s", ErrNoExec, p.h.Name())
	}
	out := &boundedBuffer{max: maxProbeBody}
	code, err := ex.Exec(ctx, p.spec.ID, runtime.ExecProcess{Args: cmd, Stdout: out, Stderr: out})
	return code, out.String(), err
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.max - len(b.b); n > 0 {
		b.b = append(b.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}
