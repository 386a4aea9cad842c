// Command dataplane measures knbox's data plane on this machine, in one run:
//
//   - proxies: knbox's router next to the proxies it is compared with
//     (nginx, Knative's queue-proxy, a plain httputil.ReverseProxy) and no
//     proxy at all, each in front of the same upstream in a private network
//     namespace, measured with wrk in interleaved rounds: CPU per request,
//     latency at one client, throughput of 64 KiB responses;
//   - cold start: a request to a Revision at zero scale, to the first byte
//     of its response, for each OCI runtime asked for (runc and runsc by
//     default), next to starting the same program as a plain host process
//     and to starting knbox's own bundle by hand with the runtime's CLI
//     (`runc run --detach`), interleaved;
//   - burst: 10 one-second requests at once to a revision at zero with
//     containerConcurrency 1, next to 10 copies of the bundle started at
//     once by hand, in interleaved rounds;
//   - warm requests: latency and throughput through knbox's router to one
//     instance, next to the same program reached directly.
//
// It builds knbox and the runtime-info test image, pushes the image to an
// in-process registry on loopback, starts `knbox serve` on loopback ports
// with a private data directory, drives it through the API, and prints one
// table per measurement with the ratio against its baseline. All traffic
// goes to 127.0.0.1; every loop is bounded in count and in time.
//
// Run (as root, with runc and runsc installed; the proxy table needs wrk
// and nginx: apt-get install wrk nginx, and the Go module proxy to build
// Knative's queue-proxy):
//
//	go run ./bench/dataplane [-tables proxies,warm,cold,burst] [-rounds 3] [-duration 5s]
//	    [-runtime runc,runsc] [-n 20] [-requests 2000] [-clients 4]
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

const (
	runtimeInfoPkg = "github.com/knbox/knbox/test/images/runtime-info"
	namespace      = "default"
	// path is what every measured request asks for: runtime-info answers
	// it at once with a short body ("slept 0ms").
	path = "/sleep?ms=0"
	// The stable window and grace make scale to zero quick (Knative's
	// smallest stable window); allow-zero-initial-scale lets a Service
	// start at zero (-cold initial-scale). The embedded registry is off: the
	// bench pushes to its own, and 127.0.0.1:5000 may be taken on a shared machine.
	knboxConfig = `configMaps:
  config-autoscaler:
    stable-window: 6s
    scale-to-zero-grace-period: 2s
    allow-zero-initial-scale: "true"
registry:
  disabled: true
`
)

type options struct {
	tables   map[string]bool // proxies, warm, cold
	rounds   int             // of the proxy table
	duration time.Duration   // of one wrk run
	wrk      string
	nginx    string
	runtimes []string
	n        int // cold starts per runtime
	requests int // warm requests per row
	clients  int // parallel clients of the throughput rows
	timeout  time.Duration
	// coldMethod is how revisions get to zero: "idle" (scale to zero
	// after a stable window plus the grace period without traffic) or
	// "initial-scale" (autoscaling.knative.dev/initial-scale: "0").
	coldMethod string
	// prepared: knbox keeps a prepared sandbox per revision (its
	// default); false turns them off, for the figures without.
	prepared bool
	// rest: before each cold request, knbox comes to rest
	// (limits.memory.rest, after 5s here): its collector's target drops
	// and it hands back its binary's pages, which the request then faults
	// back in.
	rest bool
	// keepPages: with rest, limits.memory.rest.keepPages (the binary and
	// knbox.db stay mapped), to tell the pages' share of a cold start
	// after a rest from the collector's.
	keepPages bool
}

func main() {
	// The proxy table runs this program as one of the proxies it measures.
	serve := flag.String("serve", "", "internal: serve as a proxy (router or reverseproxy) and nothing else")
	listen := flag.String("listen", "", "internal: with -serve, the address to listen on")
	upstream := flag.String("upstream", "", "internal: with -serve, the upstream's address")
	tables := flag.String("tables", "proxies,warm,cold,burst", "tables to measure, comma-separated: proxies, warm, cold, burst")
	rounds := flag.Int("rounds", 3, "interleaved rounds of the proxy and the burst table (1..20)")
	duration := flag.Duration("duration", 5*time.Second, "length of one wrk run of the proxy table (1s..60s)")
	wrkBin := flag.String("wrk", "wrk", "the wrk command")
	nginxBin := flag.String("nginx", "nginx", "the nginx command")
	rts := flag.String("runtime", "runc,runsc", "RuntimeClasses to measure, comma-separated (runc, runsc, crun, process)")
	n := flag.Int("n", 20, "cold starts per runtime (1..100)")
	requests := flag.Int("requests", 2000, "warm requests per row (100..20000)")
	clients := flag.Int("clients", 4, "parallel clients of the throughput rows (2..32)")
	timeout := flag.Duration("timeout", 20*time.Minute, "bound on the whole run")
	coldMethod := flag.String("cold", "idle", `how revisions get to zero: "idle" (no traffic for the stable window + grace period) or "initial-scale" (initial-scale "0")`)
	rest := flag.Bool("rest", false, "let knbox come to rest (limits.memory.rest.after 5s) before each cold request, and measure the request after it")
	keepPages := flag.Bool("keep-pages", false, "with -rest: limits.memory.rest.keepPages (knbox's binary and knbox.db stay mapped at rest)")
	prepared := flag.Bool("prepared", true, "knbox keeps prepared sandboxes (limits.preparedSandboxes; false: disabled, for the figures without)")
	flag.Parse()
	if *serve != "" {
		if err := serveProxy(*serve, *listen, *upstream); err != nil {
			fmt.Fprintln(os.Stderr, "dataplane -serve:", err)
			os.Exit(1)
		}
		return
	}
	o := options{n: *n, requests: *requests, clients: *clients, timeout: *timeout, coldMethod: *coldMethod, prepared: *prepared, rest: *rest, keepPages: *keepPages,
		tables: map[string]bool{}, rounds: *rounds, duration: *duration, wrk: *wrkBin, nginx: *nginxBin}
	for _, t := range strings.Split(*tables, ",") {
		switch t = strings.TrimSpace(t); t {
		case "proxies", "warm", "cold", "burst":
			o.tables[t] = true
		case "":
		default:
			fail("-tables: unknown table " + t)
		}
	}
	for _, r := range strings.Split(*rts, ",") {
		if r = strings.TrimSpace(r); r != "" {
			o.runtimes = append(o.runtimes, r)
		}
	}
	switch {
	case len(o.runtimes) == 0:
		fail("-runtime names no runtime")
	case o.n < 1 || o.n > 100:
		fail("-n must be within 1..100")
	case o.requests < 100 || o.requests > 20000:
		fail("-requests must be within 100..20000")
	case o.clients < 2 || o.clients > 32:
		fail("-clients must be within 2..32")
	case o.timeout <= 0 || o.timeout > 2*time.Hour:
		fail("-timeout must be within (0, 2h]")
	case o.coldMethod != "idle" && o.coldMethod != "initial-scale":
		fail(`-cold must be "idle" or "initial-scale"`)
	case o.rounds < 1 || o.rounds > 20:
		fail("-rounds must be within 1..20")
	case o.duration < time.Second || o.duration > time.Minute:
		fail("-duration must be within 1s..60s")
	case len(o.tables) == 0:
		fail("-tables names no table")
	}
	if os.Geteuid() != 0 {
		fail("knbox serve runs containers and the proxies run in a network namespace: run as root")
	}

	// imagetest wants a testing.TB; a benchmark's B works outside go test
	// (as in bench/api). One pass: every operation is timed here.
	var rep *report
	var runErr error
	testing.Benchmark(func(b *testing.B) {
		b.StopTimer()
		if b.N > 1 {
			b.SkipNow()
		}
		rep, runErr = run(b, o)
		// Printed here, before the temporary directories are removed:
		// what that cleanup finds wrong must not lose the tables.
		if rep != nil {
			rep.print(os.Stdout)
		}
		if runErr != nil {
			fmt.Fprintln(os.Stderr, "dataplane:", runErr)
		}
	})
	if runErr != nil {
		os.Exit(1)
	}
	if rep == nil {
		fail("benchmark failed (see above)")
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# "+format+"\n", args...)
}

// report is what the run measured.
type report struct {
	proxies    *proxyReport
	coldMethod string
	prepared   bool
	cold       []row // baseline first
	// atRest is what prepared sandboxes cost at rest, per runtime.
	atRest   []restCost
	warmNote string
	warm     []row // per clients setting, baseline first
	bursts   []*burstReport
}

type row struct {
	name     string
	clients  int
	samples  []time.Duration
	errors   int
	elapsed  time.Duration // of the whole row (throughput rows)
	baseline bool
}

func (r row) pct(p float64) time.Duration {
	if len(r.samples) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p+0.5)]
}

func (r row) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(len(r.samples)) / r.elapsed.Seconds()
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func (r *report) print(w io.Writer) {
	if r.proxies != nil {
		r.proxies.print(w)
	}
	if len(r.cold) > 0 {
		fmt.Fprintf(w, "\nCold start: GET %s at zero scale, request sent -> first response byte\n%s\n", path, r.coldMethod)
		if r.prepared {
			fmt.Fprintf(w, "knbox keeps a prepared sandbox per revision (limits.preparedSandboxes with room for all): the request only starts it.\n\n")
		} else {
			fmt.Fprintf(w, "Prepared sandboxes disabled (-prepared=false): the request makes the whole instance.\n\n")
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "target\tn\terrors\tp50\tp95\tmax\tp50 / baseline\tp95 / baseline\t\n")
		var base row
		for _, c := range r.cold {
			if c.baseline {
				base = c
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", c.name, len(c.samples), c.errors, ms(c.pct(0.5)), ms(c.pct(0.95)), ms(c.pct(1)),
				ratio(float64(c.pct(0.5)), float64(base.pct(0.5))), ratio(float64(c.pct(0.95)), float64(base.pct(0.95))))
		}
		tw.Flush()
		if len(r.atRest) > 0 {
			fmt.Fprintf(w, "\nA prepared sandbox at rest (its shim and what waits under it: the created init; runsc's sandbox and gofer),\nmeasured over the cold revisions' sandboxes before their requests; PSS counts a page shared by n processes 1/n in each\n\n")
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "runtime	sandboxes	PSS median	RSS median	processes	\n")
			for _, c := range r.atRest {
				fmt.Fprintf(tw, "%s\t%d\t%.1f MiB\t%.1f MiB\t%d\t\n", c.runtime, c.n, float64(c.pss)/(1<<20), float64(c.rss)/(1<<20), c.pids)
			}
			tw.Flush()
		}
	}
	for _, b := range r.bursts {
		b.print(w)
	}
	if len(r.warm) > 0 {
		fmt.Fprintf(w, "\nWarm requests: GET %s, one instance, latency per request and throughput over the row\n%s\n\n", path, r.warmNote)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "target\tclients\tn\terrors\tp50\tp99\treq/s\tp50 / direct\tp99 / direct\treq/s / direct\t\n")
		var base row
		for _, c := range r.warm {
			if c.baseline {
				base = c
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t\n", c.name, c.clients, len(c.samples), c.errors, ms(c.pct(0.5)), ms(c.pct(0.99)), c.rate(),
				ratio(float64(c.pct(0.5)), float64(base.pct(0.5))), ratio(float64(c.pct(0.99)), float64(base.pct(0.99))), ratio(c.rate(), base.rate()))
		}
		tw.Flush()
	}
}

// env is the running setup: knbox serve, its API clients, the registry.
type env struct {
	o        options
	dir      string
	knbox    string // binary
	appBin   string // runtime-info, for the host-process baselines
	image    string // registry/runtime-info:v1
	apiAddr  string
	httpAddr string
	serving  servingclient.Interface
	kube     kubernetes.Interface
	// router sends every request to knbox's router whatever the URL's host.
	router *http.Client
	// rests is how many times knbox had come to rest (its log's "at rest")
	// when the last cold request was sent.
	rests int
}

// allocRate is what knbox allocates per second, from its /metrics over
// five seconds, for the message of a rest that did not come.
func (e *env) allocRate(ctx context.Context) string {
	read := func() (float64, error) {
		raw, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "go_memstats_alloc_bytes_total "); ok {
				return strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
		return 0, fmt.Errorf("no go_memstats_alloc_bytes_total in /metrics")
	}
	a, err := read()
	if err != nil {
		return err.Error()
	}
	time.Sleep(5 * time.Second)
	b, err := read()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%.0f KiB/s", (b-a)/5/1024)
}

// awaitRest waits (bounded) until knbox's log says it came to rest again
// since the last cold request. A cold request alone may not end a rest
// (it allocates little); then a burst of API reads does, as other work
// would on a real server.
func (e *env) awaitRest(ctx context.Context) error {
	log := func() string {
		raw, _ := os.ReadFile(filepath.Join(e.dir, "knbox.log"))
		return string(raw)
	}
	count := func() int { return strings.Count(log(), `msg="at rest"`) }
	resting := func() bool {
		l := log()
		return strings.LastIndex(l, `msg="at rest"`) > strings.LastIndex(l, `msg="busy again"`)
	}
	if e.rests > 0 && count() == e.rests && resting() {
		err := poll(ctx, time.Minute, 0, "knbox busy again", func() (bool, error) {
			for i := 0; i < 20; i++ {
				if _, err := e.serving.ServingV1().Revisions(namespace).List(ctx, metav1.ListOptions{}); err != nil {
					return false, err
				}
			}
			return !resting(), nil
		})
		if err != nil {
			return err
		}
	}
	err := poll(ctx, 2*time.Minute, 250*time.Millisecond, "knbox at rest", func() (bool, error) {
		return count() > e.rests, nil
	})
	if err != nil {
		return fmt.Errorf("%w (knbox allocates %s)\nknbox log (tail):\n%s", err, e.allocRate(ctx), e.logTail(20))
	}
	e.rests = count()
	return nil
}

func run(b *testing.B, o options) (*report, error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, o.timeout)
	defer cancelT()

	e := &env{o: o, dir: b.TempDir()}
	logf("building runtime-info")
	e.appBin = filepath.Join(e.dir, "runtime-info")
	if err := os.WriteFile(e.appBin, imagetest.BuildGo(b, runtimeInfoPkg), 0o755); err != nil {
		return nil, err
	}
	rep := &report{prepared: o.prepared}
	if o.tables["proxies"] {
		if err := e.proxies(ctx, rep); err != nil {
			return rep, fmt.Errorf("proxies: %w", err)
		}
	}
	if !o.tables["warm"] && !o.tables["cold"] && !o.tables["burst"] {
		return rep, nil
	}
	logf("building knbox")
	e.knbox = filepath.Join(e.dir, "knbox")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.knbox, "github.com/knbox/knbox/cmd/knbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return rep, fmt.Errorf("build knbox: %w", err)
	}
	reg := imagetest.StartRegistry(b)
	imagetest.PushGoImage(b, reg, "runtime-info:v1", runtimeInfoPkg, image.Config{})
	e.image = reg + "/runtime-info:v1"

	stop, err := e.startKnbox(ctx)
	if err != nil {
		return rep, err
	}
	defer stop()
	if err := e.waitRuntimeClasses(ctx); err != nil {
		return rep, err
	}
	if o.tables["warm"] {
		if err := e.warm(ctx, rep); err != nil {
			return rep, fmt.Errorf("warm requests: %w", err)
		}
	}
	// The burst first: the cold table ends by deleting many Services at
	// once, after which knbox can be slow to take new revisions.
	if o.tables["burst"] {
		if err := e.burst(ctx, rep, "runc", o.rounds); err != nil {
			return rep, fmt.Errorf("burst: %w\nknbox log (tail):\n%s", err, e.logTail(30))
		}
	}
	if o.tables["cold"] {
		if err := e.cold(ctx, rep); err != nil {
			return rep, fmt.Errorf("cold starts: %w", err)
		}
	}
	return rep, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startKnbox runs `knbox serve` on loopback ports and waits until its API
// answers; stop ends it (SIGTERM, then SIGKILL after 60s: ours, by PID).
func (e *env) startKnbox(ctx context.Context) (stop func(), err error) {
	if e.apiAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if e.httpAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	data := filepath.Join(e.dir, "data")
	cfg := filepath.Join(e.dir, "knbox.yaml")
	conf := knboxConfig + "limits:\n"
	if e.o.rest {
		conf += "  memory:\n    rest:\n      after: 5s\n"
		if e.o.keepPages {
			conf += "      keepPages: true\n"
		}
	}
	if !e.o.prepared {
		conf += "  preparedSandboxes:\n    disabled: true\n"
	} else {
		// Room for every cold revision's sandbox: the table measures
		// the prepared path; the budget's own defaults are tested in
		// package replicas.
		conf += fmt.Sprintf("  preparedSandboxes:\n    count: %d\n    memory: %d\n", e.o.n+4, int64(e.o.n+4)<<27)
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(e.dir, "knbox.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.knbox, "serve", "--data-dir", data, "--api-addr", e.apiAddr, "--http-addr", e.httpAddr, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf("starting knbox serve (api %s, router %s, log %s)", e.apiAddr, e.httpAddr, logPath)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	stop = func() {
		logf("stopping knbox serve")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	tail := func() string { return e.logTail(20) }
	kc := filepath.Join(data, "kubeconfig")
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("knbox serve exited early:\n%s", tail())
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		default:
		}
		if _, err := os.Stat(kc); err == nil {
			if resp, err := hc.Get("https://" + e.apiAddr + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("knbox serve not ready after 60s:\n%s", tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		stop()
		return nil, err
	}
	rc.QPS, rc.Burst = 1000, 1000
	rc.WarningHandler = rest.NoWarnings{}
	if e.serving, err = servingclient.NewForConfig(rc); err == nil {
		e.kube, err = kubernetes.NewForConfig(rc)
	}
	if err != nil {
		stop()
		return nil, err
	}
	e.router = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.httpAddr)
		},
		MaxIdleConnsPerHost: 64,
	}}
	return stop, nil
}

// poll calls cond every interval until it returns true or an error, at most
// for d.
func poll(ctx context.Context, d, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not after %v (last error: %v)", what, d, last)
			}
			return fmt.Errorf("%s: not after %v", what, d)
		case <-time.After(interval):
		}
	}
}

func (e *env) waitRuntimeClasses(ctx context.Context) error {
	for _, rt := range e.o.runtimes {
		err := poll(ctx, 90*time.Second, 200*time.Millisecond, "RuntimeClass "+rt, func() (bool, error) {
			_, err := e.kube.NodeV1().RuntimeClasses().Get(ctx, rt, metav1.GetOptions{})
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("%w (knbox registers a RuntimeClass for each handler that works here)", err)
		}
	}
	return nil
}

// createService creates a Service running runtime-info under RuntimeClass
// rt with the given template annotations.
func (e *env) createService(ctx context.Context, name, rt string, annotations map[string]string, opts ...func(*servingv1.Service)) error {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	s.Spec.Template.Annotations = annotations
	s.Spec.Template.Spec.RuntimeClassName = &rt
	s.Spec.Template.Spec.Containers = []corev1.Container{{Image: e.image}}
	for _, o := range opts {
		o(s)
	}
	_, err := e.serving.ServingV1().Services(namespace).Create(ctx, s, metav1.CreateOptions{})
	return err
}

// waitReady waits until the Services are Ready and returns, per Service,
// its host (name.namespace.domain:port) and its latest ready revision.
func (e *env) waitReady(ctx context.Context, names []string) (hosts, revs map[string]string, err error) {
	hosts, revs = map[string]string{}, map[string]string{}
	err = poll(ctx, 180*time.Second, 200*time.Millisecond, fmt.Sprintf("%d services ready", len(names)), func() (bool, error) {
		list, err := e.serving.ServingV1().Services(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		byName := map[string]*servingv1.Service{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		for _, n := range names {
			s := byName[n]
			if s == nil {
				return false, fmt.Errorf("service %s missing", n)
			}
			c := s.Status.GetCondition(apis.ConditionReady)
			if c != nil && c.IsFalse() {
				return false, fmt.Errorf("service %s failed: %s: %s", n, c.Reason, c.Message)
			}
			if s.Status.ObservedGeneration != s.Generation || c == nil || !c.IsTrue() || s.Status.URL == nil {
				return false, nil
			}
			hosts[n], revs[n] = s.Status.URL.Host, s.Status.LatestReadyRevisionName
		}
		return true, nil
	})
	return hosts, revs, err
}

// replicas returns status.actualReplicas of every revision (-1 when unset).
// withConcurrency sets a Service's containerConcurrency.
func withConcurrency(n int64) func(*servingv1.Service) {
	return func(s *servingv1.Service) { s.Spec.Template.Spec.ContainerConcurrency = &n }
}

func (e *env) replicas(ctx context.Context) (map[string]int32, error) {
	list, err := e.serving.ServingV1().Revisions(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for _, r := range list.Items {
		out[r.Name] = -1
		if r.Status.ActualReplicas != nil {
			out[r.Name] = *r.Status.ActualReplicas
		}
	}
	return out, nil
}

// revSummary describes the scale of the revisions of names that are not in
// skip.
func (e *env) revSummary(ctx context.Context, names []string, revs map[string]string, skip map[string]time.Time) string {
	var b strings.Builder
	for _, n := range names {
		if _, ok := skip[n]; ok {
			continue
		}
		r, err := e.serving.ServingV1().Revisions(namespace).Get(ctx, revs[n], metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", revs[n], err)
			continue
		}
		actual, desired := int32(-1), int32(-1)
		if r.Status.ActualReplicas != nil {
			actual = *r.Status.ActualReplicas
		}
		if r.Status.DesiredReplicas != nil {
			desired = *r.Status.DesiredReplicas
		}
		active := "-"
		if c := r.Status.GetCondition(servingv1.RevisionConditionActive); c != nil {
			active = fmt.Sprintf("%s %s %s", c.Status, c.Reason, c.Message)
		}
		fmt.Fprintf(&b, "  %s: actualReplicas %d, desiredReplicas %d, Active %s\n", r.Name, actual, desired, active)
	}
	return b.String()
}

func (e *env) logTail(n int) string {
	raw, _ := os.ReadFile(filepath.Join(e.dir, "knbox.log"))
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// timedGet sends GET url through client and returns the time from sending
// to the first byte of the response; the body is read to its end.
func timedGet(ctx context.Context, client *http.Client, url string) (time.Duration, error) {
	var first time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", url, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if first.IsZero() {
		first = time.Now()
	}
	return first.Sub(start), nil
}

// load sends total requests to url from clients goroutines and returns the
// time to first byte of each, the errors and the elapsed time.
func load(ctx context.Context, client *http.Client, url string, total, clients int) row {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	r := row{clients: clients}
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, total/clients+1)
			errs := 0
			for ctx.Err() == nil && next.Add(1) <= int64(total) {
				d, err := timedGet(ctx, client, url)
				if err != nil {
					errs++
					continue
				}
				local = append(local, d)
			}
			mu.Lock()
			r.samples = append(r.samples, local...)
			r.errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

// hostProcess runs runtime-info as a plain host process on a free loopback
// port and waits until it answers; it returns its URL, the time from exec
// to the first byte of its first answer, and a stop function.
func (e *env) hostProcess(ctx context.Context) (url string, startup time.Duration, stop func(), err error) {
	addr, err := freeAddr()
	if err != nil {
		return "", 0, nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	url = "http://" + addr
	cmd := exec.Command(e.appBin)
	// runtime-info listens on :$PORT; only 127.0.0.1 is ever dialled.
	cmd.Env = []string{"PORT=" + port, "K_REVISION=direct"}
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Poll the port every millisecond, as the instance manager probes
		// a new instance's port until it answers.
		if c, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
			c.Close()
			if _, gerr := timedGet(ctx, client, url+path); gerr == nil {
				return url, time.Since(start), stop, nil
			}
		}
		select {
		case <-exited:
			return "", 0, nil, errors.New("runtime-info exited at start")
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", 0, nil, fmt.Errorf("runtime-info on %s did not answer", addr)
		}
		time.Sleep(time.Millisecond)
	}
}

// warm measures requests to one warm instance per runtime through the
// router, and to runtime-info as a host process directly.
func (e *env) warm(ctx context.Context, rep *report) error {
	rep.warmNote = "direct = the same runtime-info binary as a plain host process on 127.0.0.1 (an instance's network namespace\n" +
		"is not reachable from outside it); router -> X = knbox's router (Host header routing, admission, proxy) to one\n" +
		"instance of a Service under RuntimeClass X (min-scale = max-scale = 1). Latency is request sent -> first byte."
	directURL, _, stopDirect, err := e.hostProcess(ctx)
	if err != nil {
		return err
	}
	defer stopDirect()
	direct := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	var names []string
	for _, rt := range e.o.runtimes {
		name := "warm-" + rt
		names = append(names, name)
		if err := e.createService(ctx, name, rt, map[string]string{
			"autoscaling.knative.dev/min-scale": "1",
			"autoscaling.knative.dev/max-scale": "1",
		}); err != nil {
			return err
		}
	}
	logf("waiting for %v", names)
	hosts, revs, err := e.waitReady(ctx, names)
	if err != nil {
		return err
	}
	err = poll(ctx, 120*time.Second, 200*time.Millisecond, "one ready instance per warm service", func() (bool, error) {
		reps, err := e.replicas(ctx)
		if err != nil {
			return false, err
		}
		for _, n := range names {
			if reps[revs[n]] != 1 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	type target struct {
		name   string
		client *http.Client
		url    string
		base   bool
	}
	targets := []target{{"direct (baseline)", direct, directURL + path, true}}
	for _, rt := range e.o.runtimes {
		targets = append(targets, target{"router -> " + rt, e.router, "http://" + hosts["warm-"+rt] + path, false})
	}
	for _, t := range targets { // warm up connections and caches
		if r := load(ctx, t.client, t.url, 200, e.o.clients); r.errors > 0 {
			return fmt.Errorf("warm-up of %s: %d of 200 requests failed", t.name, r.errors)
		}
	}
	for _, clients := range []int{1, e.o.clients} {
		for _, t := range targets {
			logf("warm: %s, %d client(s), %d requests", t.name, clients, e.o.requests)
			r := load(ctx, t.client, t.url, e.o.requests, clients)
			r.name, r.baseline = t.name, t.base
			rep.warm = append(rep.warm, r)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	for _, n := range names {
		_ = e.serving.ServingV1().Services(namespace).Delete(ctx, n, metav1.DeleteOptions{})
	}
	return nil
}

// cold measures requests at zero scale: per runtime, n Services whose
// revisions go to zero (after their deployment probe: idle for a stable
// window plus the grace period, or at once with initial-scale 0), each
// requested once when its revision reports no instance; the baseline is
// runtime-info started as a host process.
func (e *env) cold(ctx context.Context, rep *report) error {
	base := row{name: "host process start (baseline)", baseline: true}
	for i := 0; i < e.o.n && ctx.Err() == nil; i++ {
		_, d, stop, err := e.hostProcess(ctx)
		if err != nil {
			base.errors++
			continue
		}
		stop()
		base.samples = append(base.samples, d)
	}
	rep.cold = append(rep.cold, base)

	var toZero []time.Duration // Ready -> actualReplicas 0, per revision
	for _, rt := range e.o.runtimes {
		names := make([]string, e.o.n)
		for i := range names {
			names[i] = fmt.Sprintf("cold-%s-%02d", rt, i)
		}
		hosts := map[string]string{}
		revs := map[string]string{}
		readyAt := map[string]time.Time{}
		var annotations map[string]string
		if e.o.coldMethod == "initial-scale" {
			annotations = map[string]string{"autoscaling.knative.dev/initial-scale": "0"}
		}
		// Batches of five: each new revision starts one instance (the
		// deployment probe) before it can go to zero.
		for i := 0; i < len(names); i += 5 {
			batch := names[i:min(i+5, len(names))]
			for _, n := range batch {
				if err := e.createService(ctx, n, rt, annotations); err != nil {
					return err
				}
			}
			logf("cold %s: waiting for %v", rt, batch)
			h, r, err := e.waitReady(ctx, batch)
			if err != nil {
				return err
			}
			now := time.Now()
			for _, n := range batch {
				hosts[n], revs[n], readyAt[n] = h[n], r[n], now
			}
		}
		zeroAt := map[string]time.Time{}
		logf("cold %s: waiting for %d revisions to be at zero", rt, len(names))
		err := poll(ctx, 90*time.Second, 100*time.Millisecond, "revisions at zero", func() (bool, error) {
			reps, err := e.replicas(ctx)
			if err != nil {
				return false, err
			}
			now := time.Now()
			for _, n := range names {
				if _, ok := zeroAt[n]; !ok && reps[revs[n]] == 0 {
					zeroAt[n] = now
				}
			}
			return len(zeroAt) == len(names), nil
		})
		if err != nil {
			return fmt.Errorf("%w; revisions not at zero:\n%s\nknbox log (tail):\n%s", err, e.revSummary(ctx, names, revs, zeroAt), e.logTail(30))
		}
		for _, n := range names {
			toZero = append(toZero, zeroAt[n].Sub(readyAt[n]))
		}
		if e.o.prepared {
			var rs []string
			for _, n := range names {
				rs = append(rs, revs[n])
			}
			c, err := e.restCost(ctx, rt, rs)
			if err != nil {
				return err
			}
			rep.atRest = append(rep.atRest, c)
		}
		// The anchor: the same bundle run by hand, one start before each
		// cold request (interleaved).
		anchorRev, stopAnchor, err := e.anchorService(ctx, "cold", rt)
		if err != nil {
			return fmt.Errorf("anchor service: %w", err)
		}
		hand, err := e.newHandRunner(rt, anchorRev)
		if err != nil {
			stopAnchor()
			return err
		}
		hr := row{name: rt + " run --detach of the same bundle by hand"}
		r := row{name: "router -> " + rt + " (from zero)"}
		if e.o.rest {
			r.name = "router -> " + rt + " (from zero, knbox at rest)"
		}
		for _, n := range names {
			hctx, hcancel := context.WithTimeout(ctx, 60*time.Second)
			d, err := hand.once(hctx)
			hcancel()
			if err != nil {
				logf("cold %s: by hand: %v", rt, err)
				hr.errors++
			} else {
				hr.samples = append(hr.samples, d)
			}
			reps, err := e.replicas(ctx)
			if err != nil {
				return err
			}
			if reps[revs[n]] != 0 {
				return fmt.Errorf("%s has %d instances before its cold request", revs[n], reps[revs[n]])
			}
			if e.o.rest {
				if err := e.awaitRest(ctx); err != nil {
					return err
				}
			}
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			d, err = timedGet(rctx, e.router, "http://"+hosts[n]+path)
			cancel()
			if err != nil {
				logf("cold %s: %s: %v", rt, n, err)
				r.errors++
				continue
			}
			r.samples = append(r.samples, d)
		}
		hand.close()
		stopAnchor()
		rep.cold = append(rep.cold, hr, r)
		logf("cold %s: deleting %d services", rt, len(names))
		for _, n := range names {
			if err := e.serving.ServingV1().Services(namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		// Let their instances stop before the next runtime is measured.
		err = poll(ctx, 120*time.Second, 250*time.Millisecond, "cold revisions removed", func() (bool, error) {
			reps, err := e.replicas(ctx)
			if err != nil {
				return false, err
			}
			for _, n := range names {
				if _, ok := reps[revs[n]]; ok {
					return false, nil
				}
			}
			// Their instances and prepared sandboxes stop in the
			// background: gone once their directories are.
			ents, _ := os.ReadDir(filepath.Join(e.dir, "data", "instances", "instances"))
			for _, en := range ents {
				for _, n := range names {
					if strings.HasPrefix(en.Name(), revs[n]+"-") {
						return false, nil
					}
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	sort.Slice(toZero, func(i, j int) bool { return toZero[i] < toZero[j] })
	how := "created without scale annotations; each revision went to zero after a stable window (6s) plus the\n" +
		"scale-to-zero grace period (2s) without traffic"
	if e.o.coldMethod == "initial-scale" {
		how = "created with autoscaling.knative.dev/initial-scale: \"0\" (allow-zero-initial-scale: true); each revision\n" +
			"went to zero after its deployment-probe instance was ready"
	}
	rep.coldMethod = fmt.Sprintf("method: %d Services per runtime, %s (Ready -> zero: median %v,\n"+
		"%v .. %v). Each Service then gets one request, sent once its revision reports status.actualReplicas 0.\n"+
		"The baseline is runtime-info exec'd as a host process: exec -> first byte of its first answer (port polled every 1ms).\n"+
		"By hand: the bundle knbox wrote for a running instance of the same image (min-scale 1), copied with a network\n"+
		"namespace of its own, started with `<runtime> run --detach` -> first byte (port polled every 1ms); one before each\n"+
		"cold request (interleaved). Namespace and bundle are made before the clock starts.",
		e.o.n, how, toZero[len(toZero)/2].Round(100*time.Millisecond), toZero[0].Round(100*time.Millisecond), toZero[len(toZero)-1].Round(100*time.Millisecond))
	return nil
}
