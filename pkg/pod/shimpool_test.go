package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// poolPids are the pids of the idle shims in a pool's directory, asked
// through their sockets.
func poolPids(t testing.TB, dir string) []int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := (&shimClient{dir: filepath.Join(dir, e.Name())}).call(ctx, shimRequest{Op: "state"})
		cancel()
		if err == nil {
			pids = append(pids, resp.ShimPid)
		}
	}
	slices.Sort(pids)
	return pids
}

// alive tells whether process pid exists (and is no zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestIdleShims: the pool starts once the first pod is made, fills up to
// its size and no further, pods take its shims (their containers run and
// their output reaches their logs as under a shim started for them), it
// fills again, and Close ends the idle ones and removes its directory.
func TestIdleShims(t *testing.T) {
	requireHandler(t, "runc")
	const size = 2
	e := newEnv(t, []string{"runc"}, func(o *Options) { o.IdleShims = size })
	pool := filepath.Join(e.dir, "pods.shims")
	ref := runtimeInfoImage(t)
	if n := e.rt.IdleShims(); n != 0 {
		t.Fatalf("%d idle shims before any pod, want 0", n)
	}

	// Three pods at once: the pool is empty, they start their own.
	base := uniqueName("idle")
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("%s-%d", base, i)
		e.run(e.spec(id, "runc", ref))
		ids = append(ids, id)
	}
	for _, id := range ids {
		e.waitStatus(id, time.Minute, "ready", ready)
	}
	eventually(t, time.Minute, "the pool full", func() bool {
		if n := len(poolPids(t, pool)); n > size {
			t.Fatalf("%d idle shims, more than %d", n, size)
		}
		return e.rt.IdleShims() == size && len(poolPids(t, pool)) == size
	})
	idle := poolPids(t, pool)

	// The next two take them.
	for i := 3; i < 5; i++ {
		id := fmt.Sprintf("%s-%d", base, i)
		e.run(e.spec(id, "runc", ref))
		ids = append(ids, id)
	}
	var took []int
	for _, id := range ids[3:] {
		e.waitStatus(id, time.Minute, "ready", ready)
		took = append(took, shimState(t, e.dir, id).ShimPid)
		e.get(id, "/log?msg=from-"+id)
		eventually(t, 10*time.Second, "the container's output in the pod's log", func() bool {
			return strings.Contains(e.logs(id), "from-"+id)
		})
		if _, err := os.Stat(filepath.Join(e.dir, "pods", id, "shim.log")); err != nil {
			t.Errorf("the pod's shim.log: %v", err)
		}
	}
	slices.Sort(took)
	if !slices.Equal(took, idle) {
		t.Errorf("the pods' shims are %v, want the idle ones %v", took, idle)
	}
	eventually(t, time.Minute, "the pool full again", func() bool { return len(poolPids(t, pool)) == size })
	again := poolPids(t, pool)

	// A pod whose shim came from the pool stops as any pod does.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.rt.Stop(ctx, ids[3], time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the stopped pod's shim gone", func() bool { return !alive(took[0]) || !alive(took[1]) })

	if err := e.rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pool); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pool's directory after Close: %v", err)
	}
	for _, pid := range again {
		if alive(pid) {
			t.Errorf("idle shim %d runs after Close", pid)
		}
	}
}

// Environment of the helper process of TestIdleShimsAfterKill.
const (
	helperShims = "KNBOX_POD_HELPER_SHIMS"
)

// TestIdleShimsHelper is the process TestIdleShimsAfterKill kills: it runs
// a pod, waits for its pool of idle shims, says so, and waits.
func TestIdleShimsHelper(t *testing.T) {
	if os.Getenv(helperShims) != "1" {
		return // only as the helper process of TestIdleShimsAfterKill
	}
	dir, ref, id := os.Getenv(helperDir), os.Getenv(helperRef), os.Getenv(helperID)
	rt := idleShimsRuntime(t, dir)
	e := &env{t: t, dir: dir, rt: rt}
	if err := rt.Run(context.Background(), e.spec(id, "runc", ref)); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(id, time.Minute, "ready", ready)
	eventually(t, time.Minute, "the pool full", func() bool { return rt.IdleShims() == 2 })
	var pids []string
	for _, p := range poolPids(t, filepath.Join(dir, "pods.shims")) {
		pids = append(pids, strconv.Itoa(p))
	}
	fmt.Printf("READY %s\n", strings.Join(pids, " "))
	time.Sleep(2 * time.Minute) // killed long before
}

func idleShimsRuntime(t testing.TB, dir string) *Runtime {
	t.Helper()
	rt, _ := runtimeIn(t, dir, "runc", func(o *Options) { o.IdleShims = 2 })
	return rt
}

// TestIdleShimsAfterKill: a knbox killed with SIGKILL leaves no idle shim
// behind (they end with their lifeline), and the next Runtime finds the
// pool's directory clean; its pod is adopted as usual.
func TestIdleShimsAfterKill(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	dir := t.TempDir()
	id := uniqueName("idlekill")
	ready, kill := helperProcess(t, "TestIdleShimsHelper", helperShims+"=1", helperDir+"="+dir, helperRef+"="+ref, helperID+"="+id)
	var pids []int
	for _, f := range ready {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
	}
	if len(pids) != 2 {
		t.Fatalf("the helper's pool: %v, want 2 idle shims", pids)
	}
	kill()
	eventually(t, 10*time.Second, "the idle shims gone with the killed process", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
	if ents, err := os.ReadDir(filepath.Join(dir, "pods.shims")); err != nil || len(ents) != 0 {
		t.Errorf("the pool's directory after the idle shims ended: %d entries (%v)", len(ents), err)
	}

	rt := idleShimsRuntime(t, dir)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adopted, err := rt.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 1 || adopted[0].ID != id {
		t.Errorf("adopted %+v, want %s", adopted, id)
	}
	if n := rt.IdleShims(); n != 0 {
		t.Errorf("%d idle shims before the new Runtime made a pod", n)
	}
}

// TestIdleShimsLeftAnswering: idle shims that still answer when a new pool
// opens on their directory (their process lives on: here, a pool that was
// not closed) are shut down, and the directory starts empty.
func TestIdleShimsLeftAnswering(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: shims become subreapers") // as every shim test
	}
	dir := filepath.Join(t.TempDir(), "shims")
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	old, err := newShimPool(shimCommand(), dir, 2, time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.close() })
	old.poke()
	eventually(t, time.Minute, "the old pool full", func() bool { return old.count() == 2 })
	pids := poolPids(t, dir)
	if len(pids) != 2 {
		t.Fatalf("old pool: %v", pids)
	}
	sp, err := newShimPool(shimCommand(), dir, 2, time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.close() })
	eventually(t, 10*time.Second, "the old pool's shims gone", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
	if got := poolPids(t, dir); len(got) != 0 {
		t.Errorf("idle shims in the new pool's directory before its first pod: %v", got)
	}
}

// TestIdleShimsKeep: once no pod was made for the pool's keep, its idle
// shims end; the next pod fills it again.
func TestIdleShimsKeep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: shims become subreapers") // as every shim test
	}
	dir := filepath.Join(t.TempDir(), "shims")
	sp, err := newShimPool(shimCommand(), dir, 2, 5*time.Second, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.close() })
	for round := range 2 {
		sp.poke() // a pod made
		eventually(t, 5*time.Second, "the pool full", func() bool { return sp.count() == 2 })
		pids := poolPids(t, dir)
		if len(pids) != 2 {
			t.Fatalf("round %d: idle shims %v", round, pids)
		}
		eventually(t, 20*time.Second, "the idle shims ended after keep, their directories gone", func() bool {
			ents, err := os.ReadDir(dir)
			return sp.count() == 0 && !alive(pids[0]) && !alive(pids[1]) && err == nil && len(ents) == 0
		})
	}
}
