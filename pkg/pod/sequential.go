package pod

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of a Sequential pod's containers' terminated states, as the
// kubelet writes them.
const (
	// ReasonCompleted: the container exited 0.
	ReasonCompleted = "Completed"
	// ReasonOOMKilled: the container was killed over its memory limit.
	ReasonOOMKilled = "OOMKilled"
	// ReasonStopped: Stop (or knbox's exit) ended the container.
	ReasonStopped = "Stopped"
)

// runSequential is the life of a Sequential pod: pull every image, make
// the sandbox, then run the containers one after another, each to its end
// in a fresh root filesystem, in the same sandbox (network namespace and
// volumes: an emptyDir carries what one container leaves to the next). The
// first failure ends the pod; nothing is restarted. The pod then waits,
// Done, for Stop, which cleans up (run's deferred cleanup).
func (p *pod) runSequential(ctx context.Context) {
	if p.adopted { // Recover does not adopt Sequential pods; be safe anyway
		p.finish(&Failure{Reason: ReasonRunContainer, Message: "interrupted by a restart of knbox", At: time.Now()})
		return
	}
	err := p.pull(ctx)
	if err == nil {
		err = p.prepare(ctx)
	}
	if err != nil {
		if ctx.Err() != nil || p.stopRequested() {
			p.finish(&Failure{Reason: ReasonStopped, Message: "stopped before its containers started", At: time.Now()})
			return
		}
		p.startFailed(err) // the failure, counted
		p.update(func(st *Status) { st.Done, st.Running, st.Pulling, st.Succeeded = true, false, false, false })
		p.waitStop(ctx)
		return
	}
	ns := p.nsOf()
	for i, c := range p.ctrs {
		if ctx.Err() != nil || p.stopRequested() {
			p.finish(&Failure{Reason: ReasonStopped, Container: c.name, Message: "stopped before container " + c.name + " started", At: time.Now()})
			return
		}
		started := time.Now()
		if err := p.makeCtr(ctx, ns, c, false); err != nil {
			p.teardownContainers()
			p.removeLeftover(ctx)
			reason := ReasonRunContainer
			if IsConfigError(err) {
				reason = ReasonCreateContainerConfig
			}
			f := &Failure{Reason: reason, Container: c.name, Message: fmt.Sprintf("%s: %v", p.spec.Handler, err), At: time.Now()}
			p.setStep(i, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: -1, Reason: reason, Message: f.Message,
				StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(f.At)}})
			p.finish(f)
			p.waitStop(ctx)
			return
		}
		p.lastStarted = time.Now()
		p.update(func(st *Status) {
			st.Running = true
			st.Containers = withStep(st.Containers, i, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}})
		})
		ex := watchExit(ctx, c.t)
		stopped := false
		select {
		case <-ex.done:
		case <-p.stopCh:
			stopped = true
			p.mon.log("knbox: stopping step " + c.name)
			p.killOne(ctx, c, ex, p.grace)
		case <-ctx.Done():
			stopped = true
			p.killOne(ctx, c, ex, 0)
		}
		st := ex.status
		msg := p.terminationMessage(c, st)
		term := &corev1.ContainerStateTerminated{ExitCode: int32(st.Code), Reason: ReasonCompleted, Message: msg,
			StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(time.Now())}
		if ex.err != nil && !stopped {
			term.ExitCode, term.Message = -1, ex.err.Error()
		}
		switch {
		case stopped:
			term.Reason = ReasonStopped
		case st.OOMKilled:
			term.Reason = ReasonOOMKilled
		case term.ExitCode != 0:
			term.Reason = ReasonError
		}
		if term.Reason != ReasonCompleted {
			line := "knbox: container " + c.name + " exited (" + st.String() + ")"
			if m := c.terminationLog(); m != "" {
				line += ": " + m
			}
			p.mon.log(line)
		}
		p.teardownContainers()
		p.setStep(i, corev1.ContainerState{Terminated: term})
		if term.Reason != ReasonCompleted {
			f := &Failure{Reason: ReasonError, Container: c.name, ExitCode: int(term.ExitCode), OOMKilled: st.OOMKilled, Message: term.Message, At: term.FinishedAt.Time}
			if stopped {
				f.Reason = ReasonStopped
			}
			p.finish(f)
			if !stopped {
				p.waitStop(ctx)
			}
			return
		}
	}
	p.finish(nil)
	p.waitStop(ctx)
}

// killOne ends a running container: SIGTERM, grace, SIGKILL.
func (p *pod) killOne(ctx context.Context, c *ctr, ex *exitWatch, grace time.Duration) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if grace > 0 {
		if err := c.t.Kill(kctx, syscall.SIGTERM); err != nil {
			p.log.Warn("SIGTERM failed", "container", c.name, "err", err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-ex.done:
			return
		case <-t.C:
		}
	}
	if err := c.t.Kill(kctx, syscall.SIGKILL); err != nil && !errors.Is(err, context.Canceled) {
		p.log.Warn("SIGKILL failed", "container", c.name, "err", err)
	}
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-ex.done:
	case <-t.C:
	}
}

// setStep records container i's state.
func (p *pod) setStep(i int, cs corev1.ContainerState) {
	p.update(func(st *Status) { st.Containers = withStep(st.Containers, i, cs) })
}

// withStep is a copy of states with state i replaced: Status copies share
// nothing with the pod's own.
func withStep(states []corev1.ContainerState, i int, cs corev1.ContainerState) []corev1.ContainerState {
	out := make([]corev1.ContainerState, len(states))
	copy(out, states)
	out[i] = cs
	return out
}

// finish marks a Sequential pod Done: succeeded when f is nil.
func (p *pod) finish(f *Failure) {
	p.update(func(st *Status) {
		st.Done, st.Running, st.Pulling = true, false, false
		st.Succeeded = f == nil
		if f != nil {
			st.Failures++
			st.LastFailure = f
		}
	})
}

// waitStop waits for Stop or the end of ctx.
func (p *pod) waitStop(ctx context.Context) {
	select {
	case <-p.stopCh:
	case <-ctx.Done():
	}
}
