package pod

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/logs"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod/podtest"
	"github.com/knbox/knbox/pkg/runtime"
)

// handlerNames are the handlers the shared tests run against.
var handlerNames = []string{"process", "runc", "runsc"}

// The fixtures shared with the other pod tests (see package podtest).
var (
	requireHandler   = podtest.RequireHandler
	newHandler       = podtest.NewHandler
	runtimeInfoImage = podtest.RuntimeInfoImage
	busyboxImage     = podtest.BusyboxImage
)

// env is one Runtime with its handlers and image store.
type env struct {
	t        testing.TB
	rt       *Runtime
	dir      string
	handlers map[string]runtime.Handler
}

func newEnv(t testing.TB, handlers []string, opts ...func(*Options)) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := image.Open(image.Options{Root: filepath.Join(dir, "images"), Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, handlers: map[string]runtime.Handler{}}
	for _, h := range handlers {
		e.handlers[h] = newHandler(t, h, filepath.Join(dir, "handlers"))
	}
	o := Options{
		Images:      store,
		Handlers:    e.handlers,
		StateDir:    filepath.Join(dir, "pods"),
		ShimCommand: shimCommand(),
		Logger:      slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range opts {
		f(&o)
	}
	rt, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// testWriter routes logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// spec is a pod of one container of ref as the revision manager makes it:
// the contract's environment, a TCP readiness probe of port 8080, a grace
// period of 5s.
func (e *env) spec(id, handler, ref string, mutate ...func(*Spec)) Spec {
	s := Spec{
		ID:      id,
		Labels:  map[string]string{"test": e.t.Name()},
		Handler: handler,
		LogPath: filepath.Join(e.dir, "logs", id, id+".log"),
		Containers: []corev1.Container{{
			Name:  "app",
			Image: ref,
			Env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}, {Name: "K_SERVICE", Value: "svc"},
				{Name: "K_CONFIGURATION", Value: "cfg"}, {Name: "K_REVISION", Value: id}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
		}},
		Images:      []string{ref},
		Port:        8080,
		GracePeriod: 5 * time.Second,
	}
	if handler == "process" {
		// The process handler refuses root (TestProcessRefusesRootWithTheField).
		nobody := int64(65534)
		s.Security = &corev1.PodSecurityContext{RunAsUser: &nobody}
	}
	for _, f := range mutate {
		f(&s)
	}
	return s
}

// run runs spec and stops it at the end of the test.
func (e *env) run(s Spec) {
	e.t.Helper()
	if err := e.rt.Run(context.Background(), s); err != nil {
		e.t.Fatalf("run %s: %v", s.ID, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.rt.Stop(ctx, s.ID, time.Second)
	})
}

// waitStatus waits until cond holds of the pod's status.
func (e *env) waitStatus(id string, timeout time.Duration, what string, cond func(Status) bool) Status {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, ok := e.rt.Status(id)
		if !ok {
			e.t.Fatalf("%s: pod %s is gone", what, id)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v; status %+v (last failure %+v)", what, timeout, st, st.LastFailure)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ready(st Status) bool { return st.Ready }

// failedWith is a condition: the pod's last failure has reason.
func failedWith(reason string) func(Status) bool {
	return func(st Status) bool { return st.LastFailure != nil && st.LastFailure.Reason == reason }
}

// logs is what the pod's log holds, one message a line.
func (e *env) logs(id string) string {
	e.t.Helper()
	var b bytes.Buffer
	if err := logs.CopyDir(context.Background(), filepath.Join(e.dir, "logs", id), logs.CopyOptions{}, &b); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

// eventually waits for cond, failing the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// client talks HTTP to a pod through Dial.
func (e *env) client(id string) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return e.rt.Dial(ctx, id) },
			DisableKeepAlives: true,
		},
	}
}

func (e *env) get(id, path string) []byte {
	e.t.Helper()
	resp, err := e.client(id).Get("http://pod" + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b
}

// info is the part of runtime-info's answer the tests read.
type info struct {
	Env         map[string]string `json:"env"`
	UID         int               `json:"uid"`
	Hostname    string            `json:"hostname"`
	StdinEOF    bool              `json:"stdinEOF"`
	StdinDetail string            `json:"stdinDetail"`
	Started     time.Time         `json:"started"`
	Files       []struct {
		Path     string `json:"path"`
		Exists   bool   `json:"exists"`
		Type     string `json:"type"`
		Perm     string `json:"perm"`
		Writable bool   `json:"writable"`
	} `json:"files"`
	Cgroup struct {
		MemoryLimit *int64 `json:"memoryLimit"`
		CPUQuota    *int64 `json:"cpuQuota"`
		CPUPeriod   int64  `json:"cpuPeriod"`
	} `json:"cgroup"`
}

func (i *info) file(p string) (exists, writable bool, typ string) {
	for _, f := range i.Files {
		if f.Path == p {
			return f.Exists, f.Writable, f.Type
		}
	}
	return false, false, ""
}

func (e *env) info(id, query string) *info {
	e.t.Helper()
	var i info
	if err := json.Unmarshal(e.get(id, "/"+query), &i); err != nil {
		e.t.Fatal(err)
	}
	return &i
}

// leftovers counts what pods with ids starting with prefix leave on the
// host: mounts under the state dir, network namespaces and runtime
// containers.
func (e *env) leftovers(prefix string) (mounts, namespaces, containers int) {
	e.t.Helper()
	mps, err := mountsUnder(filepath.Join(e.dir, "pods"))
	if err != nil {
		e.t.Fatal(err)
	}
	nss, err := network.List(network.DefaultRoot)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ns := range nss {
		if strings.HasPrefix(ns.Name, prefix) {
			namespaces++
		}
	}
	for _, h := range e.handlers {
		cs, err := h.Recover(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, c := range cs {
			if strings.HasPrefix(podOf(c.ID()), prefix) { // sidecars too
				containers++
			}
		}
	}
	for _, mp := range mps {
		if strings.Contains(mp, "/"+prefix) {
			mounts++
		}
	}
	return mounts, namespaces, containers
}

// uniqueName returns a pod id no other test (or earlier run) uses, so that
// host-wide counts can be filtered by it.
func uniqueName(base string) string {
	return fmt.Sprintf("%s-%x", base, time.Now().UnixNano()&0xffffff)
}

// cgroupsOf lists the cgroups of the containers ids (at /knbox/<id>, in any
// hierarchy).
func cgroupsOf(ids []string) []string {
	var dirs []string
	for _, id := range ids {
		d, _ := filepath.Glob("/sys/fs/cgroup/*/knbox/" + id)
		dirs = append(dirs, d...)
	}
	return dirs
}

// helperProcess runs this test binary's test helper (a Test function that
// acts only with its environment variables set) with env, and reads its
// output until the line "READY ...", whose fields it returns (nil if the
// helper ended first). kill ends the helper with SIGKILL, as a crash would;
// the test's cleanup kills it if the test did not.
func helperProcess(t *testing.T, helper string, env ...string) (ready []string, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
			ready = strings.Fields(rest)
			break
		}
		t.Log("helper: " + lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return ready, kill
}
