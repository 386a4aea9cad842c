package daemon

import (
	"cmp"
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
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// BenchmarkIdleServices measures what Services at zero cost the server at
// rest: `knbox serve` in this process (process runtime), then 100 and 500
// Services (one revision each, initial-scale 0: one deployment-probe
// instance, then zero), each step waited for until every revision is at
// zero. It reports the Go heap in use after a GC and the process's RSS per
// step, and the bytes per Service between steps. With
// KNBOX_HEAP_PROFILE=dir it writes a heap profile per step there (go tool
// pprof -sample_index=inuse_space), and the goroutines by stack, and one
// (idle-heap-N-settled.pprof) 10 s earlier: what the server allocates at
// rest is `go tool pprof -sample_index=alloc_space -base
// idle-heap-N-settled.pprof idle-heap-N.pprof`;
// KNBOX_IDLE_DB=dir keeps a copy of the store's file per step (the lines
// "knbox.db", "objects" and "event log" describe it); KNBOX_IDLE_STEPS=100,300 sets the
// steps; KNBOX_IDLE_SETTLE=150s waits that long at each step before it
// measures (default 3s: the state just after the last revision reached
// zero, with the controllers' and the garbage collector's work of the
// step still finishing; past 2 minutes the Go runtime has run its periodic
// GC and returned what the step left over). The test binary's own code and data (the test image, the
// in-process registry's blobs, the client) are in every figure; the
// differences are the server's. BenchmarkIdleServer measures the knbox
// binary itself.
func BenchmarkIdleServices(b *testing.B) { benchIdle(b, false) }

// BenchmarkIdleServer is BenchmarkIdleServices with `knbox serve` run as
// its own process (the binary built from cmd/knbox, as a user runs it):
// its RSS is the server's alone. Heap in use and goroutines come from its
// /metrics (not after a forced GC); there are no heap profiles.
func BenchmarkIdleServer(b *testing.B) { benchIdle(b, true) }

func benchIdle(b *testing.B, separate bool) {
	imagetest.Require(b, os.Geteuid() == 0, "instances need root (overlay mounts, network namespaces)")
	if b.N > 1 {
		b.Skip("one pass measures everything")
	}
	if os.Getenv("KNBOX_HEAP_PROFILE") != "" && !separate {
		runtime.MemProfileRate = 16 << 10 // finer than the default 512 KiB: the differences are small
	}
	reg := imagetest.StartRegistry(b)
	ref := imagetest.PushGoImage(b, reg, "runtime-info:idle", "../../test/images/runtime-info", image.Config{ExposedPorts: []string{"8080/tcp"}})

	cfg := config.Default()
	cfg.DataDir = b.TempDir()
	cfg.APIAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Registry.Addr = "127.0.0.1:0" // not the default :5000, which another test or server may hold
	cfg.InsecureRegistries = []string{reg}
	cfg.DefaultRuntimeClass = "process"
	yes := true
	proc := cfg.Runtimes["process"]
	proc.Enabled = &yes
	cfg.Runtimes["process"] = proc
	for _, n := range []string{"runc", "runsc", "crun"} {
		rt := cfg.Runtimes[n]
		rt.Binary = "/nonexistent/" + n
		cfg.Runtimes[n] = rt
	}
	cfg.ConfigMaps = map[string]map[string]string{"config-autoscaler": {"allow-zero-initial-scale": "true"}}
	keep := false
	cfg.Restart.KeepInstances, cfg.Restart.HandoverTimeout = &keep, "0s"
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var srv *exec.Cmd
	var metricsURL string
	if separate {
		srv, metricsURL = startServerProcess(b, cfg, reg)
	} else {
		up := make(chan struct{}, 1)
		done := make(chan error, 1)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		go func() { done <- Run(ctx, cfg, log, func(string, string) { up <- struct{}{} }) }()
		defer func() {
			cancel()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				b.Error("Run did not end")
			}
		}()
		select {
		case <-up:
		case err := <-done:
			b.Fatalf("Run ended before it was ready: %v", err)
		case <-time.After(2 * time.Minute):
			b.Fatal("not ready within 2 minutes")
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cfg.DataDir, KubeconfigFile))
	if err != nil {
		b.Fatal(err)
	}
	rc.WarningHandler = rest.NoWarnings{}
	rc.QPS, rc.Burst = 500, 500
	sc := servingclient.NewForConfigOrDie(rc)

	type step struct {
		services    int
		heap, rss   uint64
		restRate    float64 // bytes allocated per second at rest
		goroutines  int
		heapProfile string
		detail      string
	}
	settle := 3 * time.Second
	if v := os.Getenv("KNBOX_IDLE_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Hour {
			b.Fatalf("KNBOX_IDLE_SETTLE=%q: a duration within 0..1h", v)
		}
		settle = d
	}
	// What the server allocates at rest, over restSample after the
	// settle: the work it still does with every Service at zero (and, in
	// this process, the test's own share).
	const restSample = 10 * time.Second
	allocsNow := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	measure := func(n int) step {
		time.Sleep(settle) // let what the last step started settle (not a timed assertion)
		if separate {
			_, _, before := scrapeGo(b, metricsURL)
			time.Sleep(restSample)
			heap, goroutines, after := scrapeGo(b, metricsURL)
			return step{services: n, heap: heap, rss: rssOf(b, srv.Process.Pid), goroutines: goroutines,
				restRate: float64(after-before) / restSample.Seconds(),
				detail:   rssDetail(b, srv.Process.Pid) + "\n      " + dbDetail(b, cfg.DataDir, n)}
		}
		if dir := os.Getenv("KNBOX_HEAP_PROFILE"); dir != "" { // the base of what is allocated at rest
			writeHeapProfile(b, filepath.Join(dir, fmt.Sprintf("idle-heap-%d-settled.pprof", n)))
		}
		before := allocsNow()
		time.Sleep(restSample)
		restRate := float64(allocsNow()-before) / restSample.Seconds()
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := step{services: n, heap: ms.HeapInuse, rss: rss(b), goroutines: runtime.NumGoroutine(), restRate: restRate,
			detail: memDetail(b) + "\n      " + dbDetail(b, cfg.DataDir, n)}
		if dir := os.Getenv("KNBOX_HEAP_PROFILE"); dir != "" {
			s.heapProfile = filepath.Join(dir, fmt.Sprintf("idle-heap-%d.pprof", n))
			writeHeapProfile(b, s.heapProfile)
			// And the goroutines, grouped by stack: what is still running.
			g, err := os.Create(filepath.Join(dir, fmt.Sprintf("idle-goroutines-%d.txt", n)))
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
				b.Fatal(err)
			}
			g.Close()
		}
		return s
	}
	steps := []step{measure(0)}
	made := 0
	targets := []int{100, 500}
	if v := os.Getenv("KNBOX_IDLE_STEPS"); v != "" { // e.g. "100"
		targets = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n > 2000 || len(targets) > 0 && n <= targets[len(targets)-1] {
				b.Fatalf("KNBOX_IDLE_STEPS=%q: rising counts within 1..2000", v)
			}
			targets = append(targets, n)
		}
	}
	for _, target := range targets {
		var wg sync.WaitGroup
		errs := make(chan error, target)
		sem := make(chan struct{}, 10)
		for i := made; i < target; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("idle-%03d", i), Namespace: "default"}}
				svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/initial-scale": "0"}
				nobody := int64(65534) // the process runtime refuses root
				svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: ref,
					SecurityContext: &corev1.SecurityContext{RunAsUser: &nobody}}}
				if _, err := sc.ServingV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		made = target
		awaitEvery(b, 15*time.Minute, time.Second, fmt.Sprintf("%d revisions ready and at zero", target), func() error {
			list, err := sc.ServingV1().Revisions("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			atZero := 0
			for _, r := range list.Items {
				if c := r.Status.GetCondition(apis.ConditionReady); c != nil && c.IsFalse() {
					b.Fatalf("revision %s failed: %s: %s", r.Name, c.Reason, c.Message)
				}
				if r.IsReady() && r.Status.ActualReplicas != nil && *r.Status.ActualReplicas == 0 {
					atZero++
				}
			}
			if atZero < target {
				return fmt.Errorf("%d of %d", atZero, target)
			}
			return nil
		})
		steps = append(steps, measure(target))
	}
	for i, s := range steps {
		line := fmt.Sprintf("%4d Services at zero: heap in use %6.1f MiB, RSS %6.1f MiB, %5d goroutines, allocating %6.1f KiB/s at rest", s.services,
			float64(s.heap)/(1<<20), float64(s.rss)/(1<<20), s.goroutines, s.restRate/1024)
		if i > 0 {
			p := steps[i-1]
			per := float64(s.services - p.services)
			line += fmt.Sprintf("; per Service since %d: heap %5.1f KiB, RSS %5.1f KiB, %.1f goroutines", p.services,
				float64(int64(s.heap)-int64(p.heap))/per/1024, float64(int64(s.rss)-int64(p.rss))/per/1024,
				float64(s.goroutines-p.goroutines)/per)
		}
		if s.heapProfile != "" {
			line += " (" + s.heapProfile + ")"
		}
		fmt.Println(line)
		fmt.Println("      " + s.detail)
	}
	last := steps[len(steps)-1]
	b.ReportMetric(float64(last.rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(last.heap)/(1<<20), "heap-MiB")
}

// rss is this process's resident set size, from /proc/self/status.
func rss(t testing.TB) uint64 { return rssOf(t, os.Getpid()) }

// rssOf is process pid's resident set size, from /proc/pid/status.
func rssOf(t testing.TB, pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// memDetail says where the RSS goes: anonymous against file-backed pages
// (the binary's, bbolt's map), and the Go runtime's classes (live objects,
// heap kept but unused or free and not yet returned, stacks, the runtime's
// own), with the cumulative GC CPU, all in MiB.
func memDetail(t testing.TB) string {
	st := rssClasses(t, os.Getpid())
	names := []string{
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/heap/stacks:bytes",
		"/memory/classes/os-stacks:bytes",
		"/memory/classes/metadata/other:bytes",
		"/memory/classes/metadata/mspan/inuse:bytes",
		"/memory/classes/metadata/mcache/inuse:bytes",
		"/memory/classes/profiling/buckets:bytes",
		"/memory/classes/other:bytes",
		"/gc/heap/goal:bytes",
		"/cpu/classes/gc/total:cpu-seconds",
		"/cpu/classes/total:cpu-seconds",
	}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	metrics.Read(samples)
	v := func(i int) float64 {
		if samples[i].Value.Kind() == metrics.KindFloat64 {
			return samples[i].Value.Float64()
		}
		if samples[i].Value.Kind() == metrics.KindUint64 {
			return float64(samples[i].Value.Uint64()) / (1 << 20)
		}
		return 0
	}
	return fmt.Sprintf("RSS anon %.1f file %.1f (%s); heap objects %.1f, unused %.1f, free %.1f (released %.1f), goal %.1f; stacks %.1f; runtime metadata %.1f, other %.1f, profiling %.1f; GC CPU %.1fs of %.1fs",
		st["RssAnon"], st["RssFile"], fileMappings(t, os.Getpid()), v(0), v(1), v(2), v(3), v(11), v(4)+v(5), v(6)+v(7)+v(8), v(10), v(9), v(12), v(13))
}

// rssClasses reads the Rss* lines of /proc/pid/status, in MiB.
func rssClasses(t testing.TB, pid int) map[string]float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	st := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[0], "Rss") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			st[strings.TrimSuffix(f[0], ":")] = kb / 1024
		}
	}
	return st
}

// rssDetail is memDetail's first part for another process, with the
// file-backed mappings that hold the most resident pages.
func rssDetail(t testing.TB, pid int) string {
	st := rssClasses(t, pid)
	return fmt.Sprintf("RSS anon %.1f file %.1f (%s); CPU %.1fs", st["RssAnon"], st["RssFile"], fileMappings(t, pid), cpuSeconds(t, pid))
}

// cpuSeconds is the user and system CPU time process pid has used, from
// /proc/pid/stat.
func cpuSeconds(t testing.TB, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// fileMappings lists the three files with the most resident pages mapped
// in process pid, from /proc/pid/smaps, in MiB.
func fileMappings(t testing.TB, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]float64{}
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			cur = ""
			if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
				cur = filepath.Base(f[5])
			}
		case len(f) >= 2 && f[0] == "Rss:" && cur != "":
			kb, _ := strconv.ParseFloat(f[1], 64)
			byFile[cur] += kb / 1024
		}
	}
	names := make([]string, 0, len(byFile))
	for n := range byFile {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(byFile[b], byFile[a]) })
	var out []string
	for _, n := range names[:min(3, len(names))] {
		out = append(out, fmt.Sprintf("%s %.1f", n, byFile[n]))
	}
	return strings.Join(out, ", ")
}

// startServerProcess builds cmd/knbox and runs `knbox serve` with cfg
// (its registry and metrics on free loopback ports), until the benchmark
// ends. It returns the process and its /metrics URL once the kubeconfig
// is written.
func startServerProcess(b *testing.B, cfg *config.Config, reg string) (*exec.Cmd, string) {
	bin := filepath.Join(b.TempDir(), "knbox")
	build := exec.Command("go", "build", "-o", bin, "github.com/knbox/knbox/cmd/knbox")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build knbox: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	file := map[string]any{
		"dataDir": cfg.DataDir, "apiAddr": cfg.APIAddr, "httpAddr": cfg.HTTPAddr,
		"insecureRegistries": []string{reg}, "defaultRuntimeClass": "process",
		"runtimes": map[string]any{"process": map[string]any{"enabled": true},
			"runc": map[string]any{"binary": "/nonexistent/runc"}, "runsc": map[string]any{"binary": "/nonexistent/runsc"},
			"crun": map[string]any{"binary": "/nonexistent/crun"}},
		"configMaps":    cfg.ConfigMaps,
		"restart":       map[string]any{"keepInstances": false, "handoverTimeout": "0s"},
		"registry":      map[string]any{"addr": "127.0.0.1:0"},
		"observability": map[string]any{"metricsAddr": metricsAddr},
	}
	js, err := json.Marshal(file) // JSON is YAML
	if err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(b.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &syncWriter{w: &logs}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			b.Error("knbox serve did not end on SIGTERM")
		}
	})
	awaitEvery(b, 2*time.Minute, 100*time.Millisecond, "knbox serve up", func() error {
		select {
		case <-exited:
			b.Fatalf("knbox serve ended: %s", logs.String())
		default:
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, KubeconfigFile)); err != nil {
			return err
		}
		_, err := http.Get("http://" + metricsAddr + "/metrics")
		return err
	})
	return cmd, "http://" + metricsAddr + "/metrics"
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// scrapeGo reads go_memstats_heap_inuse_bytes and go_goroutines from a
// /metrics page.
// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(t testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func scrapeGo(t testing.TB, url string) (heap uint64, goroutines int, allocated uint64) {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			heap = uint64(v)
		case "go_goroutines":
			goroutines = int(v)
		case "go_memstats_alloc_bytes_total":
			allocated = uint64(v)
		}
	}
	return heap, goroutines, allocated
}

// awaitEvery checks cond every interval until it holds, for at most timeout.
func awaitEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}
