package apiserver_test

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servingcfg "knative.dev/serving/pkg/apis/config"
	autoscalercfg "knative.dev/serving/pkg/autoscaler/config"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/store"
)

const testToken = "test-token-0123456789"

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

func servingConfig(t testing.TB) *servingcfg.Config {
	t.Helper()
	d, err := servingcfg.NewDefaultsConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := servingcfg.NewFeaturesConfigFromMap(map[string]string{"kubernetes.podspec-runtimeclassname": "enabled"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := autoscalercfg.NewConfigFromMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &servingcfg.Config{Defaults: d, Features: f, Autoscaler: a}
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return startEnv(t, t.TempDir(), store.Options{})
}

func startEnv(t *testing.T, dir string, opts store.Options) *env {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "knbox.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.New(apiserver.Options{
		Store:    st,
		Kinds:    apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: servingConfig(t)},
		Authenticate: func(h string) (admission.User, bool) {
			if subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+testToken)) == 1 {
				return admission.User{Name: "alice@example.com", Groups: []string{"system:masters"}}, true
			}
			return admission.User{}, false
		},
		Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(func() {
		cancel()
		ts.Close()
		_ = st.Close()
	})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	cfg := &rest.Config{Host: ts.URL, BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, Timeout: 30 * time.Second, WarningHandler: rest.NoWarnings{}}
	e := &env{t: t, url: ts.URL, cfg: cfg, http: ts.Client(), store: st, dir: dir}
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
