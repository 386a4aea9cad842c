package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// busyboxApplets are linked into every test rootfs.
var busyboxApplets = []string{"sh", "echo", "cat", "id", "sleep", "true", "env", "pwd", "printf", "tail", "head", "httpd", "readlink", "ls"}

// requireRuntime skips the test when what it needs is missing: root, a static
// busybox, and the runtime binary (none for "process"). When CI is set nothing
// may be missing, and the test fails instead.
func requireRuntime(t testing.TB, name string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if !isStatic(probeBusybox) {
		missing = append(missing, "a static "+probeBusybox+" (apt-get install busybox-static)")
	}
	if name != "process" {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name+" (apt-get install "+name+")")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s tests need %s", name, strings.Join(missing, ", "))
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: nothing may skip)")
	}
	t.Skip(msg)
}

// handlerFactory opens a handler on a state root; opening it again on the
// same root is how the tests simulate a daemon restart.
type handlerFactory func(t testing.TB, root string) Handler

var handlerFactories = []struct {
	name string
	open handlerFactory
}{
	{"runc", func(t testing.TB, root string) Handler {
		return mustOCI(t, OCIConfig{Binary: "runc", Root: root})
	}},
	{"runsc", func(t testing.TB, root string) Handler {
		// See the package documentation for why --network=host and
		// ManageCgroups.
		return mustOCI(t, OCIConfig{Binary: "runsc", Root: root, Args: []string{"--network=host"}, ManageCgroups: true})
	}},
	{"process", func(t testing.TB, root string) Handler { return asNobody{NewProcess(root)} }},
}

// asNobody is the process handler for the shared suite, whose bundles run
// as root: the process handler refuses root (TestProcessRefusesRoot), so
// their uid 0 becomes nobody's before Create.
type asNobody struct{ Handler }

func (h asNobody) Create(ctx context.Context, id, bundle string, cio IO) (Container, error) {
	file := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(file)
	if err == nil {
		var spec specs.Spec
		if json.Unmarshal(b, &spec) == nil && spec.Process != nil && spec.Process.User.UID == 0 {
			spec.Process.User = specs.User{UID: 65534, GID: 65534}
			if b, err = json.Marshal(&spec); err == nil {
				err = os.WriteFile(file, b, 0o644)
			}
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return h.Handler.Create(ctx, id, bundle, cio)
}

func mustOCI(t testing.TB, cfg OCIConfig) Handler {
	t.Helper()
	h, err := NewOCI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var (
	busyboxOnce  sync.Once
	busyboxBytes []byte
	busyboxErr   error
	// busyboxCopy is one copy of busybox, written once, that rootfs
	// trees hard-link: a copy written per test could still be open for
	// writing in a child that another test forked at that moment, and
	// exec of it would fail with ETXTBSY ("text file busy").
	busyboxCopy string
)

func TestMain(m *testing.M) {
	// Prepare needs a subreaper, as the pod's shim is (pkg/pod).
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		os.Exit(1)
	}
	stopReaper := reapOnSIGCHLD()
	code := m.Run()
	stopReaper()
	if busyboxCopy != "" {
		os.RemoveAll(filepath.Dir(busyboxCopy))
	}
	os.Exit(code)
}

// makeRootfs makes a minimal rootfs with busybox and its applets.
func makeRootfs(t testing.TB, rootfs string) {
	t.Helper()
	busyboxOnce.Do(func() {
		busyboxBytes, busyboxErr = os.ReadFile(probeBusybox)
		if busyboxErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "knbox-runtime-busybox-")
		if err != nil {
			busyboxErr = err
			return
		}
		busyboxCopy = filepath.Join(dir, "busybox")
		busyboxErr = os.WriteFile(busyboxCopy, busyboxBytes, 0o755)
	})
	if busyboxErr != nil {
		t.Fatal(busyboxErr)
	}
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "work", "www", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(busyboxCopy, filepath.Join(rootfs, "bin", "busybox")); err != nil {
		// Another file system: a copy, with the small risk above.
		if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), busyboxBytes, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "www", "index.html"), []byte("hello from the container\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// busybox sh reopens a background job's stdin from /dev/null. The OCI
	// runtimes mount a /dev over this one; the process handler mounts
	// nothing, so the rootfs brings its own.
	if err := unix.Mknod(filepath.Join(rootfs, "dev", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(rootfs, "dev", "null"), 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
}

// testSpec is a minimal valid OCI configuration for a busybox container, in
// the shape runc's default spec has: its own PID, mount, IPC, UTS and network
// namespaces, the usual /proc, /dev, /sys and /tmp mounts, few capabilities,
// no new privileges, masked and read-only paths. Only the tests use it; the
// production spec (the runtime contract) is built elsewhere.
func testSpec(args ...string) *specs.Spec {
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: args,
			Env:  []string{"PATH=/bin", "HOME=/"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "knbox-test",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}

// newBundle writes a bundle with its own rootfs and the spec that args and
// opts make.
func newBundle(t testing.TB, args []string, opts ...func(*specs.Spec)) string {
	t.Helper()
	dir := t.TempDir()
	makeRootfs(t, filepath.Join(dir, "rootfs"))
	spec := testSpec(args...)
	for _, o := range opts {
		o(spec)
	}
	writeSpec(t, dir, spec)
	return dir
}

func writeSpec(t testing.TB, dir string, spec *specs.Spec) {
	t.Helper()
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// create creates a container that t.Cleanup deletes, whatever happens.
func create(t testing.TB, ctx context.Context, h Handler, id, bundle string, cio IO) Container {
	t.Helper()
	c, err := h.Create(ctx, id, bundle, cio)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Delete(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return c
}

// testContext bounds a test.
func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is an io.Writer that a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// await waits until the output contains s.
func (b *syncBuffer) await(ctx context.Context, s string) error {
	for {
		b.mu.Lock()
		if strings.Contains(b.buf.String(), s) {
			b.mu.Unlock()
			return nil
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q in output %q: %w", s, b.String(), ctx.Err())
		}
	}
}

// newNetns makes a network namespace with its loopback up, bind-mounted on a
// file, as knbox's network part gives each instance.
func newNetns(t testing.TB) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// The thread moves to the new namespace and is never unlocked: it
		// exits with this goroutine.
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			errc <- err
			return
		}
		ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			errc <- fmt.Errorf("loopback up: %w", err)
			return
		}
		errc <- unix.Mount("/proc/thread-self/ns/net", file, "", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(file, unix.MNT_DETACH) })
	return file
}

// dialInNetns connects to addr from inside the network namespace at ns; the
// socket stays in that namespace.
func dialInNetns(ctx context.Context, ns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	rc := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			rc <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(ns)
		if err != nil {
			goruntime.UnlockOSThread()
			rc <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			rc <- result{err: err}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		rc <- result{c, err}
	}()
	r := <-rc
	return r.c, r.err
}

// eventually polls cond until it holds or ctx is done; for conditions that
// offer nothing to wait on (a port that starts listening).
func eventually(ctx context.Context, cond func() error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
