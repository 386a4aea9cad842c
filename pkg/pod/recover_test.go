package pod

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/runtime"
)

// Environment of the helper process of TestRecoverAfterKill.
const (
	helperEnv = "KNBOX_POD_HELPER"
	helperDir = "KNBOX_POD_HELPER_DIR"
	helperH   = "KNBOX_POD_HELPER_HANDLER"
	helperRef = "KNBOX_POD_HELPER_IMAGE"
	helperID  = "KNBOX_POD_HELPER_ID"
	helperBB  = "KNBOX_POD_HELPER_SIDECAR" // the sidecar's image, if any
	helperPrp = "KNBOX_POD_HELPER_PREPARE" // "1": Prepare the pods instead of running them
)

// runtimeIn opens a Runtime on dir as the helper and the test both do, so
// that the second finds what the first left.
func runtimeIn(t testing.TB, dir, handler string, opts ...func(*Options)) (*Runtime, map[string]runtime.Handler) {
	t.Helper()
	store, err := image.Open(image.Options{Root: filepath.Join(dir, "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]runtime.Handler{handler: newHandler(t, handler, filepath.Join(dir, "handlers"))}
	o := Options{Images: store, Handlers: hs, StateDir: filepath.Join(dir, "pods"), ShimCommand: shimCommand(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	for _, f := range opts {
		f(&o)
	}
	rt, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return rt, hs
}

// withSidecar adds a busybox sidecar that sleeps, beside the serving
// container.
func withSidecar(ref string) func(*Spec) {
	return func(s *Spec) {
		s.Containers = append(s.Containers, corev1.Container{Name: "sidecar", Image: ref, Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}})
		s.Images = append(s.Images, ref)
	}
}

// TestRecoverHelper is the process that TestRecoverAfterKill kills: it runs
// two pods, says so, and waits to be killed.
func TestRecoverHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return // only as the helper process of TestRecoverAfterKill
	}
	dir, h, ref, base := os.Getenv(helperDir), os.Getenv(helperH), os.Getenv(helperRef), os.Getenv(helperID)
	rt, _ := runtimeIn(t, dir, h)
	e := &env{t: t, dir: dir, rt: rt}
	var ids []string
	run, cond := rt.Run, ready
	if os.Getenv(helperPrp) == "1" {
		run, cond = rt.Prepare, func(st Status) bool { return st.Prepared }
	}
	for i := range 2 {
		id := fmt.Sprintf("%s-%d", base, i)
		s := e.spec(id, h, ref)
		if bb := os.Getenv(helperBB); bb != "" {
			withSidecar(bb)(&s)
		}
		if err := run(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		e.waitStatus(id, time.Minute, "ready", cond)
	}
	fmt.Printf("READY %s\n", strings.Join(ids, " "))
	time.Sleep(2 * time.Minute) // killed long before
}

// TestRecoverAfterKill starts pods in another process, kills it with
// SIGKILL (so nothing is cleaned up) and kills the shim of one of its pods:
// a new Runtime's Recover adopts the pod whose shim runs (same containers,
// output still captured) and removes every container (sidecars too, under
// runc and runsc), mount, namespace, directory and cgroup of the other, and
// a pod then runs again.
func TestRecoverAfterKill(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			dir := t.TempDir()
			base := uniqueName("recover-" + h)
			bb, perPod := "", 1
			if h != "process" { // which runs one container per pod
				bb, perPod = busyboxImage(t), 2
			}

			ids, kill := helperProcess(t, "TestRecoverHelper", helperEnv+"=1", helperDir+"="+dir, helperH+"="+h, helperRef+"="+ref, helperID+"="+base, helperBB+"="+bb)
			if len(ids) != 2 {
				t.Fatalf("the helper did not start 2 pods (%v)", ids)
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
			if mounts < 2*perPod || nss != 2 || cs != 2*perPod {
				t.Errorf("the killed process left %d mounts, %d namespaces, %d containers; want its 2 pods' with %d containers each (the test would prove nothing)", mounts, nss, cs, perPod)
			}
			// The pods' shims outlived the process. The first pod's shim is
			// killed too (as a reboot would end it): that pod cannot be
			// adopted and is removed; the second is adopted as it runs.
			kept, gone := ids[1], ids[0]
			before := shimState(t, dir, kept)
			if err := syscall.Kill(shimState(t, dir, gone).ShimPid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the shim killed", func() bool {
				_, err := (&shimClient{dir: filepath.Join(dir, "pods", gone)}).call(context.Background(), shimRequest{Op: "state"})
				return err != nil
			})
			goneIDs := []string{gone}
			if bb != "" {
				goneIDs = append(goneIDs, sidecarID(gone, "sidecar"))
			}
			if n := len(cgroupsOf(goneIDs)); h != "process" && n == 0 {
				t.Errorf("the killed process left no cgroups of its pods (the test would prove nothing)")
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			adopted, err := rt.Recover(ctx)
			if err != nil {
				t.Fatalf("recover: %v", err)
			}
			if len(adopted) != 1 || adopted[0].ID != kept || adopted[0].Labels["test"] == "" {
				t.Fatalf("adopted %+v, want %s", adopted, kept)
			}
			mounts, nss, cs = e.leftovers(gone)
			if mounts != 0 || nss != 0 || cs != 0 {
				t.Errorf("after Recover, of the pod whose shim was gone: %d mounts, %d namespaces, %d containers", mounts, nss, cs)
			}
			if _, err := os.Stat(filepath.Join(dir, "pods", gone)); !os.IsNotExist(err) {
				t.Errorf("the directory of the pod whose shim was gone: %v", err)
			}
			if ok, err := processesOf(gone); err != nil || ok {
				t.Errorf("pod %s still has processes (%v)", gone, err)
			}
			if left := cgroupsOf(goneIDs); len(left) != 0 {
				t.Errorf("cgroups after Recover: %v", left)
			}

			// The adopted pod: the same containers (pids), ready again, its
			// output still in its log, and it stops as any pod does.
			e.waitStatus(kept, time.Minute, "adopted pod ready", ready)
			after := shimState(t, dir, kept)
			if !samePids(before, after) {
				t.Errorf("containers of the adopted pod: %+v before, %+v after", before.Containers, after.Containers)
			}
			e.get(kept, "/log?msg=after-adoption")
			eventually(t, 10*time.Second, "output after adoption in the log", func() bool { return strings.Contains(e.logs(kept), "after-adoption") })
			if err := rt.Stop(ctx, kept, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if m, n, c := e.leftovers(base); m != 0 || n != 0 || c != 0 {
				t.Errorf("after stopping the adopted pod: %d mounts, %d namespaces, %d containers", m, n, c)
			}

			// A pod runs again under the new Runtime.
			id := base + "-again"
			e.run(e.spec(id, h, ref))
			e.waitStatus(id, time.Minute, "ready again", ready)
		})
	}
}

// shimState asks pod id's shim what it runs.
func shimState(t *testing.T, dir, id string) shimResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := (&shimClient{dir: filepath.Join(dir, "pods", id)}).call(ctx, shimRequest{Op: "state"})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func samePids(a, b shimResponse) bool {
	pids := map[string]int{}
	for _, c := range a.Containers {
		pids[c.ID] = c.Pid
	}
	if len(a.Containers) == 0 || len(a.Containers) != len(b.Containers) {
		return false
	}
	for _, c := range b.Containers {
		if pids[c.ID] != c.Pid || c.Exited {
			return false
		}
	}
	return true
}

// processesOf reports whether a process runs whose command line names id
// (a runtime monitor or sandbox of that container).
func processesOf(id string) (bool, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), id) {
			return true, nil
		}
	}
	return false, nil
}
