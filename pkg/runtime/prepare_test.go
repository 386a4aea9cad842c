package runtime

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reapOnSIGCHLD reaps orphans, as the pod's shim does, until stop.
func reapOnSIGCHLD() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				ReapOrphans()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// preparing is a handler whose Create is Prepare then Start: the shared
// suite runs on prepared containers with it.
type preparing struct{ Handler }

func (h preparing) Create(ctx context.Context, id, bundle string, cio IO) (Container, error) {
	c, err := h.Handler.(Preparer).Prepare(ctx, id, bundle, cio)
	if err != nil {
		return nil, err
	}
	if err := c.(Starter).Start(ctx); err != nil {
		_ = c.Delete(context.WithoutCancel(ctx))
		return nil, err
	}
	return c, nil
}

// TestHandlersPrepared runs the shared suite on the OCI handlers with every
// container prepared (runc create) and then started.
func TestHandlersPrepared(t *testing.T) {
	for _, f := range handlerFactories {
		if f.name == "process" {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			requireRuntime(t, f.name)
			testHandler(t, func(t testing.TB, root string) Handler { return preparing{f.open(t, root)} })
		})
	}
}

// TestPrepareWaitsForStart: a prepared container is created, not running,
// until Start; then it runs and its output and exit status are observed.
func TestPrepareWaitsForStart(t *testing.T) {
	for _, f := range handlerFactories {
		if f.name == "process" {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			requireRuntime(t, f.name)
			ctx := testContext(t, 90*time.Second)
			root := t.TempDir()
			h := f.open(t, root).(*ociHandler)
			var stdout syncBuffer
			b := newBundle(t, []string{"sh", "-c", "echo started; exit 3"})
			c, err := h.Prepare(ctx, "prep", b, IO{Stdout: &stdout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background()) })
			e, err := h.lookup(ctx, "prep")
			if err != nil || e == nil || e.Status != "created" {
				t.Fatalf("after Prepare: %+v, %v; want status created", e, err)
			}
			if s := stdout.String(); s != "" {
				t.Fatalf("output before Start: %q", s)
			}
			if err := c.(Starter).Start(ctx); err != nil {
				t.Fatal(err)
			}
			st := wait(t, ctx, c)
			if st.Code != 3 {
				t.Errorf("status %v, want exit code 3", st)
			}
			if got := stdout.String(); !strings.Contains(got, "started") {
				t.Errorf("stdout %q", got)
			}
			if err := c.Delete(ctx); err != nil {
				t.Fatal(err)
			}
			if e, err := h.lookup(ctx, "prep"); err != nil || e != nil {
				t.Errorf("after Delete: %+v, %v", e, err)
			}
		})
	}
}

// TestPrepareDeleteUnstarted: a prepared container deleted without a start
// leaves nothing.
func TestPrepareDeleteUnstarted(t *testing.T) {
	requireRuntime(t, "runc")
	ctx := testContext(t, 60*time.Second)
	root := t.TempDir()
	h := mustOCI(t, OCIConfig{Binary: "runc", Root: root}).(*ociHandler)
	c, err := h.Prepare(ctx, "unstarted", newBundle(t, []string{"sleep", "100"}), IO{})
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Pid()
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("init %d still exists after Delete", pid)
	}
	if cs, err := h.Recover(ctx); err != nil || len(cs) != 0 {
		t.Errorf("Recover after Delete: %d containers, %v", len(cs), err)
	}
}
