package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestMetricsAndAccessLog: a Service, N requests, then /metrics scraped as
// Prometheus would: with the admin token on the API address (200, Knative's
// names and labels, the counts of the requests sent), with a token RBAC
// does not grant /metrics (403), and on the plain --metrics-addr; the
// access log has one JSON line per request; knbox's own log is JSON.
func TestMetricsAndAccessLog(t *testing.T) {
	requireTool(t, "runc")
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	const viewerToken = "viewer-0123456789"
	if err := os.WriteFile(tokens, []byte(viewerToken+",viewer,2001,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	accessLog := filepath.Join(t.TempDir(), "access.log")
	metricsAddr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "knbox.yaml")
	cfgYAML := fmt.Sprintf("observability:\n  accessLog:\n    enabled: true\n    path: %s\n", accessLog)
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerWith(t, dir, "", "--config", cfgPath, "--token-auth-file", tokens, "--metrics-addr", metricsAddr, "--log-format", "json")
	k := &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}

	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    metadata:\n      annotations:\n        autoscaling.knative.dev/target: \"1\"\n    spec:\n      containers:\n      - image: %s/runtime-info:v1\n", reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("service not ready: %v\n%s", err, out)
	}
	url := k.must("", "get", "ksvc", "hello", "-o", "jsonpath={.status.url}")
	host := strings.TrimPrefix(url, "http://")
	data := &http.Client{Timeout: 30 * time.Second}
	const n = 7
	for i := range n {
		req, _ := http.NewRequest("GET", "http://"+srv.httpAddr+fmt.Sprintf("/?req=%d", i), nil)
		req.Host = host
		resp, err := data.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := os.ReadFile(accessLog)
			t.Fatalf("GET %s: %d\naccess log:\n%s", url, resp.StatusCode, b)
		}
	}

	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	adminToken := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
	api := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(c *http.Client, url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
		return resp.StatusCode, string(b)
	}
	// value returns the sample of the series name{labels...} (every
	// label given must be on it), or -1.
	value := func(text, name string, labels ...string) float64 {
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(nil, 1<<20)
	lines:
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, name+"{") && (len(labels) > 0 || !strings.HasPrefix(line, name+" ")) {
				continue
			}
			for _, l := range labels {
				if !strings.Contains(line, l) {
					continue lines
				}
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err == nil {
				return v
			}
		}
		return -1
	}
	rev := []string{`namespace_name="default"`, `service_name="hello"`, `configuration_name="hello"`, `revision_name="hello-00001"`}
	ok200 := append(rev[:len(rev):len(rev)], `response_code="200"`, `response_code_class="2xx"`)

	// The metrics goroutine counts off the request path: await the count.
	var text string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := scrape(api, "https://"+srv.apiAddr+"/metrics", adminToken)
		if code != 200 {
			t.Fatalf("admin GET /metrics: %d\n%s", code, body)
		}
		text = body
		if value(text, "revision_request_count", ok200...) == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   func(float64) bool
	}{
		{"revision_request_count", ok200, func(v float64) bool { return v == n }},
		{"revision_request_latencies_count", ok200, func(v float64) bool { return v == n }},
		{"revision_app_request_count", ok200, func(v float64) bool { return v == n }},
		{"revision_request_latencies_bucket", append(ok200, `le="+Inf"`), func(v float64) bool { return v == n }},
		{"revision_queue_depth", rev, func(v float64) bool { return v >= 0 }},
		{"autoscaler_desired_pods", rev, func(v float64) bool { return v >= 1 }},
		{"autoscaler_actual_pods", rev, func(v float64) bool { return v >= 1 }},
		{"autoscaler_target_concurrency_per_pod", rev, func(v float64) bool { return v > 0 }},
		{"autoscaler_panic_mode", rev, func(v float64) bool { return v == 0 || v == 1 }},
		{"autoscaler_stable_request_concurrency", rev, func(v float64) bool { return v >= 0 }},
		{"knbox_instance_cold_start_seconds_count", rev, func(v float64) bool { return v >= 1 }},
		{"container_cpu_usage_seconds_total", []string{`namespace="default"`, `revision_name="hello-00001"`}, func(v float64) bool { return v > 0 }},
		{"container_memory_working_set_bytes", []string{`namespace="default"`, `revision_name="hello-00001"`}, func(v float64) bool { return v > 0 }},
		{"kube_pod_container_status_restarts_total", []string{`namespace="default"`, `revision_name="hello-00001"`}, func(v float64) bool { return v == 0 }},
		{"apiserver_request_total", []string{`verb="POST"`, `group="serving.knative.dev"`, `resource="services"`, `code="201"`}, func(v float64) bool { return v >= 1 }},
		{"apiserver_request_duration_seconds_count", []string{`verb="GET"`, `resource="services"`}, func(v float64) bool { return v >= 1 }},
		{"knbox_router_requests_total", []string{`revision="hello-00001"`, `code="2xx"`}, func(v float64) bool { return v == n }},
		{"knbox_store_commit_duration_seconds_count", nil, func(v float64) bool { return v >= 1 }},
		{"knbox_store_watchers", nil, func(v float64) bool { return v >= 1 }}, // the controllers' informers
		{"knbox_image_pull_duration_seconds_count", nil, func(v float64) bool { return v == 1 }},
		{"knbox_image_pull_bytes_total", nil, func(v float64) bool { return v > 1000 }},
		{"knbox_prepared_sandboxes", nil, func(v float64) bool { return v >= 0 }},
		{"knbox_prepared_sandboxes_memory_bytes", nil, func(v float64) bool { return v >= 0 }},
	} {
		if v := value(text, c.name, c.labels...); !c.want(v) {
			t.Errorf("%s{%s} = %v", c.name, strings.Join(c.labels, ","), v)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(text, "\n"+name+" ") {
			t.Errorf("no %s", name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}

	// A scale-up shows in the autoscaler gauges: concurrent slow
	// requests against a target of 1 in flight per instance.
	const slow = 4
	slowDone := make(chan error, slow)
	for range slow {
		go func() {
			req, _ := http.NewRequest("GET", "http://"+srv.httpAddr+"/sleep?ms=10000", nil)
			req.Host = host
			resp, err := data.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			slowDone <- err
		}()
	}
	scaled := false
	deadline = time.Now().Add(20 * time.Second)
	for !scaled && time.Now().Before(deadline) {
		_, body := scrape(api, "https://"+srv.apiAddr+"/metrics", adminToken)
		scaled = value(body, "autoscaler_desired_pods", rev...) >= 2 && value(body, "autoscaler_panic_request_concurrency", rev...) > 0 &&
			value(body, "revision_queue_depth", rev...) >= 1
		if !scaled {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !scaled {
		_, body := scrape(api, "https://"+srv.apiAddr+"/metrics", adminToken)
		t.Errorf("no scale-up in the autoscaler gauges: desired %v, panic concurrency %v, queue depth %v",
			value(body, "autoscaler_desired_pods", rev...), value(body, "autoscaler_panic_request_concurrency", rev...), value(body, "revision_queue_depth", rev...))
	}
	for range slow {
		if err := <-slowDone; err != nil {
			t.Errorf("slow request: %v", err)
		}
	}

	// A token RBAC grants no /metrics is refused; no token is 401.
	if code, body := scrape(api, "https://"+srv.apiAddr+"/metrics", viewerToken); code != 403 || !strings.Contains(body, `cannot get path \"/metrics\"`) {
		t.Errorf("viewer GET /metrics: %d %s", code, body)
	}
	if code, _ := scrape(api, "https://"+srv.apiAddr+"/metrics", ""); code != 401 {
		t.Errorf("anonymous GET /metrics: %d", code)
	}
	// The plain address serves the same registry without a token.
	if code, body := scrape(data, "http://"+metricsAddr+"/metrics", ""); code != 200 || value(body, "revision_request_count", ok200...) != n+slow {
		t.Errorf("GET http://%s/metrics: %d, revision_request_count %v", metricsAddr, code, value(body, "revision_request_count", ok200...))
	}

	// The access log: one JSON line per request.
	type line struct {
		Host, Revision, Instance, Path string
		Status                         int
		Bytes                          int64
		Duration, QueueWait            float64
		ColdStart                      bool `json:"cold_start"`
	}
	var lines []line
	deadline = time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(accessLog)
		if err != nil {
			t.Fatal(err)
		}
		lines = lines[:0]
		for _, s := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var l line
			if s == "" {
				continue
			}
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				t.Fatalf("access log line %q: %v", s, err)
			}
			lines = append(lines, l)
		}
		if len(lines) >= n+slow || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(lines) != n+slow {
		t.Fatalf("%d access log lines, want %d", len(lines), n+slow)
	}
	for i, l := range lines[:n] {
		if l.Host != host || l.Revision != "hello-00001" || l.Instance == "" || l.Status != 200 || l.Bytes <= 0 || l.Duration <= 0 ||
			l.Path != fmt.Sprintf("/?req=%d", i) {
			t.Errorf("access log line %d: %+v", i, l)
		}
	}
	// knbox's own log is JSON too, with --log-format json.
	if !strings.Contains(srv.logs(), `"msg":"knbox serving"`) {
		t.Error(`no {"msg":"knbox serving"} in knbox's log`)
	}
	if fi, err := os.Stat(accessLog); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("access log %v mode %v, want 0600", err, fi.Mode().Perm())
	}
}
