// Package e2e drives the built knbox binary as a user does: `knbox serve`,
// then kubectl and knbox's own CLI, over real HTTPS on loopback.
package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var knboxBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "knbox-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	knboxBin = filepath.Join(dir, "knbox")
	build := exec.Command("go", "build", "-o", knboxBin, "github.com/knbox/knbox/cmd/knbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build knbox:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of a command the test needs. Where it is
// missing the test skips, except in CI, where everything must run.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI (hack/install-deps.sh installs it): %v", name, err)
	}
	t.Skipf("%s not installed (run hack/install-deps.sh)", name)
	return ""
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// server is one running `knbox serve`.
type server struct {
	t        *testing.T
	dir      string
	apiAddr  string
	httpAddr string
	// registryAddr is the embedded registry's address; "" if it is on a
	// port the test does not know.
	registryAddr string
	cmd          *exec.Cmd
	logMu        sync.Mutex
	log          strings.Builder
	exited       chan struct{}
}

// startServer runs knbox serve on dir with loopback addresses and waits
// until it answers.
func startServer(t *testing.T, dir, apiAddr string) *server {
	t.Helper()
	return startServerWith(t, dir, apiAddr)
}

// startServerWith is startServer with extra `knbox serve` arguments, e.g.
// "--config", path. Such a server stops its instances when it exits and
// keeps no socket for a successor, so that a test leaves nothing behind
// (restart_test.go starts servers that do, with startServerAt).
func startServerWith(t *testing.T, dir, apiAddr string, extra ...string) *server {
	t.Helper()
	pick := apiAddr == ""
	for attempt := 1; ; attempt++ {
		if pick {
			apiAddr = freePort(t)
		}
		s, err := tryStartServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: freePort(t), registryAddr: freePort(t), bin: knboxBin,
			args: append([]string{"--keep-instances=false", "--handover-timeout=0s"}, extra...)})
		// freePort's ports are free when picked, not when knbox binds
		// them: a parallel test may take one in between. Then new ones.
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			t.Logf("retrying with other ports: %v", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// serverOpts say how startServerAt runs `knbox serve`.
type serverOpts struct {
	dir, apiAddr, httpAddr string
	// registryAddr is the embedded registry's; "": a port of the
	// system's choice (not 5000, which parallel tests would share).
	registryAddr string
	bin          string   // the knbox binary
	args         []string // after serve --data-dir --api-addr --http-addr
	// sockets, if set, are passed as systemd passes activated sockets
	// (LISTEN_FDS, LISTEN_FDNAMES api:http).
	sockets []*os.File
}

// startServerAt runs knbox serve as o says and waits until it answers.
func startServerAt(t *testing.T, o serverOpts) *server {
	t.Helper()
	s, err := tryStartServerAt(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryStartServerAt is startServerAt, with an error if knbox serve exits
// before it answers.
func tryStartServerAt(t *testing.T, o serverOpts) (*server, error) {
	t.Helper()
	dir, apiAddr := o.dir, o.apiAddr
	kc := filepath.Join(dir, "kubeconfig")
	_ = os.Remove(kc)
	s := &server{t: t, dir: dir, apiAddr: apiAddr, httpAddr: o.httpAddr, registryAddr: o.registryAddr, exited: make(chan struct{})}
	regAddr := o.registryAddr
	if regAddr == "" {
		regAddr = "127.0.0.1:0"
	}
	args := append([]string{"serve", "--data-dir", dir, "--api-addr", apiAddr, "--http-addr", s.httpAddr, "--registry-addr", regAddr}, o.args...)
	s.cmd = exec.Command(o.bin, args...)
	if len(o.sockets) > 0 {
		// As systemd does: LISTEN_PID is the pid of knbox itself, which a
		// shell that execs it has.
		s.cmd = exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, o.bin}, args...)...)
		s.cmd.ExtraFiles = o.sockets
		s.cmd.Env = append(os.Environ(), fmt.Sprintf("LISTEN_FDS=%d", len(o.sockets)), "LISTEN_FDNAMES=api:http")
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.logMu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.logMu.Unlock()
		}
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("knbox serve log:\n%s", s.logs())
		}
	})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("knbox serve exited early:\n%s", s.logs())
		default:
		}
		if _, err := os.Stat(kc); err == nil {
			if resp, err := client.Get("https://" + apiAddr + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return s, nil
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("knbox serve not ready after 60s:\n%s", s.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) logs() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// kill sends SIGKILL to the server process (ours, by PID) and waits.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	// A server that stops its instances (--keep-instances=false) removes
	// their processes, mounts and cgroups before it exits; on a loaded
	// machine that takes seconds per instance, and a SIGKILL meanwhile
	// leaves them behind. So the wait is generous.
	select {
	case <-s.exited:
	case <-time.After(90 * time.Second):
		s.t.Logf("knbox serve did not stop 90s after SIGTERM; killing it")
		s.kill()
	}
}

// run executes a command with a deadline and returns combined output.
func run(t *testing.T, env []string, stdin string, name string, args ...string) (string, error) {
	t.Helper()
	// Longer than the longest --timeout a test gives a command (120s), so
	// the command's own timeout, with its message, comes first.
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
