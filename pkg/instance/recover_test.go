package instance

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/runtime"
)

// Environment of the helper process of TestRecoverAfterKill.
const (
	helperEnv = "KNBOX_INSTANCE_HELPER"
	helperDir = "KNBOX_INSTANCE_HELPER_DIR"
	helperH   = "KNBOX_INSTANCE_HELPER_HANDLER"
	helperRef = "KNBOX_INSTANCE_HELPER_IMAGE"
	helperRev = "KNBOX_INSTANCE_HELPER_REVISION"
	helperBB  = "KNBOX_INSTANCE_HELPER_SIDECAR" // the sidecar's image, if any
)

// managerIn opens a Manager on dir as the helper and the test both do, so
// that the second finds what the first left.
func managerIn(t testing.TB, dir, handler string) (*Manager, map[string]runtime.Handler) {
	t.Helper()
	store, err := image.Open(image.Options{Root: filepath.Join(dir, "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]runtime.Handler{handler: newHandler(t, handler, filepath.Join(dir, "handlers"))}
	m, err := New(Options{Images: store, Handlers: hs, StateDir: filepath.Join(dir, "state"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	return m, hs
}

// TestRecoverHelper is the process that TestRecoverAfterKill kills: it runs
// two instances of a revision, says so, and waits to be killed.
func TestRecoverHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return // only as the helper process of TestRecoverAfterKill
	}
	dir, h, ref, name := os.Getenv(helperDir), os.Getenv(helperH), os.Getenv(helperRef), os.Getenv(helperRev)
	m, _ := managerIn(t, dir, h)
	var mutate []func(*servingv1.Revision)
	if bb := os.Getenv(helperBB); bb != "" {
		mutate = append(mutate, withSidecar(bb))
	}
	rev := newRev(t, "ns1", name, h, ref, mutate...)
	rev.Status.ContainerStatuses = resolveAll(t, m, rev)
	m.SetScale("ns1", name, 2)
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := m.Ensure(context.Background(), rev)
		if err != nil {
			t.Fatal(err)
		}
		if st.Actual == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("READY %s\n", strings.Join(endpointIDs(m.Endpoints("ns1", name)), " "))
	time.Sleep(2 * time.Minute) // killed long before
}

// TestRecoverAfterKill starts instances in another process, kills it with
// SIGKILL (so nothing is cleaned up), and checks that a new Manager's
// Recover removes every container (sidecars too, under runc and runsc),
// mount, namespace and directory it left, and that the revision then runs
// again.
func TestRecoverAfterKill(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			dir := t.TempDir()
			name := uniqueName("recover-" + h)
			bb, perInstance := "", 1
			if h != "process" { // which runs one container per instance
				bb, perInstance = busyboxImage(t), 2
			}

			cmd := exec.Command(os.Args[0], "-test.run=^TestRecoverHelper$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"=1", helperDir+"="+dir, helperH+"="+h, helperRef+"="+ref, helperRev+"="+name, helperBB+"="+bb)
			cmd.Stderr = testWriter{t}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			t.Cleanup(func() {
				if !killed {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			lines := bufio.NewScanner(out)
			var ids []string
			for lines.Scan() {
				if rest, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
					ids = strings.Fields(rest)
					break
				}
				t.Log("helper: " + lines.Text())
			}
			if len(ids) != 2 {
				t.Fatalf("the helper did not start 2 instances (%v)", ids)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed = true

			m, hs := managerIn(t, dir, h)
			e := &env{t: t, dir: dir, m: m, handlers: hs}
			mounts, nss, cs := e.leftovers(name)
			t.Logf("left by the killed process: %d mounts, %d namespaces, %d containers", mounts, nss, cs)
			if mounts < 2*perInstance || nss != 2 || cs != 2*perInstance {
				t.Errorf("the killed process left %d mounts, %d namespaces, %d containers; want its 2 instances' with %d containers each (the test would prove nothing)", mounts, nss, cs, perInstance)
			}
			cgIDs := slices.Clone(ids)
			if bb != "" {
				for _, id := range ids {
					cgIDs = append(cgIDs, sidecarID(id, "sidecar"))
				}
			}
			if n := len(cgroupsOf(cgIDs)); h != "process" && n == 0 {
				t.Errorf("the killed process left no cgroups of its instances (the test would prove nothing)")
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Recover(ctx); err != nil {
				t.Fatalf("recover: %v", err)
			}
			mounts, nss, cs = e.leftovers(name)
			if mounts != 0 || nss != 0 || cs != 0 {
				t.Errorf("after Recover: %d mounts, %d namespaces, %d containers", mounts, nss, cs)
			}
			ents, err := os.ReadDir(filepath.Join(dir, "state", "instances"))
			if err != nil || len(ents) != 0 {
				t.Errorf("instance directories after Recover: %v (%v)", ents, err)
			}
			for _, id := range ids {
				if ok, err := processesOf(id); err != nil || ok {
					t.Errorf("instance %s still has processes (%v)", id, err)
				}
			}
			if left := cgroupsOf(cgIDs); len(left) != 0 {
				t.Errorf("cgroups after Recover: %v", left)
			}

			// The revision runs again under the new Manager.
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				go e.drainAll(ctx)
				_ = m.Close(ctx)
			})
			rev := newRev(t, "ns1", name, h, ref)
			e.resolveAndEnsure(rev)
			st := e.waitState(rev, time.Minute, "ready again", ready)
			if st.Actual != 1 {
				t.Errorf("state %+v", st)
			}
		})
	}
}

// cgroupsOf lists the cgroups of the instances ids (at /knbox/<id>, in any
// hierarchy).
func cgroupsOf(ids []string) []string {
	var dirs []string
	for _, id := range ids {
		d, _ := filepath.Glob("/sys/fs/cgroup/*/knbox/" + id)
		dirs = append(dirs, d...)
	}
	return dirs
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
