package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// Bounds of the restart tests' load: loopback only, a few clients, at most
// maxLoadRequests requests and maxLoadTime.
const (
	loadClients     = 4
	maxLoadRequests = 200000
	maxLoadTime     = 3 * time.Minute
)

// load sends GET requests to the data address with host until stopped,
// counting answers that are not 200 and transport errors as failures.
type load struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	errs       []string
	maxLatency atomic.Int64 // ns
}

func startLoad(t *testing.T, addr, host string) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	deadline := time.Now().Add(maxLoadTime)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: loadClients}}
	for range loadClients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				if time.Now().After(deadline) || l.ok.Load()+l.failed.Load() >= maxLoadRequests {
					return
				}
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
				req.Host = host
				start := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				if d := time.Since(start).Nanoseconds(); d > l.maxLatency.Load() {
					l.maxLatency.Store(d)
				}
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 10 {
						l.errs = append(l.errs, err.Error())
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

// await waits until n more requests succeeded (or fails the test).
func (l *load) await(t *testing.T, n int64, what string) {
	t.Helper()
	target := l.ok.Load() + n
	deadline := time.Now().Add(time.Minute)
	for l.ok.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d requests answered, %d failed (%v)", what, l.ok.Load(), l.failed.Load(), l.errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// runcPids maps the containers runc runs in knbox's state root to their
// pids.
func runcPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(dir, "runtimes", "runc"), "list", "--format", "json").Output()
	if err != nil {
		t.Fatalf("runc list: %v", err)
	}
	var es []struct {
		ID     string `json:"id"`
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &es); err != nil {
		t.Fatalf("runc list: %v: %s", err, out)
	}
	pids := map[string]int{}
	for _, e := range es {
		if e.Status == "running" {
			pids[e.ID] = e.Pid
		}
	}
	return pids
}

func samePids(a, b map[string]int) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for id, pid := range a {
		if b[id] != pid {
			return false
		}
	}
	return true
}

// restartFlags make a server keep its instances and its sockets for the
// next one.
var restartFlags = []string{"--keep-instances=true", "--handover-timeout=30s"}

// restartEnv is a Service of two instances served by a knbox that keeps
// them when it exits.
func restartEnv(t *testing.T) (dir, apiAddr, httpAddr, host string, k *kubectlEnv, srv *server) {
	t.Helper()
	requireTool(t, "runc")
	requireTool(t, "kubectl")
	dir = t.TempDir()
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	apiAddr, httpAddr = freePort(t), freePort(t)
	srv = startServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: httpAddr, bin: knboxBin, args: restartFlags})
	k = &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}
	k.must(fmt.Sprintf(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: steady
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "2"
    spec:
      containers:
      - image: %s/runtime-info:v1
`, reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/steady", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("not ready: %v\n%s", err, out)
	}
	url := k.must("", "get", "ksvc", "steady", "-o", "jsonpath={.status.url}")
	host = strings.TrimPrefix(url, "http://")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	deadline := time.Now().Add(time.Minute)
	for len(runcPids(t, dir)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not 2 instances: %v", runcPids(t, dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return dir, apiAddr, httpAddr, host, k, srv
}

// apiFromInstance awaits an answer of knbox's API to an instance of host
// that calls it from inside (runtime-info's /kubeapi, with its mounted
// ServiceAccount token): 403, since RBAC gives the ServiceAccount default
// nothing, which shows the API authenticated the instance. Adopted
// instances keep reaching the API of the knbox that adopted them.
func apiFromInstance(t *testing.T, httpAddr, host, when string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	var last string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/kubeapi?path=%2Fapi%2Fv1%2Fnamespaces%2Fdefault%2Fconfigmaps", nil)
		req.Host = host
		resp, err := c.Do(req)
		if err == nil {
			var f fetchResult
			err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&f)
			resp.Body.Close()
			if err == nil && f.Status == http.StatusForbidden && strings.Contains(f.Body, "system:serviceaccount:default:default") {
				return
			}
			last = fmt.Sprintf("%+v %v", f, err)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("the API from inside an instance %s: %s", when, last)
}

// stopLeavingInstances sends SIGTERM to a server started with
// restartFlags; it exits once a successor has its sockets (or after the
// handover timeout).
func (s *server) terminate() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
}

// TestRestartUnderLoad: knbox is restarted (SIGTERM, then a new knbox on
// the same data dir, as a service manager restarts it) while clients send
// requests: every instance runs on (same container pids, no cold start),
// the new knbox takes the listening sockets over from the old one, and not
// one request fails. Then knbox is killed with SIGKILL: the instances run
// on too, and the next knbox adopts them.
func TestRestartUnderLoad(t *testing.T) {
	dir, apiAddr, httpAddr, host, k, srv := restartEnv(t)
	before := runcPids(t, dir)
	apiFromInstance(t, httpAddr, host, "before the restart")
	l := startLoad(t, httpAddr, host)
	l.await(t, 200, "load before the restart")

	start := time.Now()
	srv.terminate()
	srv2 := startServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: httpAddr, bin: knboxBin, args: restartFlags})
	took := time.Since(start)
	l.await(t, 500, "load after the restart")
	l.end()
	<-srv.exited
	t.Logf("restart (SIGTERM, new knbox answering its API) took %v; %d requests answered, %d failed, slowest %v",
		took, l.ok.Load(), l.failed.Load(), time.Duration(l.maxLatency.Load()))
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d requests failed across the restart: %v\nold:\n%s\nnew:\n%s", n, l.errs, srv.logs(), srv2.logs())
	}
	if after := runcPids(t, dir); !samePids(before, after) {
		t.Errorf("instances after the restart %v, before %v: want the same containers", after, before)
	}
	if !strings.Contains(srv.logs(), "handed over") || !strings.Contains(srv2.logs(), "from=handover") {
		t.Errorf("the sockets were not handed over:\nold:\n%s\nnew:\n%s", srv.logs(), srv2.logs())
	}
	apiFromInstance(t, httpAddr, host, "after the restart")

	// kill -9: the instances run on, and the next knbox adopts them.
	srv2.kill()
	if after := runcPids(t, dir); !samePids(before, after) {
		t.Errorf("instances after kill -9 %v, before %v", after, before)
	}
	srv3 := startServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: httpAddr, bin: knboxBin,
		args: []string{"--keep-instances=false", "--handover-timeout=0s"}})
	k.srv = srv3
	l = startLoad(t, httpAddr, host)
	l.await(t, 100, "load after kill -9 and a new start")
	l.end()
	apiFromInstance(t, httpAddr, host, "after kill -9 and a new start")
	if after := runcPids(t, dir); !samePids(before, after) {
		t.Errorf("instances after the start that followed kill -9: %v, before %v", after, before)
	}
}

// TestUpgradeUnderLoad: the sockets are systemd's (socket activation, as
// the shipped knbox.socket unit does); the running knbox is stopped and a
// different knbox binary (a new version) started on the same data dir,
// while clients send requests: the instances run on (same pids) and not
// one request fails.
func TestUpgradeUnderLoad(t *testing.T) {
	requireTool(t, "runc")
	requireTool(t, "kubectl")
	newBin := filepath.Join(t.TempDir(), "knbox-next")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/knbox/knbox/pkg/version.Version=upgrade-test", "-o", newBin, "github.com/knbox/knbox/cmd/knbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the next knbox: %v\n%s", err, out)
	}
	// The sockets, as systemd's knbox.socket holds them.
	var socks []*os.File
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		t.Cleanup(func() { f.Close() })
		socks = append(socks, f)
		addrs = append(addrs, ln.Addr().String())
	}
	dir := t.TempDir()
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	apiAddr, httpAddr := addrs[0], addrs[1]
	srv := startServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: httpAddr, bin: knboxBin, args: []string{"--keep-instances=true"}, sockets: socks})
	k := &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}
	k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: up\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/min-scale: \"2\"\n    spec:\n      containers:\n      - image: %s/runtime-info:v1\n", reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/up", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("not ready: %v\n%s", err, out)
	}
	deadline := time.Now().Add(time.Minute)
	for len(runcPids(t, dir)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not 2 instances: %v", runcPids(t, dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := runcPids(t, dir)
	podUIDs := func() string {
		out, _ := k.run("", "get", "pods", "-l", "serving.knative.dev/service=up", "-o", "jsonpath={.items[*].metadata.uid}")
		return out
	}
	uids := awaitOutput(t, "the two instances as Pods", time.Minute, podUIDs, func(s string) bool { return len(strings.Fields(s)) == 2 })
	l := startLoad(t, httpAddr, "up.default.localhost")
	l.await(t, 200, "load before the upgrade")

	srv.terminate()
	<-srv.exited // as systemctl restart: stop, then start
	srv2 := startServerAt(t, serverOpts{dir: dir, apiAddr: apiAddr, httpAddr: httpAddr, bin: newBin,
		args: []string{"--keep-instances=false"}, sockets: socks})
	k.srv = srv2
	l.await(t, 500, "load after the upgrade")
	l.end()
	t.Logf("upgrade: %d requests answered, %d failed, slowest %v", l.ok.Load(), l.failed.Load(), time.Duration(l.maxLatency.Load()))
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d requests failed across the upgrade: %v\nold:\n%s\nnew:\n%s", n, l.errs, srv.logs(), srv2.logs())
	}
	if after := runcPids(t, dir); !samePids(before, after) {
		t.Errorf("instances after the upgrade %v, before %v: want the same containers", after, before)
	}
	// The adopted instances are the same Pods (same UIDs).
	awaitOutput(t, "the same Pods after the upgrade", time.Minute, podUIDs, func(s string) bool { return s == uids })
	if !strings.Contains(srv2.logs(), "from=systemd") {
		t.Errorf("the new knbox did not take systemd's sockets:\n%s", srv2.logs())
	}
}
