package apiserver_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servingcfg "knative.dev/serving/pkg/apis/config"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/store"
)

const testToken = apiservertest.Token

// env is a running API server over a real store, reached over real HTTPS.
type env struct {
	t       *testing.T
	url     string
	cfg     *rest.Config
	serving *servingclient.Clientset
	kube    *kubernetes.Clientset
	dyn     *dynamic.DynamicClient
	http    *http.Client
	store   *store.Store
	dir     string
}

func servingConfig(t testing.TB) *servingcfg.Config { return apiservertest.ServingConfig(t) }

func newEnv(t *testing.T) *env {
	t.Helper()
	return startEnv(t, t.TempDir(), store.Options{})
}

func startEnv(t *testing.T, dir string, opts store.Options) *env {
	t.Helper()
	return startEnvFrom(t, apiservertest.StartWith(t, apiservertest.Options{Dir: dir, Store: opts, User: "alice@example.com"}))
}

// startEnvFrom makes the clients of a server already started.
func startEnvFrom(t *testing.T, api *apiservertest.Env) *env {
	t.Helper()
	cfg := api.Config
	e := &env{t: t, url: api.URL, cfg: cfg, store: api.Store, dir: filepath.Dir(api.Kubeconfig)}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(api.CAPEM)
	e.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var err error
	if e.serving, err = servingclient.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// do sends a raw request with the test token and returns status and body.
func (e *env) do(method, path, contentType string, body []byte, hdr ...string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
