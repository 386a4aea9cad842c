package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Preparer is implemented by handlers that can create a container without
// starting it (`runc create`: the container's init waits on its exec FIFO,
// its namespaces, mounts and cgroups made), so that a later Start costs only
// `runc start`. The caller must be a child subreaper (BecomeSubreaper): the
// runtime exits after creating, and the init's exit status goes to the
// nearest subreaper. Without one Prepare fails with ErrNotSubreaper.
type Preparer interface {
	// Prepare creates container id from bundle, not started; its stdout
	// and stderr go to io from its start on. The Container it returns
	// implements Starter; Kill, Wait and Delete work before Start too.
	Prepare(ctx context.Context, id, bundle string, io IO) (Container, error)
}

// Starter is a prepared container.
type Starter interface {
	// Start starts the container's process.
	Start(ctx context.Context) error
}

// ErrNotSubreaper is Prepare's error in a process that is not a child
// subreaper.
var ErrNotSubreaper = errors.New("this process is not a child subreaper: a created container's exit status would be lost")

func (h *ociHandler) Prepare(ctx context.Context, id, bundle string, cio IO) (Container, error) {
	fail := func(err error) (Container, error) {
		return nil, fmt.Errorf("%s create %s: %w", h.name, id, err)
	}
	if !isSubreaper() {
		return fail(ErrNotSubreaper)
	}
	bundle, spec, cgs, err := h.setUp(ctx, id, bundle)
	if err != nil {
		return fail(err)
	}
	pidFile := filepath.Join(bundle, id+".pid")
	_ = os.Remove(pidFile)
	defer os.Remove(pidFile)
	st, err := newStdio()
	if err != nil {
		if cgs != nil {
			_ = h.cgroups.remove(context.WithoutCancel(ctx), cgs)
		}
		return fail(err)
	}
	cctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, cliTimeout)
		defer cancel()
	}
	// The runtime hands its stdio to the container's init, which keeps
	// them: the pipes below are the container's output from its start on.
	cmd := exec.CommandContext(cctx, h.bin, h.argv("create", "--bundle", bundle, "--pid-file", pidFile, id)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = st.stdin, st.outW, st.errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var pid int
	if err = startCmd(cmd); err == nil {
		st.closeChildEnds()
		err = cmd.Wait()
		// The runtime has exited: its init is this process's child now.
		// Owning it and disowning the runtime in one step keeps
		// ReapOrphans off the init.
		owned.Lock()
		delete(owned.pids, cmd.Process.Pid)
		if err == nil {
			var ok bool
			if pid, ok = readPidFile(pidFile); ok {
				owned.pids[pid] = true
			} else {
				err = errors.New("the runtime wrote no pid file")
			}
		}
		owned.Unlock()
	}
	if err != nil {
		if msg := trimOutput(st.readStderr(time.Second)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		st.close()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cliTimeout)
		defer cancel()
		if derr := h.removeFailed(dctx, id); derr != nil {
			err = fmt.Errorf("%w; removing what it left: %v", err, derr)
		}
		if cgs != nil {
			_ = h.cgroups.remove(dctx, cgs)
		}
		if spec.Linux != nil {
			removeEmptyCgroups(spec.Linux.CgroupsPath)
		}
		return fail(err)
	}
	c := &ociContainer{h: h, id: id, pid: pid, exit: newExitState(), cgroups: cgs, created: true}
	if cgs != nil && cgs.memory() != "" {
		c.memcg = cgs.memory()
	} else if c.memcg = memoryCgroup(strconv.Itoa(pid)); c.memcg == "" && spec.Linux != nil {
		c.memcg = memoryCgroupFromSpec(spec.Linux.CgroupsPath)
	}
	stdout, stderr := startPump(st.outR, cio.Stdout), startPump(st.errR, cio.Stderr)
	go func() {
		es, err := reapInit(pid)
		if err != nil {
			es = ExitStatus{Code: -1}
		}
		es.At = time.Now()
		c.checkOOM(&es)
		drain(drainGrace, stdout, stderr)
		c.exit.set(es)
	}()
	return c, nil
}

// Start starts a prepared container.
func (c *ociContainer) Start(ctx context.Context) error {
	if !c.created {
		return fmt.Errorf("%s start %s: the container was not prepared", c.h.name, c.id)
	}
	_, err := c.h.run(ctx, c.id, "start", c.id)
	return err
}

var (
	_ Preparer = (*ociHandler)(nil)
	_ Starter  = (*ociContainer)(nil)
)
