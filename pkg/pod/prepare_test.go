package pod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func prepared(st Status) bool { return st.Prepared }

// TestPreparedPodStarts: a prepared pod has its sandbox made and its
// containers created (runc, runsc: the runtime lists them "created"), is
// neither running nor ready, writes no output; Start starts it, it serves,
// and Stop leaves nothing.
func TestPreparedPodStarts(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			id := uniqueName("prep-" + h)
			s := e.spec(id, h, ref)
			if err := e.rt.Prepare(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = e.rt.Stop(ctx, id, time.Second)
			})
			st := e.waitStatus(id, time.Minute, "prepared", prepared)
			if st.Running || st.Ready || st.Pulling {
				t.Errorf("prepared pod: status %+v", st)
			}
			rss, pids, ok := e.rt.Cost(id)
			t.Logf("%s: a prepared pod at rest: PSS %d KiB, %d processes", h, rss>>10, pids)
			if !ok || rss <= 0 || pids < 1 {
				t.Errorf("Cost: %d bytes, %d processes, %v", rss, pids, ok)
			}
			if h != "process" {
				if pids < 2 {
					t.Errorf("Cost: %d processes, want the shim and the waiting init at least", pids)
				}
				if _, _, cs := e.leftovers(id); cs != 1 {
					t.Errorf("prepared pod: %d containers in the runtime, want 1 (created)", cs)
				}
				if _, err := os.Stat(filepath.Join(e.dir, "pods", id, preparedMarker)); err != nil {
					t.Errorf("prepared pod: marker: %v", err)
				}
			}
			if err := e.rt.Start(id); err != nil {
				t.Fatal(err)
			}
			st = e.waitStatus(id, time.Minute, "ready", ready)
			if !st.Running || st.Prepared || st.Failures != 0 {
				t.Errorf("started pod: status %+v", st)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "pods", id, preparedMarker)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("started pod: marker still there (%v)", err)
			}
			i := e.info(id, "")
			if i.Env["K_REVISION"] != id {
				t.Errorf("env K_REVISION %q", i.Env["K_REVISION"])
			}
			e.get(id, "/log?msg=prepared-logs")
			eventually(t, 10*time.Second, "log lines", func() bool { return strings.Contains(e.logs(id), "prepared-logs") })
			if err := e.rt.Start(id); err != nil {
				t.Errorf("Start of a started pod: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.rt.Stop(ctx, id, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if m, n, c := e.leftovers(id); m != 0 || n != 0 || c != 0 {
				t.Errorf("after Stop: %d mounts, %d namespaces, %d containers", m, n, c)
			}
		})
	}
}

// TestPreparedPodStopped: a prepared pod stopped without a start leaves
// nothing, and its container never ran.
func TestPreparedPodStopped(t *testing.T) {
	h := "runc"
	requireHandler(t, h)
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{h})
	id := uniqueName("prepstop")
	if err := e.rt.Prepare(context.Background(), e.spec(id, h, ref)); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(id, time.Minute, "prepared", prepared)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.rt.Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if m, n, c := e.leftovers(id); m != 0 || n != 0 || c != 0 {
		t.Errorf("after Stop: %d mounts, %d namespaces, %d containers", m, n, c)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "pods", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's directory is left: %v", err)
	}
	if err := e.rt.Start(id); err == nil {
		t.Error("Start of a stopped pod: no error")
	}
}

// TestRecoverRemovesPrepared: a process with prepared pods is killed
// (kill -9); a new Runtime's Recover adopts none of them and removes their
// containers (created, never started), shims, mounts, namespaces,
// directories and cgroups.
func TestRecoverRemovesPrepared(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			dir := t.TempDir()
			base := uniqueName("recprep-" + h)
			ids, kill := helperProcess(t, "TestRecoverHelper", helperEnv+"=1", helperDir+"="+dir, helperH+"="+h, helperRef+"="+ref, helperID+"="+base, helperPrp+"=1")
			if len(ids) != 2 {
				t.Fatalf("the helper did not prepare 2 pods (%v)", ids)
			}
			kill()

			rt, hs := runtimeIn(t, dir, h)
			e := &env{t: t, dir: dir, rt: rt, handlers: hs}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = rt.Close(ctx)
			})
			mounts, nss, cs := e.leftovers(base)
			t.Logf("left by the killed process: %d mounts, %d namespaces, %d containers", mounts, nss, cs)
			if mounts < 2 || nss != 2 || cs != 2 {
				t.Errorf("the killed process left %d mounts, %d namespaces, %d containers; want its 2 prepared pods' (the test would prove nothing)", mounts, nss, cs)
			}
			if n := len(cgroupsOf(ids)); n == 0 {
				t.Errorf("the killed process left no cgroups of its pods (the test would prove nothing)")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			adopted, err := rt.Recover(ctx)
			if err != nil {
				t.Fatalf("recover: %v", err)
			}
			if len(adopted) != 0 {
				t.Errorf("adopted %d prepared pods, want none", len(adopted))
			}
			if m, n, c := e.leftovers(base); m != 0 || n != 0 || c != 0 {
				t.Errorf("after Recover: %d mounts, %d namespaces, %d containers", m, n, c)
			}
			for _, id := range ids {
				if _, err := os.Stat(filepath.Join(dir, "pods", id)); !os.IsNotExist(err) {
					t.Errorf("the directory of prepared pod %s: %v", id, err)
				}
				// The shims exit once they answered shutdown.
				eventually(t, 10*time.Second, "no process of "+id, func() bool {
					ok, err := processesOf(id)
					return err == nil && !ok
				})
			}
			if left := cgroupsOf(ids); len(left) != 0 {
				t.Errorf("cgroups after Recover: %v", left)
			}
		})
	}
}
