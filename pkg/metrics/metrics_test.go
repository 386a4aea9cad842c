package metrics

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/knbox/knbox/pkg/router"
)

// syncBuffer is a bytes.Buffer safe for the metrics goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func labels(ns, rev string) (string, string) {
	if ns == "default" && strings.HasPrefix(rev, "hello-") {
		return "hello", "hello"
	}
	return "", ""
}

// start runs m until the test ends.
func start(t *testing.T, m *Metrics) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// eventually waits for cond, at most 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scrape returns the exposition text of m.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// hasLine reports whether the exposition has a sample line starting with
// prefix.
func hasLine(text, prefix string) bool {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true
		}
	}
	return false
}

const helloLabels = `namespace_name="default",revision_name="hello-00001",service_name="hello"`

func TestRequestMetricsAndAccessLog(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	m := New(Options{Labels: labels, AccessLog: &log})
	start(t, m)
	infos := []*router.RequestInfo{
		{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "i1", Host: "hello.default.localhost", Method: "GET", Target: "/a",
			Code: 200, ResponseBytes: 12, Duration: 30 * time.Millisecond},
		{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "i1", Host: "hello.default.localhost", Method: "GET", Target: "/b",
			Code: 200, ResponseBytes: 5, Duration: 2 * time.Second, QueueWait: 1500 * time.Millisecond, ColdStart: true},
		{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "i1", Code: 503, Duration: time.Millisecond},
		{Namespace: "default", Route: "hello", Revision: "hello-00001", Code: 0, Duration: time.Millisecond, QueueWait: time.Millisecond}, // client left while queued
		{Namespace: "default", Route: "hello", Revision: "hello-00001", Instance: "i1", Code: 1234, Duration: time.Millisecond},           // not a status
		{Host: "nope.localhost", Code: 404}, // unknown host
	}
	for _, in := range infos {
		m.ObserveRequest(in)
	}
	eventually(t, "the access log lines", func() bool { return strings.Count(log.String(), "\n") == len(infos) })

	text := scrape(t, m)
	for _, want := range []string{
		`revision_request_count{configuration_name="hello",` + helloLabels[:len(`namespace_name="default",`)] + `response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello"} 2`,
		`revision_request_count{configuration_name="hello",namespace_name="default",response_code="503",response_code_class="5xx",revision_name="hello-00001",service_name="hello"} 1`,
		`revision_request_count{configuration_name="hello",namespace_name="default",response_code="0",response_code_class="none",revision_name="hello-00001",service_name="hello"} 2`,
		`revision_request_latencies_count{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello"} 2`,
		`revision_request_latencies_bucket{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello",le="40"} 1`,
		`revision_app_request_count{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello"} 2`,
		// the app's latency leaves the queue wait out: 500ms
		`revision_app_request_latencies_bucket{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello",le="500"} 2`,
		`revision_app_request_count{configuration_name="hello",namespace_name="default",response_code="0",response_code_class="none",revision_name="hello-00001",service_name="hello"} 1`,
		`activator_request_count{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello"} 1`,
		`activator_request_count{configuration_name="hello",namespace_name="default",response_code="0",response_code_class="none",revision_name="hello-00001",service_name="hello"} 1`,
		`knbox_observer_dropped_total 0`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !hasLine(text, want) {
			t.Errorf("no line %s", want)
		}
	}
	if strings.Contains(text, "nope") {
		t.Error("the unknown host made a series")
	}

	// The access log: one JSON object per request.
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	var first struct {
		Msg       string  `json:"msg"`
		Host      string  `json:"host"`
		Revision  string  `json:"revision"`
		Instance  string  `json:"instance"`
		Status    int     `json:"status"`
		Bytes     int64   `json:"bytes"`
		Duration  float64 `json:"duration"`
		QueueWait float64 `json:"queue_wait"`
		ColdStart bool    `json:"cold_start"`
		Path      string  `json:"path"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &first); err != nil {
		t.Fatalf("access log line %q: %v", lines[1], err)
	}
	if first.Msg != "request" || first.Host != "hello.default.localhost" || first.Revision != "hello-00001" || first.Instance != "i1" ||
		first.Status != 200 || first.Bytes != 5 || first.Duration != 2 || first.QueueWait != 1.5 || !first.ColdStart || first.Path != "/b" {
		t.Errorf("access log line %s -> %+v", lines[1], first)
	}
}

func TestForgetRemovesARevisionsSeries(t *testing.T) {
	t.Parallel()
	m := New(Options{Labels: labels})
	start(t, m)
	for _, rev := range []string{"hello-00001", "hello-00002"} {
		m.ObserveRequest(&router.RequestInfo{Namespace: "default", Revision: rev, Instance: "i", Code: 200, QueueWait: time.Millisecond})
	}
	m.ObserveColdStart("default", "hello-00001", time.Second)
	m.Forget(context.Background(), "default", "hello-00001")
	eventually(t, "the forget", func() bool { return testutil.CollectAndCount(m.requests) == 1 })
	text := scrape(t, m)
	if strings.Contains(text, "hello-00001") {
		t.Errorf("hello-00001 still has series:\n%s", text)
	}
	if !strings.Contains(text, `revision_name="hello-00002"`) {
		t.Error("hello-00002 lost its series")
	}
}

func TestFullQueueDrops(t *testing.T) {
	t.Parallel()
	// Only the access log and the trace hook are queued; not running:
	// nothing drains the queue. The metrics count every request anyway.
	m := New(Options{QueueLength: 2, AccessLog: io.Discard})
	for range 5 {
		m.ObserveRequest(&router.RequestInfo{Namespace: "default", Revision: "r", Code: 200})
	}
	if got := testutil.ToFloat64(m.dropped); got != 3 {
		t.Errorf("dropped %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("default", "", "", "r", "200", "2xx")); got != 5 {
		t.Errorf("counted %v requests, want 5", got)
	}
}

func TestAutoscalerAndQueueGauges(t *testing.T) {
	t.Parallel()
	m := New(Options{Labels: labels})
	scales := []Scale{{Namespace: "default", Revision: "hello-00001", Desired: 3, Requested: 3, Actual: 2,
		StableConcurrency: 1.5, PanicConcurrency: 4.25, TargetConcurrency: 70, Panic: true}}
	if err := m.AddAutoscaler(func() []Scale { return scales }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddQueues(func() []Queue { return []Queue{{Namespace: "default", Revision: "hello-00001", Depth: 7}} }); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	lbl := `{configuration_name="hello",namespace_name="default",revision_name="hello-00001",service_name="hello"}`
	for name, v := range map[string]string{
		"autoscaler_desired_pods": "3", "autoscaler_requested_pods": "3", "autoscaler_actual_pods": "2",
		"autoscaler_stable_request_concurrency": "1.5", "autoscaler_panic_request_concurrency": "4.25",
		"autoscaler_target_concurrency_per_pod": "70", "autoscaler_panic_mode": "1", "revision_queue_depth": "7",
	} {
		if want := name + lbl + " " + v; !hasLine(text, want) {
			t.Errorf("no line %s", want)
		}
	}
	scales = nil // the revision is gone
	if text := scrape(t, m); strings.Contains(text, "autoscaler_desired_pods{") {
		t.Errorf("a gone revision's gauges remain:\n%s", text)
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInstanceMetrics(t *testing.T) {
	t.Parallel()
	v1, v2 := t.TempDir(), t.TempDir()
	writeFiles(t, v1, map[string]string{
		"memory/knbox/pod1/memory.usage_in_bytes":       "10000\n",
		"memory/knbox/pod1/memory.stat":                 "cache 5000\ntotal_inactive_file 3000\n",
		"cpuacct/knbox/pod1/cpuacct.usage":              "2500000000\n",
		"memory/knbox/proxy_pod1/memory.usage_in_bytes": "100\n",
		"memory/knbox/proxy_pod1/memory.stat":           "total_inactive_file 400\n", // more than usage: 0
		"cpuacct/knbox/proxy_pod1/cpuacct.usage":        "1000000\n",
		"memory/knbox/stranger/memory.usage_in_bytes":   "1\n", // not an instance
	})
	writeFiles(t, v2, map[string]string{
		"cgroup.controllers":        "cpu memory\n",
		"knbox/pod1/cpu.stat":       "usage_usec 1500000\nuser_usec 1000000\n",
		"knbox/pod1/memory.current": "8192\n",
		"knbox/pod1/memory.stat":    "anon 4096\ninactive_file 1024\n",
	})
	for name, root := range map[string]string{"v1": v1, "v2": v2} {
		t.Run(name, func(t *testing.T) {
			m := New(Options{Labels: labels})
			insts := []Instance{{ID: "pod1", Namespace: "default", Revision: "hello-00001", Restarts: 2}}
			if err := m.AddInstances(func() []Instance { return insts }, Cgroups{Root: root}); err != nil {
				t.Fatal(err)
			}
			text := scrape(t, m)
			want := []string{
				`kube_pod_container_status_restarts_total{namespace="default",pod="pod1",revision_name="hello-00001"} 2`,
				`knbox_instances{configuration_name="hello",namespace_name="default",revision_name="hello-00001",service_name="hello"} 1`,
			}
			if name == "v1" {
				want = append(want,
					`container_cpu_usage_seconds_total{container="",namespace="default",pod="pod1",revision_name="hello-00001"} 2.5`,
					`container_memory_working_set_bytes{container="",namespace="default",pod="pod1",revision_name="hello-00001"} 7000`,
					`container_cpu_usage_seconds_total{container="proxy",namespace="default",pod="pod1",revision_name="hello-00001"} 0.001`,
					`container_memory_working_set_bytes{container="proxy",namespace="default",pod="pod1",revision_name="hello-00001"} 0`)
			} else {
				want = append(want,
					`container_cpu_usage_seconds_total{container="",namespace="default",pod="pod1",revision_name="hello-00001"} 1.5`,
					`container_memory_working_set_bytes{container="",namespace="default",pod="pod1",revision_name="hello-00001"} 7168`)
			}
			for _, w := range want {
				if !hasLine(text, w) {
					t.Errorf("no line %s", w)
				}
			}
			if strings.Contains(text, "stranger") {
				t.Error("a cgroup of no instance is reported")
			}
			insts = nil
			if text := scrape(t, m); strings.Contains(text, "pod1") {
				t.Errorf("a gone instance is still reported:\n%s", text)
			}
		})
	}
}

func TestColdStarts(t *testing.T) {
	t.Parallel()
	m := New(Options{Labels: labels})
	before := m.starts.since.Add(-time.Hour)
	now := time.Now()
	count := func() int { return int(testutil.CollectAndCount(m.coldStarts)) }
	// An adopted instance (created before knbox started) is not timed.
	m.InstanceChanged(InstanceStatus{ID: "old", Namespace: "default", Revision: "hello-00001", Created: before})
	m.InstanceChanged(InstanceStatus{ID: "old", Namespace: "default", Revision: "hello-00001", Created: before, Ready: true})
	// One seen ready at first sight is not timed either: its start was missed.
	m.InstanceChanged(InstanceStatus{ID: "seen", Namespace: "default", Revision: "hello-00001", Created: now, Ready: true})
	if n := count(); n != 0 {
		t.Fatalf("%d cold starts, want none", n)
	}
	m.InstanceChanged(InstanceStatus{ID: "new", Namespace: "default", Revision: "hello-00001", Created: now})
	m.InstanceChanged(InstanceStatus{ID: "new", Namespace: "default", Revision: "hello-00001", Created: now, Ready: true})
	m.InstanceChanged(InstanceStatus{ID: "new", Namespace: "default", Revision: "hello-00001", Created: now}) // unready again
	m.InstanceChanged(InstanceStatus{ID: "new", Namespace: "default", Revision: "hello-00001", Created: now, Ready: true})
	text := scrape(t, m)
	if want := `knbox_instance_cold_start_seconds_count{configuration_name="hello",namespace_name="default",revision_name="hello-00001",service_name="hello"} 1`; !hasLine(text, want) {
		t.Errorf("no line %s in\n%s", want, text)
	}
	for _, id := range []string{"old", "seen", "new"} {
		m.InstanceChanged(InstanceStatus{ID: id, Gone: true})
	}
	if len(m.starts.pending) != 0 {
		t.Errorf("gone instances kept: %v", m.starts.pending)
	}
}

func TestAPIRequestMetrics(t *testing.T) {
	t.Parallel()
	m := New(Options{})
	m.ObserveAPIRequest(APIRequest{Verb: "LIST", Version: "v1", Resource: "configmaps", Scope: "namespace", Code: 200, Duration: 3 * time.Millisecond})
	m.ObserveAPIRequest(APIRequest{Verb: "WATCH", Group: "serving.knative.dev", Version: "v1", Resource: "services", Scope: "namespace", Code: 200, Duration: time.Hour})
	text := scrape(t, m)
	for _, want := range []string{
		`apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 1`,
		`apiserver_request_total{code="200",component="apiserver",group="serving.knative.dev",resource="services",scope="namespace",subresource="",verb="WATCH",version="v1"} 1`,
		`apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1",le="0.005"} 1`,
	} {
		if !hasLine(text, want) {
			t.Errorf("no line %s", want)
		}
	}
	if strings.Contains(text, `apiserver_request_duration_seconds_count{component="apiserver",group="serving.knative.dev"`) {
		t.Error("a watch is in the latency histogram")
	}
}

func TestStoreAndImageMetrics(t *testing.T) {
	t.Parallel()
	m := New(Options{})
	watchers := 3
	if err := m.AddStore(func() int { return watchers }); err != nil {
		t.Fatal(err)
	}
	m.ObserveImagePull(2*time.Second, 1000)
	m.ObserveImagePull(time.Second, 500)
	m.ObserveStoreCommit(3 * time.Millisecond)
	m.ObserveStoreCommit(time.Second)
	text := scrape(t, m)
	for _, want := range []string{"knbox_store_watchers 3", "knbox_store_commit_duration_seconds_count 2", `knbox_store_commit_duration_seconds_bucket{le="0.004"} 1`,
		"knbox_image_pull_bytes_total 1500", "knbox_image_pull_duration_seconds_count 2"} {
		if !hasLine(text, want) {
			t.Errorf("no line %s", want)
		}
	}
}

func FuzzParseFlatKeyed(f *testing.F) {
	f.Add([]byte("cache 5000\ntotal_inactive_file 3000\n"), "total_inactive_file")
	f.Add([]byte("usage_usec 1500000\n"), "usage_usec")
	f.Add([]byte("inactive_file max\n"), "inactive_file")
	f.Add([]byte("inactive_file 18446744073709551616\n"), "inactive_file")
	f.Add([]byte(""), "")
	f.Add(bytes.Repeat([]byte("x"), 70000), "x")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		v, ok := parseFlatKeyed(b, key)
		if !ok && v != 0 {
			t.Fatalf("not found but %d", v)
		}
		if n, ok := parseUint(b); !ok && n != 0 {
			t.Fatalf("not a number but %d", n)
		}
	})
}

var _ io.Writer = (*syncBuffer)(nil)
