package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/routing"
)

// fakeInstances is a hand-written Instances: the runtime cannot run here.
type fakeInstances struct {
	mu      sync.Mutex
	cfgs    map[revKey]RevisionConfig
	eps     map[revKey][]Endpoint
	subs    []func(namespace, revision string)
	poked   map[revKey]int
	drained []string

	pokedCh   chan revKey // one per Poke, dropped when full
	drainedCh chan string // one per Drained, dropped when full
}

func newFakeInstances() *fakeInstances {
	return &fakeInstances{
		cfgs:      map[revKey]RevisionConfig{},
		eps:       map[revKey][]Endpoint{},
		poked:     map[revKey]int{},
		pokedCh:   make(chan revKey, 100),
		drainedCh: make(chan string, 100),
	}
}

func (f *fakeInstances) Config(ns, rev string) (RevisionConfig, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cfgs[revKey{ns, rev}]
	return c, ok
}

func (f *fakeInstances) Endpoints(ns, rev string) []Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Endpoint(nil), f.eps[revKey{ns, rev}]...)
}

func (f *fakeInstances) Subscribe(fn func(ns, rev string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
}

// poke records the router's Options.Poke (newEnv wires it), which is how
// a revision at zero is activated.
func (f *fakeInstances) poke(ns, rev string, _ int) {
	f.mu.Lock()
	f.poked[revKey{ns, rev}]++
	f.mu.Unlock()
	select {
	case f.pokedCh <- revKey{ns, rev}:
	default:
	}
}

func (f *fakeInstances) Drained(ns, rev, id string) {
	f.mu.Lock()
	f.drained = append(f.drained, ns+"/"+rev+"/"+id)
	f.mu.Unlock()
	select {
	case f.drainedCh <- id:
	default:
	}
}

func (f *fakeInstances) setConfig(ns, rev string, c RevisionConfig) {
	f.mu.Lock()
	f.cfgs[revKey{ns, rev}] = c
	f.mu.Unlock()
}

// setEndpoints replaces a revision's endpoints and notifies, as the
// runtime glue does (the subscribers run with no lock held).
func (f *fakeInstances) setEndpoints(ns, rev string, eps ...Endpoint) {
	f.mu.Lock()
	f.eps[revKey{ns, rev}] = eps
	subs := append(([]func(string, string))(nil), f.subs...)
	f.mu.Unlock()
	for _, fn := range subs {
		fn(ns, rev)
	}
}

func (f *fakeInstances) drainedList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.drained...)
}

func (f *fakeInstances) pokeCount(ns, rev string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.poked[revKey{ns, rev}]
}

// loopbackEndpoint dials a test server on loopback.
func loopbackEndpoint(id string, srv *httptest.Server) Endpoint {
	addr := srv.Listener.Addr().String()
	return Endpoint{ID: id, Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
}

// deadEndpoint never connects.
func deadEndpoint(id string, calls *countingDial) Endpoint {
	return Endpoint{ID: id, Dial: func(context.Context) (net.Conn, error) {
		calls.add()
		return nil, errors.New("connection refused (test)")
	}}
}

type countingDial struct {
	mu sync.Mutex
	n  int
}

func (c *countingDial) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *countingDial) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// env is a router served on loopback (HTTP/1.1 and h2c), with a fake
// Instances and a routing table.
type env struct {
	t      testing.TB
	table  *routing.Table
	inst   *fakeInstances
	router *Router
	srv    *testServer
	client *http.Client
}

// testServer is the router's Server on a loopback listener, shaped like
// an httptest.Server for the tests.
type testServer struct {
	URL      string
	Listener net.Listener
	server   *Server
	done     chan error
}

// serveRouter serves r with a Server on a new loopback port.
func serveRouter(t testing.TB, r *Router) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{URL: "http://" + ln.Addr().String(), Listener: ln, server: &Server{Router: r}, done: make(chan error, 1)}
	go func() { s.done <- s.server.Serve(ln) }()
	t.Cleanup(s.Close)
	return s
}

// Close closes the server and its connections.
func (s *testServer) Close() {
	_ = s.server.Close()
	<-s.done
	s.done <- http.ErrServerClosed // Close may be called again
}

// newEnv serves a new Router; tune, if any, adjusts it before it serves.
func newEnv(t testing.TB, opts Options, tune ...func(*Router)) *env {
	t.Helper()
	e := &env{t: t, table: routing.NewTable(), inst: newFakeInstances()}
	opts.Table, opts.Instances = e.table, e.inst
	userPoke := opts.Poke
	opts.Poke = func(ns, rev string, waiting int) {
		e.inst.poke(ns, rev, waiting)
		if userPoke != nil {
			userPoke(ns, rev, waiting)
		}
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(r)
	}
	e.router = r
	e.srv = serveRouter(t, r)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 50}, Timeout: 30 * time.Second}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// backend starts an HTTP/1.1 test server on loopback.
func backend(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// service publishes a route with one revision served by srv.
func (e *env) service(ns, name, rev string, cfg RevisionConfig, srv *httptest.Server) string {
	host := name + "." + ns + ".example.com"
	e.inst.setConfig(ns, rev, cfg)
	if srv != nil {
		e.inst.setEndpoints(ns, rev, loopbackEndpoint(rev+"-0", srv))
	}
	e.table.Set(routing.Route{Namespace: ns, Name: name, Host: host,
		Traffic: []routing.Split{{Revision: rev, Percent: 100}}})
	return host
}

// get sends a request with the given Host to the router.
func (e *env) do(method, host, path string, body io.Reader, hdr http.Header) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Host = host
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, host, err)
	}
	return resp, string(b)
}

func (e *env) get(host string) (*http.Response, string) {
	e.t.Helper()
	return e.do(http.MethodGet, host, "/", nil, nil)
}

// queued is the number of requests waiting for a revision.
func (e *env) queued(ns, rev string) int {
	rv := e.router.revision(ns, rev)
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.queue.n
}

// inflight is the number of requests a revision counts in flight.
func (e *env) inflight(ns, rev string) int {
	rv := e.router.revision(ns, rev)
	rv.mu.Lock()
	defer rv.mu.Unlock()
	n := rv.inflight
	for _, ep := range rv.ready {
		n += ep.inflight << 16 // an endpoint slot leaked shows up too
	}
	return n
}

func (e *env) readyCount(ns, rev string) int {
	rv := e.router.revision(ns, rev)
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return len(rv.ready)
}

// eventually waits for cond, failing the test after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger routes debug logs to t.Log until the test ends.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// gate blocks handlers until it is opened (or the test ends).
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait(ctx context.Context) {
	select {
	case <-g.ch:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
}
