package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireRoot skips a test that needs root, unless CI is set: CI runs as
// root, so there it fails instead.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CAP_SYS_ADMIN), and CI is set")
		}
		t.Skip("needs root (CAP_SYS_ADMIN)")
	}
}

// testRoot returns a fresh root for namespaces and unmounts it (prepareRoot
// binds it onto itself) when the test ends.
func testRoot(t testing.TB) string {
	t.Helper()
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() {
		for range 4 {
			if unix.Unmount(root, unix.MNT_DETACH) != nil {
				break
			}
		}
	})
	return root
}

func create(t testing.TB, root, name string) *NS {
	t.Helper()
	ns, err := CreateIn(root, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	return ns
}

// serve answers each connection on l with greeting and closes it.
func serve(t testing.TB, l net.Listener, greeting string) {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, greeting+"\n")
			}()
		}
	}()
}

// greet reads the greeting from c and closes it.
func greet(t testing.TB, c net.Conn) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	s, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read greeting: %v", err)
	}
	return strings.TrimSpace(s)
}

func port(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

func TestCreateDialListen(t *testing.T) {
	root := testRoot(t)
	ns := create(t, root, "hello-00001-1")
	if ns.Name != "hello-00001-1" || ns.Path != filepath.Join(root, "hello-00001-1") {
		t.Fatalf("ns = %+v", ns)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(ns.Path, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		t.Fatalf("%s is not a namespace file: type %x, %v", ns.Path, st.Type, err)
	}

	l, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, "inside")
	c, err := ns.Dial(context.Background(), "tcp", "127.0.0.1:"+port(l))
	if err != nil {
		t.Fatal(err)
	}
	if got := greet(t, c); got != "inside" {
		t.Errorf("greeting %q", got)
	}

	// IPv6 loopback is up too.
	l6, err := ns.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l6, "inside6")
	c, err = ns.Dial(context.Background(), "tcp6", "[::1]:"+port(l6))
	if err != nil {
		t.Fatal(err)
	}
	if got := greet(t, c); got != "inside6" {
		t.Errorf("greeting %q", got)
	}

	// The loopback is the only interface, and it is up; low ports are
	// open to non-root instances.
	err = ns.in(func(func() error) error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
			return fmt.Errorf("interfaces %v", ifs)
		}
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) != "0" {
			return fmt.Errorf("ip_unprivileged_port_start = %s", b)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	checkThreadsAtHome(t)
}

func TestCreateRefusesBadAndTakenNames(t *testing.T) {
	root := testRoot(t)
	create(t, root, "taken")
	if _, err := CreateIn(root, "taken"); !errors.Is(err, ErrExist) {
		t.Errorf("second Create: err = %v, want ErrExist", err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "../x", "-x", strings.Repeat("x", 300)} {
		if _, err := CreateIn(root, name); err == nil {
			t.Errorf("Create(%q) succeeded", name)
		}
	}
}

// The host's loopback and the namespace's are two different networks: a
// port in one is not reachable from the other, and both can use one port.
func TestIsolation(t *testing.T) {
	root := testRoot(t)
	ns := create(t, root, "isolated")

	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, host, "host")
	p := port(host)

	// Nothing listens on the host's port inside the namespace.
	if _, err := ns.Dial(context.Background(), "tcp", "127.0.0.1:"+p); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial the host's port from inside: err = %v, want connection refused", err)
	}
	// The same port is free inside.
	inside, err := ns.Listen("tcp", "127.0.0.1:"+p)
	if err != nil {
		t.Fatalf("listen on the host's port inside: %v", err)
	}
	serve(t, inside, "inside")
	c, err := ns.Dial(context.Background(), "tcp", "127.0.0.1:"+p)
	if err != nil {
		t.Fatal(err)
	}
	if got := greet(t, c); got != "inside" {
		t.Errorf("inside: greeting %q", got)
	}
	c, err = net.Dial("tcp", "127.0.0.1:"+p)
	if err != nil {
		t.Fatal(err)
	}
	if got := greet(t, c); got != "host" {
		t.Errorf("host: greeting %q", got)
	}

	// A port only the namespace listens on is refused from the host.
	only, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, only, "only")
	q := port(only)
	probe, err := net.Listen("tcp", "127.0.0.1:"+q) // proves the host does not use it
	if err != nil {
		t.Fatalf("the host has port %s in use too: %v", q, err)
	}
	probe.Close()
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+q, 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial the namespace's port from the host: err = %v, want connection refused", err)
	}

	// Two namespaces are isolated from each other too.
	other := create(t, root, "other")
	if _, err := other.Dial(context.Background(), "tcp", "127.0.0.1:"+q); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial one namespace's port from another: err = %v, want connection refused", err)
	}
	checkThreadsAtHome(t)
}

func TestDialRefusesNonLoopback(t *testing.T) {
	ns := &NS{Name: "none", Path: "/nonexistent"} // never opened: refused before
	for _, tt := range []struct{ network, addr string }{
		{"tcp", "10.0.0.1:80"},
		{"tcp", "192.0.2.1:80"},
		{"tcp", "0.0.0.0:80"},
		{"tcp", "[2001:db8::1]:80"},
		{"tcp", "localhost:80"}, // names are not resolved
		{"tcp", "example.com:80"},
		{"udp", "127.0.0.1:53"},
		{"unix", "/run/x.sock"},
		{"tcp", "127.0.0.1"},
	} {
		if _, err := ns.Dial(context.Background(), tt.network, tt.addr); err == nil || strings.Contains(err.Error(), "nonexistent") {
			t.Errorf("Dial(%s, %s): err = %v, want refused before opening the namespace", tt.network, tt.addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "127.0.0.2:0"} {
		if err := checkAddr("tcp", addr, false); err != nil {
			t.Errorf("Listen(%s): %v", addr, err)
		}
	}
	if err := checkAddr("tcp", "[::ffff:127.0.0.1]:80", true); err != nil {
		t.Errorf("v4-mapped loopback: %v", err)
	}
}

func countMounts(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestDeleteRemovesEverything(t *testing.T) {
	root := testRoot(t)
	first := create(t, root, "first") // the root's own mount exists from here on
	before := countMounts(t)

	ns, err := CreateIn(root, "second")
	if err != nil {
		t.Fatal(err)
	}
	if got := countMounts(t); got != before+1 {
		t.Errorf("after Create: %d mounts, want %d", got, before+1)
	}
	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	if got := countMounts(t); got != before {
		t.Errorf("after Delete: %d mounts, want %d", got, before)
	}
	if _, err := os.Lstat(ns.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists: %v", ns.Path, err)
	}
	if err := ns.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := ns.Dial(context.Background(), "tcp", "127.0.0.1:80"); err == nil {
		t.Error("Dial into a deleted namespace succeeded")
	}
	// The name can be used again.
	again := create(t, root, "second")
	if l, err := again.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Error(err)
	} else {
		l.Close()
	}
	if err := first.Delete(); err != nil {
		t.Fatal(err)
	}
	checkThreadsAtHome(t)
}

// A file where a namespace should be (a crash between creating the file and
// mounting): List returns it, Dial fails cleanly, Delete removes it.
func TestStaleEntry(t *testing.T) {
	root := testRoot(t)
	create(t, root, "live")
	stale := filepath.Join(root, "stale")
	if err := os.WriteFile(stale, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "a-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "live" || list[1].Name != "stale" {
		t.Fatalf("List = %v", list)
	}
	if _, err := list[1].Dial(context.Background(), "tcp", "127.0.0.1:80"); err == nil || !errors.Is(err, unix.EINVAL) {
		t.Errorf("Dial into a plain file: err = %v, want EINVAL from setns", err)
	}
	if err := list[1].Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale file still there: %v", err)
	}
	if l, err := List(filepath.Join(root, "missing")); err != nil || l != nil {
		t.Errorf("List of a missing root = %v, %v", l, err)
	}
	checkThreadsAtHome(t)
}

// After a restart, a new process finds the namespaces with List and can dial
// into them: the bind mounts, not this process, keep them.
func TestListAfterRestart(t *testing.T) {
	root := testRoot(t)
	ns := create(t, root, "survivor")
	l, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, "still here")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "KNBOX_NETNS_HELPER_ROOT="+root, "KNBOX_NETNS_HELPER_ADDR=127.0.0.1:"+port(l))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "found survivor: still here") {
		t.Errorf("helper output:\n%s", out)
	}
}

// TestMain runs TestListAfterRestart's other process when asked to.
func TestMain(m *testing.M) {
	if root := os.Getenv("KNBOX_NETNS_HELPER_ROOT"); root != "" {
		os.Exit(restartedProcess(root, os.Getenv("KNBOX_NETNS_HELPER_ADDR")))
	}
	os.Exit(m.Run())
}

// restartedProcess lists the namespaces under root and dials addr in each.
func restartedProcess(root, addr string) int {
	list, err := List(root)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for _, ns := range list {
		c, err := ns.Dial(context.Background(), "tcp", addr)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		s, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("found %s: %s\n", ns.Name, strings.TrimSpace(s))
	}
	return 0
}

func TestConcurrentDials(t *testing.T) {
	root := testRoot(t)
	const namespaces, dials = 5, 50
	var addrs []string
	var nss []*NS
	for i := range namespaces {
		ns := create(t, root, fmt.Sprintf("ns%d", i))
		l, err := ns.Listen("tcp", "127.0.0.1:8080") // every instance on the same port
		if err != nil {
			t.Fatal(err)
		}
		serve(t, l, ns.Name)
		nss, addrs = append(nss, ns), append(addrs, "127.0.0.1:8080")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, dials)
	for i := range dials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := nss[i%namespaces]
			c, err := ns.Dial(ctx, "tcp", addrs[i%namespaces])
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			s, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				errs <- err
				return
			}
			if got := strings.TrimSpace(s); got != ns.Name {
				errs <- fmt.Errorf("dial into %s landed in %s", ns.Name, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkThreadsAtHome(t)
}

// checkThreadsAtHome checks that every thread of this process is in the
// process's own network namespace: no switch leaked.
func checkThreadsAtHome(t testing.TB) {
	t.Helper()
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // the thread ended
		}
		if ns != home {
			t.Errorf("thread %s is in %s, not in the process's %s", task.Name(), ns, home)
		}
	}
}

func BenchmarkDialInNS(b *testing.B) {
	root := testRoot(b)
	ns := create(b, root, "bench")
	l, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	benchDial(b, l, func() (net.Conn, error) { return ns.Dial(context.Background(), "tcp", l.Addr().String()) })
}

func BenchmarkDialLoopback(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var d net.Dialer
	benchDial(b, l, func() (net.Conn, error) { return d.DialContext(context.Background(), "tcp", l.Addr().String()) })
}

// benchDial dials l b.N times; each connection is reset on close, so no
// TIME_WAIT piles up.
func benchDial(b *testing.B, l net.Listener, dial func() (net.Conn, error)) {
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

func BenchmarkCreateDelete(b *testing.B) {
	root := testRoot(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ns, err := CreateIn(root, fmt.Sprintf("b%d", i))
		if err != nil {
			b.Fatal(err)
		}
		if err := ns.Delete(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestListenSharedAndPacket: ListenShared and ListenPacket bind inside the
// namespace, twice on one address (SO_REUSEPORT: a successor beside an
// exiting knbox); plain Listen cannot bind beside them.
func TestListenSharedAndPacket(t *testing.T) {
	root := testRoot(t)
	ns := create(t, root, "shared-1")
	a, err := ns.ListenShared("tcp4", "127.0.0.2:80")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ns.ListenShared("tcp4", "127.0.0.2:80")
	if err != nil {
		t.Fatalf("a second shared listener: %v", err)
	}
	b.Close() // the connection goes to a
	serve(t, a, "shared")
	c, err := ns.Dial(context.Background(), "tcp4", "127.0.0.2:80")
	if err != nil {
		t.Fatal(err)
	}
	if got := greet(t, c); got != "shared" {
		t.Errorf("greeting %q", got)
	}
	if l, err := ns.Listen("tcp4", "127.0.0.2:80"); err == nil {
		l.Close()
		t.Error("a plain listener bound beside a shared one")
	}
	p1, err := ns.ListenPacket("udp4", "127.0.0.2:53")
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	p2, err := ns.ListenPacket("udp4", "127.0.0.2:53")
	if err != nil {
		t.Fatalf("a second packet listener: %v", err)
	}
	p2.Close()
	if _, err := ns.ListenPacket("tcp", "127.0.0.2:53"); err == nil {
		t.Error("ListenPacket took tcp")
	}
	if _, err := ns.ListenPacket("udp4", "192.0.2.1:53"); err == nil {
		t.Error("ListenPacket took a non-loopback address")
	}
}
