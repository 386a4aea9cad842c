package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestHandlers runs the shared suite against every handler.
func TestHandlers(t *testing.T) {
	for _, f := range handlerFactories {
		t.Run(f.name, func(t *testing.T) {
			requireRuntime(t, f.name)
			testHandler(t, f.open)
		})
	}
}

// testHandler is the suite every Handler must pass. Each case gets a state
// root of its own, so that Recover sees only its containers.
func testHandler(t *testing.T, open handlerFactory) {
	cases := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, h Handler, root string, open handlerFactory)
	}{
		{"Output", testOutput},
		{"StdinEOF", testStdinEOF},
		{"ExitCode", testExitCode},
		{"SIGTERMTrapped", testSIGTERM},
		{"SIGKILL", testSIGKILL},
		{"WaitConcurrent", testWaitConcurrent},
		{"DeleteIdempotent", testDelete},
		{"EnvCwdArgs", testEnvCwdArgs},
		{"User", testUser},
		{"ReadonlyRootfs", testReadonlyRootfs},
		{"NetworkNamespace", testNetworkNamespace},
		{"Recover", testRecover},
		{"RemoveProbeLeftovers", testRemoveProbeLeftovers},
		{"CreateFails", testCreateFails},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			h := open(t, root)
			// Registered first, so it runs after every container's Delete:
			// nothing may be left behind in the state root.
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cs, err := open(t, root).Recover(ctx)
				if err != nil {
					t.Errorf("recover after cleanup: %v", err)
				}
				for _, c := range cs {
					t.Errorf("container %s left behind", c.ID())
					_ = c.Delete(ctx)
				}
			})
			tc.run(t, testContext(t, 90*time.Second), h, root, open)
		})
	}
}

func wait(t *testing.T, ctx context.Context, c Container) ExitStatus {
	t.Helper()
	st, err := c.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return st
}

func testOutput(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	var stdout, stderr syncBuffer
	b := newBundle(t, []string{"sh", "-c", "echo out; echo err >&2; echo more out"})
	c := create(t, ctx, h, "output", b, IO{Stdout: &stdout, Stderr: &stderr})
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Errorf("status %v, want exit code 0", st)
	}
	if got, want := stdout.String(), "out\nmore out\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := stderr.String(), "err\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func testStdinEOF(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	var stdout syncBuffer
	b := newBundle(t, []string{"sh", "-c", `if read -r line; then echo "read:$line"; else echo eof; fi; cat; echo cat-done`})
	c := create(t, ctx, h, "stdin", b, IO{Stdout: &stdout})
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Errorf("status %v, want exit code 0", st)
	}
	if got, want := stdout.String(), "eof\ncat-done\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

func testExitCode(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	for _, code := range []int{0, 3, 255} {
		b := newBundle(t, []string{"sh", "-c", fmt.Sprintf("exit %d", code)})
		c := create(t, ctx, h, fmt.Sprintf("exit-%d", code), b, IO{})
		st := wait(t, ctx, c)
		if st.Code != code || st.Signal != 0 || st.OOMKilled {
			t.Errorf("status %+v, want exit code %d", st, code)
		}
		if st.At.IsZero() {
			t.Errorf("status %+v has no time", st)
		}
	}
}

func testSIGTERM(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	var stdout syncBuffer
	// "wait" returns as soon as a trapped signal arrives.
	b := newBundle(t, []string{"sh", "-c", `trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 60 & wait $!; done`})
	c := create(t, ctx, h, "sigterm", b, IO{Stdout: &stdout})
	if err := stdout.await(ctx, "ready\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st := wait(t, ctx, c)
	if st.Code != 7 || st.Signal != 0 {
		t.Errorf("status %+v, want exit code 7", st)
	}
	if got := stdout.String(); got != "ready\nterm\n" {
		t.Errorf("stdout %q", got)
	}
	// Killing an exited container is a no-op.
	if err := c.Kill(ctx, syscall.SIGTERM); err != nil {
		t.Errorf("kill after exit: %v", err)
	}
}

func testSIGKILL(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	b := newBundle(t, []string{"sleep", "60"})
	c := create(t, ctx, h, "sigkill", b, IO{})
	if c.Pid() <= 0 {
		t.Errorf("pid %d", c.Pid())
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := wait(t, ctx, c)
	if st.Code != 137 || st.Signal != syscall.SIGKILL || st.OOMKilled {
		t.Errorf("status %+v, want SIGKILL (137), not OOM", st)
	}
}

func testWaitConcurrent(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	b := newBundle(t, []string{"sleep", "60"})
	c := create(t, ctx, h, "wait", b, IO{})

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait on a running container with an expiring context: %v, want deadline exceeded", err)
	}

	const n = 8
	var wg sync.WaitGroup
	sts := make([]ExitStatus, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { sts[i], errs[i] = c.Wait(ctx) })
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || sts[i] != sts[0] || sts[i].Signal != syscall.SIGKILL {
			t.Errorf("waiter %d: %+v, %v; waiter 0: %+v", i, sts[i], errs[i], sts[0])
		}
	}
	if st := wait(t, ctx, c); st != sts[0] {
		t.Errorf("wait after exit: %+v, want %+v", st, sts[0])
	}
}

func testDelete(t *testing.T, ctx context.Context, h Handler, root string, open handlerFactory) {
	// A running container: Delete kills it.
	b := newBundle(t, []string{"sleep", "60"})
	running := create(t, ctx, h, "running", b, IO{})
	if err := running.Delete(ctx); err != nil {
		t.Fatalf("delete running: %v", err)
	}
	st, err := running.Wait(ctx)
	if err != nil || st.Signal != syscall.SIGKILL {
		t.Errorf("wait after delete: %+v, %v; want SIGKILL", st, err)
	}
	if err := running.Delete(ctx); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if err := running.Kill(ctx, syscall.SIGTERM); err != nil {
		t.Errorf("kill after delete: %v", err)
	}

	// An exited one.
	b = newBundle(t, []string{"true"})
	exited := create(t, ctx, h, "exited", b, IO{})
	wait(t, ctx, exited)
	for i := range 2 {
		if err := exited.Delete(ctx); err != nil {
			t.Errorf("delete %d: %v", i, err)
		}
	}

	// The id is free again.
	again := create(t, ctx, h, "exited", b, IO{})
	wait(t, ctx, again)
	if err := again.Delete(ctx); err != nil {
		t.Errorf("delete reused id: %v", err)
	}

	// A handler opened afterwards finds nothing.
	cs, err := open(t, root).Recover(ctx)
	if err != nil || len(cs) != 0 {
		t.Errorf("recover after delete: %d containers, %v", len(cs), err)
	}
}

func testEnvCwdArgs(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	env := []string{"PATH=/bin", "HOME=/home/app", "GREETING=hello  world", "EMPTY=", "QUOTE=it's \"quoted\""}
	withEnv := func(s *specs.Spec) { s.Process.Env = env; s.Process.Cwd = "/work" }

	var stdout syncBuffer
	b := newBundle(t, []string{"env"}, withEnv)
	c := create(t, ctx, h, "env", b, IO{Stdout: &stdout})
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Fatalf("env: %v", st)
	}
	got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	slices.Sort(got)
	want := slices.Sorted(slices.Values(env))
	if !slices.Equal(got, want) {
		t.Errorf("environment\n got %q\nwant %q", got, want)
	}

	stdout = syncBuffer{}
	args := []string{"/bin/sh", "-c", `printf '[%s]' "$0" "$@"; echo; pwd`, "zero", "a  b", "", "c'd", "$HOME", "*"}
	b = newBundle(t, args, withEnv)
	c = create(t, ctx, h, "args", b, IO{Stdout: &stdout})
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Fatalf("args: %v", st)
	}
	if got, want := stdout.String(), "[zero][a  b][][c'd][$HOME][*]\n/work\n"; got != want {
		t.Errorf("args and cwd: %q, want %q", got, want)
	}
}

func testUser(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	var stdout, stderr syncBuffer
	b := newBundle(t, []string{"sh", "-c", "id -u; id -g; id -G"}, func(s *specs.Spec) {
		s.Process.User = specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{2000}}
	})
	c := create(t, ctx, h, "user", b, IO{Stdout: &stdout, Stderr: &stderr})
	if st := wait(t, ctx, c); st.Code != 0 {
		t.Fatalf("status %v: %s", st, stderr.String())
	}
	lines := strings.Split(stdout.String(), "\n")
	if len(lines) < 3 || lines[0] != "1000" || lines[1] != "1001" || !slices.Contains(strings.Fields(lines[2]), "2000") {
		t.Errorf("id: %q, want uid 1000, gid 1001, groups with 2000", stdout.String())
	}
}

func testReadonlyRootfs(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	var stdout, stderr syncBuffer
	b := newBundle(t, []string{"sh", "-c", "echo x > /probe && echo wrote; echo y > /tmp/probe && echo tmp-ok"}, func(s *specs.Spec) {
		s.Root.Readonly = true
	})
	// Writable by all, so that only the read-only mount refuses the write
	// (the process handler runs the suite as nobody).
	if err := os.Chmod(b+"/rootfs", 0o777); err != nil {
		t.Fatal(err)
	}
	c := create(t, ctx, h, "readonly", b, IO{Stdout: &stdout, Stderr: &stderr})
	wait(t, ctx, c)
	if strings.Contains(stdout.String(), "wrote") || !strings.Contains(stderr.String(), "Read-only file system") {
		t.Errorf("writing to a read-only root: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if _, err := os.Stat(b + "/rootfs/probe"); err == nil {
		t.Error("the write reached the bundle's rootfs")
	}
	if _, ok := h.(asNobody); !ok && !strings.Contains(stdout.String(), "tmp-ok") {
		// The process handler does not mount /tmp; the OCI runtimes do.
		t.Errorf("/tmp not writable: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// testNetworkNamespace checks that the container joins the network namespace
// the spec names, and that a server listening on its loopback can be dialled
// from that namespace, as knbox's router does.
func testNetworkNamespace(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	ns := newNetns(t)
	b := newBundle(t, []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/www"}, func(s *specs.Spec) {
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = ns
			}
		}
	})
	var stderr syncBuffer
	c := create(t, ctx, h, "netns", b, IO{Stderr: &stderr})

	var want, got unix.Stat_t
	if err := unix.Stat(ns, &want); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", c.Pid()), &got); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Ino || got.Dev != want.Dev {
		t.Errorf("pid %d is in network namespace %d, want %d", c.Pid(), got.Ino, want.Ino)
	}

	var body string
	err := eventually(ctx, func() error {
		conn, err := dialInNetns(ctx, ns, "127.0.0.1:8080")
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: test\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		bb, err := io.ReadAll(resp.Body)
		body = string(bb)
		return err
	})
	if err != nil {
		t.Fatalf("http from the namespace's loopback: %v (stderr %q)", err, stderr.String())
	}
	if body != "hello from the container\n" {
		t.Errorf("body %q", body)
	}
}

func testRecover(t *testing.T, ctx context.Context, h Handler, root string, open handlerFactory) {
	var stdout syncBuffer
	b := newBundle(t, []string{"sh", "-c", "echo started; exec sleep 60"})
	orig := create(t, ctx, h, "survivor", b, IO{Stdout: &stdout})
	if err := stdout.await(ctx, "started"); err != nil {
		t.Fatal(err)
	}

	// A new handler value on the same state root, as after a daemon restart.
	cs, err := open(t, root).Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID() != "survivor" {
		ids := []string{}
		for _, c := range cs {
			ids = append(ids, c.ID())
		}
		t.Fatalf("recovered %q, want [survivor]", ids)
	}
	c := cs[0]
	if c.Pid() != orig.Pid() {
		t.Errorf("recovered pid %d, want %d", c.Pid(), orig.Pid())
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait on the running adopted container: %v, want deadline exceeded", err)
	}
	if err := c.Kill(ctx, syscall.SIGKILL); err != nil {
		t.Fatalf("kill adopted: %v", err)
	}
	if _, err := c.Wait(ctx); err != nil {
		t.Fatalf("wait adopted: %v", err)
	}
	if st := wait(t, ctx, orig); st.Signal != syscall.SIGKILL {
		t.Errorf("original handle: %+v, want SIGKILL", st)
	}
	for i := range 2 {
		if err := c.Delete(ctx); err != nil {
			t.Errorf("delete adopted %d: %v", i, err)
		}
	}
}

// testRemoveProbeLeftovers: after a restart, the probe containers a killed
// daemon left go, and no other container does.
func testRemoveProbeLeftovers(t *testing.T, ctx context.Context, h Handler, root string, open handlerFactory) {
	for _, id := range []string{ProbePrefix + "left", "keeper"} {
		var stdout syncBuffer
		create(t, ctx, h, id, newBundle(t, []string{"sh", "-c", "echo started; exec sleep 60"}), IO{Stdout: &stdout})
		if err := stdout.await(ctx, "started"); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveProbeLeftovers(ctx, open(t, root))
	if err != nil || n != 1 {
		t.Fatalf("RemoveProbeLeftovers = %d, %v; want 1", n, err)
	}
	cs, err := open(t, root).Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID())
	}
	if len(ids) != 1 || ids[0] != "keeper" {
		t.Errorf("after RemoveProbeLeftovers: %q, want [keeper]", ids)
	}
}

func testCreateFails(t *testing.T, ctx context.Context, h Handler, _ string, _ handlerFactory) {
	b := newBundle(t, []string{"true"})
	if _, err := h.Create(ctx, "../escape", b, IO{}); err == nil || !strings.Contains(err.Error(), "invalid container id") {
		t.Errorf("bad id: %v", err)
	}
	if _, err := h.Create(ctx, "nobundle", t.TempDir(), IO{}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no config.json: %v", err)
	}

	// A missing executable: runc and process refuse in Create; runsc starts
	// its sandbox first and fails the container. Either way the reason is
	// there, with the handler's name and the id.
	b = newBundle(t, []string{"/bin/no-such-program"})
	var stderr syncBuffer
	c, err := h.Create(ctx, "missing", b, IO{Stderr: &stderr})
	if err != nil {
		for _, s := range []string{h.Name(), "missing", "no-such-program"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
		return
	}
	defer c.Delete(ctx)
	st := wait(t, ctx, c)
	if st.Code == 0 || !strings.Contains(stderr.String(), "no-such-program") {
		t.Errorf("missing executable: %v, stderr %q", st, stderr.String())
	}
}
