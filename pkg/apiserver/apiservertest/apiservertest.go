// Package apiservertest starts a real knbox API server (real store, real
// admission, real HTTPS) inside a test, for the tests of its clients.
package apiservertest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	servingcfg "knative.dev/serving/pkg/apis/config"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/pki"
	"github.com/knbox/knbox/pkg/store"
)

// Token is the bearer token the test server accepts (user "admin").
const Token = "apiservertest-token"

// Env is a running test server.
type Env struct {
	Server     *apiserver.Server
	URL        string
	Config     *rest.Config // authenticated client configuration
	Kubeconfig string       // path of a kubeconfig for it
	Store      *store.Store
	CAPEM      []byte
}

// ServingConfig is knbox's default configuration: Knative's defaults with
// knbox's deviations (pkg/config).
func ServingConfig(t testing.TB) *servingcfg.Config {
	t.Helper()
	c, err := config.Default().Serving()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Options adjust a test server; zero values are the defaults.
type Options struct {
	Dir   string        // "" = a new temporary directory
	Store store.Options // e.g. a small EventLogSize
	// NoLabelIndex: the store keeps no label index (Store.Labels is
	// otherwise apiserver.StoredLabels, as in knbox serve), so lists by
	// label read every object: for comparisons.
	NoLabelIndex bool
	User         string // the token's user; "" = "admin"
	// Users are more bearer tokens and their users (not in
	// system:masters: RBAC decides what they may do).
	Users map[string]admission.User
	// Server adjusts the server's options before it is built.
	Server func(*apiserver.Options)
}

// Start runs a server in dir ("" = a new temporary directory) until the
// test ends.
func Start(t testing.TB, dir string) *Env {
	t.Helper()
	return StartWith(t, Options{Dir: dir})
}

// StartWith runs a server with opts until the test ends.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	user := opts.User
	if user == "" {
		user = "admin"
	}
	if opts.Store.Labels == nil && !opts.NoLabelIndex {
		opts.Store.Labels = apiserver.StoredLabels
	}
	st, err := store.Open(filepath.Join(dir, "knbox.db"), opts.Store)
	if err != nil {
		t.Fatal(err)
	}
	so := apiserver.Options{
		Store:    st,
		Kinds:    apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: ServingConfig(t)},
		Authenticate: func(h string) (admission.User, bool) {
			if subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+Token)) == 1 {
				return admission.User{Name: user, Groups: []string{"system:masters"}}, true
			}
			for token, u := range opts.Users {
				if subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+token)) == 1 {
					return u, true
				}
			}
			return admission.User{}, false
		},
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if opts.Server != nil {
		opts.Server(&so)
	}
	srv, err := apiserver.New(so)
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
	kc, err := pki.Kubeconfig(ts.URL, caPEM, Token)
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return &Env{
		Server: srv, URL: ts.URL, Store: st, CAPEM: caPEM, Kubeconfig: kcPath,
		Config: &rest.Config{Host: ts.URL, BearerToken: Token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
			Timeout: 30 * time.Second, WarningHandler: rest.NoWarnings{}},
	}
}

// ConfigFor is the client configuration of another bearer token (one of
// Options.Users, or any string, to see it refused).
func (e *Env) ConfigFor(token string) *rest.Config {
	c := rest.CopyConfig(e.Config)
	c.BearerToken = token
	return c
}
