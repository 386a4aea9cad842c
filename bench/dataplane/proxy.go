package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/knbox/knbox/pkg/metrics"
	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/routing"
)

// The proxy table: knbox's router next to the proxies users compare it
// with, each in front of the same upstream, all in one private network
// namespace (only its loopback), measured with wrk in interleaved rounds.

// Ports inside the benchmark's network namespace (nothing else is there).
const (
	upstreamPort = 8080
	nginxPort    = 8081
	queuePort    = 8082 // the queue-proxy also takes 8022, 9090, 9091 (fixed)
	queueTLSPort = 8443
	rproxyPort   = 8083
	knboxPort    = 8084
	// knboxMetricsPort: the same router with knbox serve's request
	// metrics as its Observer (metrics on vs off in the same run).
	knboxMetricsPort = 8085
	// benchHost is the Host of every measured request: the knbox
	// router's route; the other proxies ignore it.
	benchHost = "bench.default.example.com"
)

// Figures of the proxy table.
var figures = []figure{
	{name: "cpu", clients: 16, path: "/bytes?n=13", title: "proxy CPU per request, 16 clients, 13 B responses"},
	{name: "p50", clients: 1, path: "/bytes?n=13", title: "latency, 1 client, 13 B responses"},
	{name: "64k", clients: 16, path: "/bytes?n=65536", title: "throughput, 16 clients, 64 KiB responses"},
}

type figure struct {
	name, path, title string
	clients           int
}

// proxyTarget is one thing wrk sends requests to.
type proxyTarget struct {
	name string
	port int
	pids func() []int // whose CPU time is the proxy's; nil for direct
}

// wrkResult is one wrk run.
type wrkResult struct {
	requests int64
	rate     float64       // requests per second
	p50, p99 time.Duration // latency percentiles
	cpu      time.Duration // of the proxy's processes during the run
	errors   int64
}

func (w wrkResult) cpuPerRequest() time.Duration {
	if w.requests == 0 {
		return 0
	}
	return w.cpu / time.Duration(w.requests)
}

// proxyReport is the proxy table's results: per figure, per target, one
// result per round.
type proxyReport struct {
	note    string
	targets []string
	results map[string]map[string][]wrkResult
}

// proxyEnv is the running setup of the proxy table.
type proxyEnv struct {
	o      options
	ns     string // network namespace
	dir    string
	procs  []*exec.Cmd
	wrk    string
	nginx  string
	appBin string
}

// proxies measures the proxy table.
func (e *env) proxies(ctx context.Context, rep *report) error {
	p := &proxyEnv{o: e.o, dir: filepath.Join(e.dir, "proxies"), appBin: e.appBin}
	var err error
	if p.wrk, err = exec.LookPath(e.o.wrk); err != nil {
		return fmt.Errorf("wrk not found (%v): install it with apt-get install wrk, or pass -wrk", err)
	}
	if p.nginx, err = exec.LookPath(e.o.nginx); err != nil {
		return fmt.Errorf("nginx not found (%v): install it with apt-get install nginx, or pass -nginx", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("ip (iproute2) not found: the proxies run in a private network namespace")
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	queue, err := buildQueueProxy(ctx, p.dir)
	if err != nil {
		return err
	}
	p.ns = fmt.Sprintf("knbox-bench-%08x", rand.Uint32())
	if out, err := exec.Command("ip", "netns", "add", p.ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	defer func() {
		p.stopAll()
		if out, err := exec.Command("ip", "netns", "del", p.ns).CombinedOutput(); err != nil {
			logf("ip netns del %s: %v: %s", p.ns, err, out)
		}
	}()
	if out, err := exec.Command("ip", "-n", p.ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("loopback up: %v: %s", err, out)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf("proxies: starting upstream, nginx, queue-proxy, httputil.ReverseProxy and knbox's router in netns %s", p.ns)
	if _, err := p.start("upstream", []string{"PORT=" + strconv.Itoa(upstreamPort), "K_REVISION=direct"}, p.appBin); err != nil {
		return err
	}
	nginxCmd, err := p.startNginx()
	if err != nil {
		return err
	}
	qp, err := p.start("queue-proxy", queueEnv(), queue)
	if err != nil {
		return err
	}
	rp, err := p.start("reverseproxy", nil, self, "-serve", "reverseproxy", "-listen", addrOf(rproxyPort), "-upstream", addrOf(upstreamPort))
	if err != nil {
		return err
	}
	kb, err := p.start("knbox-router", nil, self, "-serve", "router", "-listen", addrOf(knboxPort), "-upstream", addrOf(upstreamPort))
	if err != nil {
		return err
	}
	km, err := p.start("knbox-router-metrics", nil, self, "-serve", "router-metrics", "-listen", addrOf(knboxMetricsPort), "-upstream", addrOf(upstreamPort))
	if err != nil {
		return err
	}
	one := func(c *exec.Cmd) func() []int { return func() []int { return []int{c.Process.Pid} } }
	targets := []proxyTarget{
		{name: "direct", port: upstreamPort},
		{name: "nginx", port: nginxPort, pids: func() []int { return withChildren(nginxCmd.Process.Pid) }},
		{name: "queue-proxy", port: queuePort, pids: one(qp)},
		{name: "httputil.ReverseProxy", port: rproxyPort, pids: one(rp)},
		{name: "knbox", port: knboxPort, pids: one(kb)},
		{name: "knbox+metrics", port: knboxMetricsPort, pids: one(km)},
	}
	for _, t := range targets {
		if err := p.waitServing(ctx, t); err != nil {
			return err
		}
	}
	pr := &proxyReport{results: map[string]map[string][]wrkResult{}}
	for _, t := range targets {
		pr.targets = append(pr.targets, t.name)
	}
	for _, f := range figures {
		pr.results[f.name] = map[string][]wrkResult{}
	}
	logf("proxies: warming up")
	for _, t := range targets {
		if _, err := p.runWrk(ctx, t, figures[0], time.Second); err != nil {
			return err
		}
	}
	for round := 0; round < e.o.rounds; round++ {
		for _, f := range figures {
			// Each round starts with another target, so that no target
			// is always first or always after the same one.
			for i := range targets {
				t := targets[(i+round)%len(targets)]
				logf("proxies: round %d/%d, %s, %s", round+1, e.o.rounds, f.name, t.name)
				res, err := p.runWrk(ctx, t, f, e.o.duration)
				if err != nil {
					return err
				}
				pr.results[f.name][t.name] = append(pr.results[f.name][t.name], res)
			}
		}
	}
	pr.note = fmt.Sprintf("Every target in front of the same upstream (runtime-info, a Go net/http server, /bytes?n=N), all on the\n"+
		"loopback of a private network namespace; wrk -t1 for %v per run, %d rounds interleaved (figure by figure, each\n"+
		"round starting with another target); medians of the rounds, [min..max] after them. CPU per request is the proxy\n"+
		"processes' own CPU time (utime+stime from /proc/PID/stat, nginx's master and workers) over the requests wrk\n"+
		"completed; \"/ nginx, paired\" is the median of each round's ratio to nginx's, and the rounds it was lower in.\n"+
		"nginx %s: worker_processes auto, upstream keepalive 64, proxy_http_version 1.1, Connection \"\".\n"+
		"queue-proxy: knative.dev/serving %s cmd/queue, containerConcurrency 0, request metrics to Prometheus.\n"+
		"httputil.ReverseProxy: NewSingleHostReverseProxy on net/http, 64 idle connections per host.\n"+
		"knbox: router.Server, one Route, the upstream as the revision's one instance.\n"+
		"knbox+metrics: the same, with knbox serve's request metrics (pkg/metrics) as the router's Observer.\n"+
		"CPUs: nothing is pinned; wrk, the upstream and every proxy share the machine's %d CPUs; nginx has one worker\n"+
		"per CPU (worker_processes auto), the Go proxies GOMAXPROCS = the CPUs (Go's default).",
		e.o.duration, e.o.rounds, nginxVersion(p.nginx), servingVersion(), goruntime.NumCPU())
	rep.proxies = pr
	return nil
}

func addrOf(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// start runs a command inside the namespace; its output goes to a log
// file of the run.
func (p *proxyEnv) start(name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.Create(filepath.Join(p.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.ns, bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); logFile.Close() }()
	p.procs = append(p.procs, cmd)
	return cmd, nil
}

// stopAll stops what start started (by PID): SIGTERM, then SIGKILL.
func (p *proxyEnv) stopAll() {
	for _, c := range p.procs {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range p.procs {
		for c.ProcessState == nil && time.Now().Before(deadline) {
			if err := c.Process.Signal(syscall.Signal(0)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = c.Process.Kill()
	}
}

// startNginx configures nginx as an operator would put it in front of
// one upstream, with keep-alive to it.
func (p *proxyEnv) startNginx() (*exec.Cmd, error) {
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream app {
        server 127.0.0.1:%[2]d;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:%[3]d;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
        }
    }
}
`, p.dir, upstreamPort, nginxPort)
	path := filepath.Join(p.dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return p.start("nginx", nil, p.nginx, "-p", p.dir, "-e", filepath.Join(p.dir, "nginx-error.log"), "-c", path)
}

func nginxVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	if m := regexp.MustCompile(`nginx/(\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "?"
}

// queueEnv is the environment Knative's revision reconciler gives the
// queue-proxy, for a revision of containerConcurrency 0 whose container
// listens on upstreamPort.
func queueEnv() []string {
	return []string{
		"SERVING_NAMESPACE=default",
		"SERVING_SERVICE=bench",
		"SERVING_CONFIGURATION=bench",
		"SERVING_REVISION=bench-00001",
		"SERVING_POD=bench-00001-deployment-0",
		"SERVING_POD_IP=127.0.0.1",
		"QUEUE_SERVING_PORT=" + strconv.Itoa(queuePort),
		"QUEUE_SERVING_TLS_PORT=" + strconv.Itoa(queueTLSPort),
		"USER_PORT=" + strconv.Itoa(upstreamPort),
		"CONTAINER_CONCURRENCY=0",
		"REVISION_TIMEOUT_SECONDS=300",
		"REVISION_RESPONSE_START_TIMEOUT_SECONDS=0",
		"REVISION_IDLE_TIMEOUT_SECONDS=0",
		"SERVING_LOGGING_CONFIG=",
		"SERVING_LOGGING_LEVEL=error",
		"SERVING_REQUEST_LOG_TEMPLATE=",
		"SERVING_ENABLE_REQUEST_LOG=false",
		"SERVING_REQUEST_METRICS_BACKEND=prometheus",
		"SERVING_REQUEST_METRICS_REPORTING_PERIOD_SECONDS=5",
		"TRACING_CONFIG_BACKEND=none",
		"TRACING_CONFIG_SAMPLE_RATE=0",
		"SERVING_ENABLE_PROBE_REQUEST_LOG=false",
		"METRICS_DOMAIN=knative.dev/internal/serving",
		"SYSTEM_NAMESPACE=knative-serving",
		"ENABLE_PROFILING=false",
	}
}

// servingVersion is the knative.dev/serving version knbox pins.
func servingVersion() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "knative.dev/serving").Output()
	if err != nil {
		return "v0.42.2"
	}
	return strings.TrimSpace(string(out))
}

// buildQueueProxy builds Knative's queue-proxy (cmd/queue) at the version
// knbox pins, in a throwaway module with the replace directives of
// knative.dev/serving's own go.mod (go install pkg@version refuses a
// module that has some). The Go module proxy provides the modules.
func buildQueueProxy(ctx context.Context, dir string) (string, error) {
	version := servingVersion()
	mod := filepath.Join(dir, "queue-proxy-module")
	bin := filepath.Join(dir, "queue-proxy")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module knbox.bench/queueproxy\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	logf("proxies: building queue-proxy (knative.dev/serving@%s cmd/queue)", version)
	steps := [][]string{
		{"go", "mod", "edit", "-require", "knative.dev/serving@" + version},
		// knative.dev/serving's go.mod replaces gorilla/websocket.
		{"go", "mod", "edit", "-replace", "github.com/gorilla/websocket=github.com/gorilla/websocket@v1.5.0"},
		{"go", "build", "-mod=mod", "-o", bin, "knative.dev/serving/cmd/queue"},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build queue-proxy: %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return bin, nil
}

// waitServing waits until the target answers a measured request.
func (p *proxyEnv) waitServing(ctx context.Context, t proxyTarget) error {
	return poll(ctx, 60*time.Second, 100*time.Millisecond, t.name+" serving", func() (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.ns, p.wrk, "-t1", "-c1", "-d1s",
			"-H", "Host: "+benchHost, "http://"+addrOf(t.port)+figures[0].path).CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("%v: %s", err, out)
		}
		r, err := parseWrk(string(out))
		if err != nil {
			return false, err
		}
		if r.errors > 0 || r.requests == 0 {
			return false, fmt.Errorf("%d errors of %d requests", r.errors, r.requests)
		}
		return true, nil
	})
}

// runWrk runs wrk against t for d and reads the proxy's CPU time around it.
func (p *proxyEnv) runWrk(ctx context.Context, t proxyTarget, f figure, d time.Duration) (wrkResult, error) {
	var before time.Duration
	if t.pids != nil {
		before = cpuTime(t.pids())
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.ns, p.wrk, "-t1", "-c"+strconv.Itoa(f.clients),
		"-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", "-H", "Host: "+benchHost,
		"http://"+addrOf(t.port)+f.path).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %v: %s", t.name, err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("wrk %s: %w", t.name, err)
	}
	if t.pids != nil {
		r.cpu = cpuTime(t.pids()) - before
	}
	if r.errors > 0 {
		return r, fmt.Errorf("wrk %s: %d errors of %d requests:\n%s", t.name, r.errors, r.requests, out)
	}
	return r, nil
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkRate     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkPct      = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$`)
	wrkErrors   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads wrk's report.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRequests.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no request count in wrk's output:\n%s", out)
	}
	r.requests, _ = strconv.ParseInt(m[1], 10, 64)
	if m := wrkRate.FindStringSubmatch(out); m != nil {
		r.rate, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		unit := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9}[m[3]]
		d := time.Duration(v * unit)
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	for _, m := range wrkErrors.FindAllStringSubmatch(out, -1) {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.errors += n
		}
	}
	return r, nil
}

// cpuTime is the CPU time (user + system) the processes have used.
func cpuTime(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(raw)
		// Fields after the command name, which may hold spaces.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
		k, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
		ticks += u + k
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// withChildren is pid and its child processes (nginx's workers).
func withChildren(pid int) []int {
	out := []int{pid}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// median of the rounds, with min and max.
func medianOf(rs []wrkResult, v func(wrkResult) float64) (med, lo, hi float64) {
	if len(rs) == 0 {
		return 0, 0, 0
	}
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = v(r)
	}
	sort.Float64s(xs)
	return medianSorted(xs), xs[0], xs[len(xs)-1]
}

// medianSorted is the median of sorted, which is not empty.
func medianSorted(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 0 {
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return sorted[n/2]
}

func us(v float64) string { return fmt.Sprintf("%.0fµs", v/1e3) }

func us1(v float64) string { return fmt.Sprintf("%.1fµs", v/1e3) }

// paired compares target with anchor round by round: the median of the
// ratios of their figures in the same round, and in how many rounds the
// target's was lower. The rounds run minutes apart on a shared machine,
// so a drift of its load moves both figures of a round together, which
// the ratio of two medians does not cancel.
func (pr *proxyReport) paired(fig, target, anchor string, v func(wrkResult) float64) string {
	ts, as := pr.results[fig][target], pr.results[fig][anchor]
	var rs []float64
	lower := 0
	for i := range min(len(ts), len(as)) {
		if a, t := v(as[i]), v(ts[i]); a > 0 {
			rs = append(rs, t/a)
			if t < a {
				lower++
			}
		}
	}
	if len(rs) == 0 {
		return "-"
	}
	sort.Float64s(rs)
	return fmt.Sprintf("%.2fx, lower in %d/%d", medianSorted(rs), lower, len(rs))
}

func (pr *proxyReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nProxies: knbox's router next to the anchors, same upstream, same run\n%s\n", pr.note)
	cpu := func(r wrkResult) float64 { return float64(r.cpuPerRequest()) }
	rate := func(r wrkResult) float64 { return r.rate }
	p50 := func(r wrkResult) float64 { return float64(r.p50) }
	p99 := func(r wrkResult) float64 { return float64(r.p99) }
	med := func(fig, target string, v func(wrkResult) float64) float64 {
		m, _, _ := medianOf(pr.results[fig][target], v)
		return m
	}
	span := func(fig, target string, v func(wrkResult) float64, f func(float64) string) string {
		m, lo, hi := medianOf(pr.results[fig][target], v)
		return fmt.Sprintf("%s [%s..%s]", f(m), f(lo), f(hi))
	}
	num := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	for _, f := range figures {
		fmt.Fprintf(w, "\n%s (%s)\n", f.title, f.path)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		switch f.name {
		case "cpu":
			fmt.Fprintf(tw, "target\treq/s\tCPU per request\t/ nginx\t/ nginx, paired\t/ queue-proxy\t/ ReverseProxy\t\n")
			for _, t := range pr.targets {
				if t == "direct" {
					fmt.Fprintf(tw, "%s\t%s\t-\t\t\t\t\t\n", t, span(f.name, t, rate, num))
					continue
				}
				c := med(f.name, t, cpu)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t, span(f.name, t, rate, num), span(f.name, t, cpu, us1),
					ratio(c, med(f.name, "nginx", cpu)), pr.paired(f.name, t, "nginx", cpu),
					ratio(c, med(f.name, "queue-proxy", cpu)), ratio(c, med(f.name, "httputil.ReverseProxy", cpu)))
			}
		case "p50":
			fmt.Fprintf(tw, "target\tp50\tp99\tp50 / direct\tp50 / nginx\t\n")
			for _, t := range pr.targets {
				m := med(f.name, t, p50)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", t, span(f.name, t, p50, us), us(med(f.name, t, p99)),
					ratio(m, med(f.name, "direct", p50)), ratio(m, med(f.name, "nginx", p50)))
			}
		case "64k":
			fmt.Fprintf(tw, "target\treq/s\treq/s / direct\treq/s / nginx\tCPU per request\t\n")
			for _, t := range pr.targets {
				m := med(f.name, t, rate)
				c := "-"
				if t != "direct" {
					c = us(med(f.name, t, cpu))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", t, span(f.name, t, rate, num),
					ratio(m, med(f.name, "direct", rate)), ratio(m, med(f.name, "nginx", rate)), c)
			}
		}
		tw.Flush()
	}
}

// serveProxy is the -serve mode: the benchmark runs itself as one of the
// proxies under test, in a process of its own.
func serveProxy(kind, listen, upstream string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	switch kind {
	case "reverseproxy":
		u := &url.URL{Scheme: "http", Host: upstream}
		rp := httputil.NewSingleHostReverseProxy(u)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		rp.Transport = tr
		return (&http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	case "router", "router-metrics":
		table := routing.NewTable()
		table.Set(routing.Route{Namespace: "default", Name: "bench", Host: benchHost,
			Traffic: []routing.Split{{Revision: "bench-00001", Percent: 100}}})
		ro := router.Options{Table: table, Instances: staticInstances{upstream}, External: true}
		if kind == "router-metrics" {
			m := metrics.New(metrics.Options{})
			go m.Run(context.Background())
			ro.Observer = m
		}
		r, err := router.New(ro)
		if err != nil {
			return err
		}
		go r.Run(context.Background())
		return (&router.Server{Router: r}).Serve(ln)
	}
	return fmt.Errorf("-serve %q: want reverseproxy, router or router-metrics", kind)
}

// staticInstances is one revision with one instance at a fixed address.
type staticInstances struct{ addr string }

func (s staticInstances) Config(_, rev string) (router.RevisionConfig, bool) {
	// Knative's default timeoutSeconds.
	return router.RevisionConfig{Timeout: 300 * time.Second}, rev == "bench-00001"
}

func (s staticInstances) Endpoints(_, rev string) []router.Endpoint {
	if rev != "bench-00001" {
		return nil
	}
	return []router.Endpoint{{ID: "bench-00001-0", Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", s.addr)
	}}}
}

func (staticInstances) Subscribe(func(string, string)) {}
func (staticInstances) Drained(string, string, string) {}

var _ router.Instances = staticInstances{}
