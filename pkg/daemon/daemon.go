// Package daemon assembles `knbox serve`: it opens the store, creates the
// API server's credentials, wires admission with knbox's configuration, and
// serves the API (HTTPS) and the data plane (HTTP) until its context ends.
//
// It is wiring only: behaviour belongs to the packages it assembles.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/pki"
	"github.com/knbox/knbox/pkg/routing"
	"github.com/knbox/knbox/pkg/store"
)

// KubeconfigFile is the kubeconfig written into the data directory at
// start, with the server's real address; `knbox kubeconfig` prints it.
const KubeconfigFile = "kubeconfig"

// Run serves until ctx ends. ready, if not nil, is called once both
// listeners accept connections.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, ready func(api, data string)) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	creds, err := pki.Ensure(cfg.DataDir, cfg.APIHosts)
	if err != nil {
		return err
	}
	authn, err := pki.NewAuthenticator(creds.Token, cfg.TokenAuthFile)
	if err != nil {
		return err
	}
	serving, err := cfg.Serving()
	if err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "knbox.db"), store.Options{})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	// The controllers are clients of the API like any other, with an
	// identity of their own whose token lives only in memory.
	internalToken, err := randomToken()
	if err != nil {
		return err
	}
	var plane atomic.Pointer[dataPlane] // set once the data plane is up
	var servingClient atomic.Pointer[servingclient.Clientset]
	srv, err := apiserver.New(apiserver.Options{
		Store:    st,
		Kinds:    apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: serving},
		Authenticate: func(h string) (admission.User, bool) {
			if subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+internalToken)) == 1 {
				return admission.User{Name: ControllerUser, Groups: []string{"system:knbox"}}, true
			}
			u, ok := authn.Authenticate(h)
			return admission.User{Name: u.Name, UID: u.UID, Groups: u.Groups}, ok
		},
		MaxRequestBodyBytes: cfg.MaxRequestBodyBytes,
		Logger:              log,
		Extensions: map[string]http.Handler{
			"images": imagesHandler(func() *image.Store {
				if dp := plane.Load(); dp != nil {
					return dp.images
				}
				return nil
			}, func() servingclient.Interface {
				if c := servingClient.Load(); c != nil {
					return c
				}
				return nil
			}),
		},
		Logs: func(ctx context.Context, w io.Writer, ns, rev string, o apiserver.LogOptions) error {
			dp := plane.Load()
			if dp == nil {
				return errors.New("the data plane is starting")
			}
			return dp.mgr.LogsContext(ctx, ns, rev, o.Follow, o.Since, w)
		},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		return err
	}

	cert, err := tls.LoadX509KeyPair(creds.CertFile, creds.KeyFile)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	apiLn, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("listen on --api-addr %s: %w", cfg.APIAddr, err)
	}
	dataLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	apiURL := "https://" + clientAddr(apiLn.Addr())
	kc, err := pki.Kubeconfig(apiURL, creds.CACertPEM, creds.Token)
	if err != nil {
		return err
	}
	if err := writePrivate(filepath.Join(cfg.DataDir, KubeconfigFile), kc); err != nil {
		return err
	}

	api := &http.Server{
		Handler:           srv.Handler(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	// The data plane answers 503 until the router is ready (the runtime
	// handlers are probed first).
	var dataHandler atomic.Pointer[http.Handler]
	data := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := dataHandler.Load(); h != nil {
				(*h).ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "knbox: starting")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 3)
	go func() { errc <- api.ServeTLS(apiLn, "", "") }()
	go func() { errc <- data.Serve(dataLn) }()
	var dataTLS *http.Server
	if cfg.HTTPSAddr != "" {
		dcert, err := tls.LoadX509KeyPair(cfg.HTTPSCertFile, cfg.HTTPSKeyFile)
		if err != nil {
			return fmt.Errorf("httpsCertFile/httpsKeyFile: %w", err)
		}
		tlsLn, err := net.Listen("tcp", cfg.HTTPSAddr)
		if err != nil {
			return fmt.Errorf("listen on httpsAddr %s: %w", cfg.HTTPSAddr, err)
		}
		// HTTP/2 over TLS comes with net/http's ALPN; the router's h2c
		// wrapper passes TLS requests through untouched.
		dataTLS = &http.Server{Handler: data.Handler, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{dcert}, MinVersion: tls.VersionTLS12}}
		go func() { errc <- dataTLS.ServeTLS(tlsLn, "", "") }()
		defer func() {
			c, done := context.WithTimeout(context.Background(), 5*time.Second)
			defer done()
			_ = dataTLS.Shutdown(c)
		}()
	}

	kube, err := kubernetes.NewForConfig(internalConfig(apiURL, creds.CACertPEM, internalToken))
	if err != nil {
		return fmt.Errorf("internal client: %w", err)
	}
	sc, err := servingclient.NewForConfig(internalConfig(apiURL, creds.CACertPEM, internalToken))
	if err != nil {
		return fmt.Errorf("internal client: %w", err)
	}
	servingClient.Store(sc)
	handlers := setUpRuntimes(ctx, cfg, kube, log.With("component", "runtime"))
	routes := routing.NewTable()
	dp, err := newDataPlane(ctx, cfg, serving.Autoscaler, kube, handlers, routes, log)
	if err != nil {
		return err
	}
	dp.apiURL = apiURL
	plane.Store(dp)
	var dh http.Handler = h2c.NewHandler(dp.router, &http2.Server{})
	dataHandler.Store(&dh)
	dpDone := make(chan struct{})
	go func() {
		defer close(dpDone)
		dp.run(ctx)
	}()
	ctl, err := newController(cfg, apiURL, creds.CACertPEM, internalToken, dataLn.Addr(), dp.runtime(), routes, log)
	if err != nil {
		return err
	}
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		if err := ctl.Run(ctx, 2); err != nil {
			log.Error("controllers stopped", "err", err)
		}
	}()
	defer func() {
		cancel()
		<-ctlDone
		<-dpDone
		// Stop the instances in order; what a kill -9 leaves behind is
		// cleaned by Recover at the next start instead.
		stop, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		if err := dp.mgr.Close(stop); err != nil {
			log.Warn("stopping instances", "err", err)
		}
	}()
	log.Info("knbox serving", "api", apiURL, "http", "http://"+dataLn.Addr().String(), "dataDir", cfg.DataDir)
	if ready != nil {
		ready(apiURL, "http://"+dataLn.Addr().String())
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = api.Shutdown(shutdown)
	_ = data.Shutdown(shutdown)
	return err
}

// ControllerUser is the identity the in-process controllers act as.
const ControllerUser = "system:knbox:controller"

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate internal token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// internalConfig is the client configuration of knbox's own components.
func internalConfig(apiURL string, caPEM []byte, token string) *rest.Config {
	return &rest.Config{Host: apiURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		QPS: 200, Burst: 400, Timeout: 30 * time.Second, UserAgent: "knbox", WarningHandler: rest.NoWarnings{}}
}

// newController builds the reconcilers, talking to this server over
// loopback HTTPS as the controller user.
func newController(cfg *config.Config, apiURL string, caPEM []byte, token string, data net.Addr, rt controller.Runtime, routes *routing.Table, log *slog.Logger) (*controller.Controller, error) {
	client, err := servingclient.NewForConfig(internalConfig(apiURL, caPEM, token))
	if err != nil {
		return nil, fmt.Errorf("controller client: %w", err)
	}
	network, err := cfg.Network()
	if err != nil {
		return nil, err
	}
	domain, err := cfg.Domain()
	if err != nil {
		return nil, err
	}
	gc, err := cfg.GC()
	if err != nil {
		return nil, err
	}
	port := 0
	if tcp, ok := data.(*net.TCPAddr); ok {
		port = tcp.Port
	}
	return controller.New(controller.Options{
		Client: client, Runtime: rt, Routes: routes,
		Network: network, Domain: domain, GC: gc, HTTPPort: port, Logger: log.With("component", "controller"),
	})
}

// clientAddr is the address a local client dials: a wildcard listen
// address becomes loopback, which the serving certificate covers.
func clientAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Port))
}

func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
