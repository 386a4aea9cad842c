package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
	"github.com/knbox/knbox/pkg/pki"
)

// TestApplyThenCurl is the product's promise end to end: an image in a
// registry (in-process, on loopback), a Service applied with kubectl, and a
// request through knbox's router that reaches a real container (runc, the
// default RuntimeClass), which sees the Knative runtime contract's
// environment.
func TestApplyThenCurl(t *testing.T) {
	requireTool(t, "runc")
	// The data plane also serves HTTPS with a configured certificate.
	certDir := t.TempDir()
	creds, err := pki.Ensure(certDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "knbox.yaml")
	cfgYAML := fmt.Sprintf("httpsAddr: %s\nhttpsCertFile: %s\nhttpsKeyFile: %s\n", httpsAddr, creds.CertFile, creds.KeyFile)
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--config", cfgPath)
	reg := imagetest.StartRegistry(t)
	ref := imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	_ = ref
	svc := fmt.Sprintf(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    spec:
      containers:
      - image: %s/runtime-info:v1
        env:
        - name: TARGET
          value: knbox
`, reg)
	k.must(svc, "apply", "-f", "-")
	out, err := k.run("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s")
	if err != nil {
		ksvc, _ := k.run("", "get", "ksvc,rev", "-o", "yaml")
		t.Fatalf("service not ready: %v\n%s\n%s\n%s", err, out, ksvc, k.srv.logs())
	}
	url := k.must("", "get", "ksvc", "hello", "-o", "jsonpath={.status.url}")
	if !strings.HasPrefix(url, "http://hello.default.localhost:") {
		t.Fatalf("url %q", url)
	}

	// curl http://hello.default.localhost:PORT, dialing loopback directly
	// (names under localhost need not resolve on every machine).
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, k.srv.httpAddr)
		},
	}}
	resp, err := client.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var info struct {
		Env map[string]string `json:"env"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatalf("runtime-info answer: %v\n%s", err, body)
	}
	for k, v := range map[string]string{"PORT": "8080", "K_SERVICE": "hello", "K_CONFIGURATION": "hello", "K_REVISION": "hello-00001", "TARGET": "knbox"} {
		if info.Env[k] != v {
			t.Errorf("env %s=%q, want %q", k, info.Env[k], v)
		}
	}
	// The same over HTTPS: the container sees X-Forwarded-Proto https.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(creds.CACertPEM)
	tlsClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, httpsAddr)
		},
	}}
	req, _ := http.NewRequest("GET", "https://localhost/", nil)
	req.Host = strings.TrimPrefix(url, "http://")
	resp, err = tlsClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var tlsInfo struct {
		Request struct {
			Headers map[string][]string `json:"headers"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &tlsInfo); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPS: %d %v\n%s", resp.StatusCode, err, body)
	}
	if got := tlsInfo.Request.Headers["X-Forwarded-Proto"]; len(got) != 1 || got[0] != "https" {
		t.Errorf("X-Forwarded-Proto over HTTPS: %v", got)
	}

	// What the container writes to stdout, stderr and /dev/log lands in its
	// logs, which `knbox logs` reads through the API (the Revision's logUrl).
	resp, err = client.Get(url + "/log?msg=hello-from-e2e")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logURL := k.must("", "get", "rev", "hello-00001", "-o", "jsonpath={.status.logUrl}")
	if !strings.HasPrefix(logURL, "https://"+k.srv.apiAddr+"/apis/serving.knative.dev/v1/namespaces/default/revisions/hello-00001/log") {
		t.Errorf("logUrl %q", logURL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		logs, err := run(t, []string{"KNBOX_DATA_DIR=" + k.srv.dir, "KUBECONFIG="}, "", knboxBin, "logs", "hello")
		if err == nil && strings.Count(logs, "hello-from-e2e") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("knbox logs hello: %v\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// An unknown host gets a short 404.
	req, _ = http.NewRequest("GET", "http://nope.default.localhost/", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown host: %d", resp.StatusCode)
	}
}
