package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestTracingSpans: with config-tracing's zipkin backend, a request with
// a traceparent gives a knbox_proxy span in the client's trace, child of
// the client's span, at an in-process Zipkin collector; a request without
// one gives a proxy span that is the parent the instance was sent.
func TestTracingSpans(t *testing.T) {
	requireTool(t, "runc")
	type span struct {
		TraceID  string `json:"traceId"`
		ParentID string `json:"parentId"`
		ID       string `json:"id"`
		Name     string `json:"name"`
	}
	var mu sync.Mutex
	var spans []span
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got []span
		if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&got); err != nil {
			t.Errorf("collector: %v", err)
		}
		mu.Lock()
		spans = append(spans, got...)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	col.Listener.Close()
	col.Listener = ln
	col.Start()
	defer col.Close()

	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "knbox.yaml")
	cfg := fmt.Sprintf("configMaps:\n  config-tracing:\n    backend: zipkin\n    zipkin-endpoint: %s/api/v2/spans\n    debug: \"true\"\n", col.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerWith(t, dir, "", "--config", cfgPath)
	k := &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: traced\nspec:\n  template:\n    spec:\n      containers:\n      - image: %s/runtime-info:v1\n", reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/traced", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("service not ready: %v\n%s", err, out)
	}
	host := strings.TrimPrefix(k.must("", "get", "ksvc", "traced", "-o", "jsonpath={.status.url}"), "http://")
	get := func(traceparent string) (sent string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+srv.httpAddr+"/", nil)
		req.Host = host
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var info struct {
			Request struct {
				Headers map[string][]string `json:"headers"`
			} `json:"request"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %d %v", resp.StatusCode, err)
		}
		if v := info.Request.Headers["Traceparent"]; len(v) == 1 {
			return v[0]
		}
		t.Fatalf("the instance got no traceparent: %v", info.Request.Headers)
		return ""
	}
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if sent := get("00-" + traceID + "-" + clientSpan + "-01"); !strings.Contains(sent, traceID) {
		t.Errorf("the client's trace %s was not forwarded: %q", traceID, sent)
	}
	started := strings.Split(get(""), "-") // version, trace, span, flags
	if len(started) != 4 {
		t.Fatalf("started traceparent %v", started)
	}
	find := func(match func(span) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range spans {
			if match(s) {
				return true
			}
		}
		return false
	}
	child := func(s span) bool { return s.Name == "knbox_proxy" && s.TraceID == traceID && s.ParentID == clientSpan }
	root := func(s span) bool {
		return s.Name == "knbox_proxy" && s.TraceID == started[1] && s.ID == started[2] && s.ParentID == ""
	}
	// The exporter sends in batches, every 5s by default.
	deadline := time.Now().Add(60 * time.Second)
	for !(find(child) && find(root)) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if c, r := find(child), find(root); !c || !r {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("spans at the collector: child of the client's span %v, the started trace's root %v: %+v", c, r, spans)
	}
}
