package router

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	"golang.org/x/net/http2/h2c"

	"github.com/knbox/knbox/pkg/routing"
)

// named answers with its name.
func named(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, name)
	}
}

func TestHostRouting(t *testing.T) {
	t.Parallel()
	for _, external := range []bool{true, false} {
		t.Run(fmt.Sprintf("external=%v", external), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{External: external})
			v1, v2, priv := backend(t, named("v1")), backend(t, named("v2")), backend(t, named("private"))
			cfg := RevisionConfig{}
			e.inst.setConfig("default", "hello-1", cfg)
			e.inst.setConfig("default", "hello-2", cfg)
			e.inst.setConfig("default", "private-1", cfg)
			e.inst.setEndpoints("default", "hello-1", loopbackEndpoint("a", v1))
			e.inst.setEndpoints("default", "hello-2", loopbackEndpoint("b", v2))
			e.inst.setEndpoints("default", "private-1", loopbackEndpoint("c", priv))
			e.table.Set(routing.Route{Namespace: "default", Name: "hello", Host: "hello.default.example.com",
				Traffic: []routing.Split{{Revision: "hello-1", Percent: 100}, {Revision: "hello-2", Percent: 0, Tag: "candidate"}},
				Tags:    map[string]string{"candidate-hello.default.example.com": "hello-2"}})
			e.table.Set(routing.Route{Namespace: "default", Name: "private", Host: "private.default.svc.cluster.local",
				ClusterLocal: true, Traffic: []routing.Split{{Revision: "private-1", Percent: 100}}})

			local := http.StatusOK
			if external {
				local = http.StatusNotFound
			}
			for _, tc := range []struct {
				host string
				code int
				body string
			}{
				{"hello.default.example.com", 200, "v1"},
				{"HELLO.Default.Example.COM:8080", 200, "v1"},
				{"hello.default.example.com.", 200, "v1"},
				{"candidate-hello.default.example.com", 200, "v2"},
				{"candidate-hello.default.example.com:80", 200, "v2"},
				{"nope.default.example.com", 404, "knbox: no route for host \"nope.default.example.com\"\n"},
				{"example.com", 404, ""},
				{"[::1]:8080", 404, ""},
				{"private.default.svc.cluster.local", local, ""},
				{"hello.default.svc.cluster.local", local, ""},
				{"hello.default.svc", local, ""},
				{"hello.default", local, ""},
			} {
				resp, body := e.get(tc.host)
				if resp.StatusCode != tc.code {
					t.Errorf("host %q: status %d, want %d (%q)", tc.host, resp.StatusCode, tc.code, body)
					continue
				}
				if tc.body != "" && body != tc.body {
					t.Errorf("host %q: body %q, want %q", tc.host, body, tc.body)
				}
				if tc.code == 404 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
					t.Errorf("host %q: 404 content type %q", tc.host, resp.Header.Get("Content-Type"))
				}
			}

			// A route change is served at once.
			e.table.Delete("default", "hello")
			if resp, _ := e.get("hello.default.example.com"); resp.StatusCode != 404 {
				t.Errorf("deleted route: status %d, want 404", resp.StatusCode)
			}
		})
	}
}

func TestWeightedSplit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	a, b := backend(t, named("a")), backend(t, named("b"))
	e.inst.setConfig("ns", "r-a", RevisionConfig{})
	e.inst.setConfig("ns", "r-b", RevisionConfig{})
	e.inst.setEndpoints("ns", "r-a", loopbackEndpoint("a", a))
	e.inst.setEndpoints("ns", "r-b", loopbackEndpoint("b", b))
	e.table.Set(routing.Route{Namespace: "ns", Name: "split", Host: "split.ns.example.com",
		Traffic: []routing.Split{{Revision: "r-a", Percent: 50}, {Revision: "r-b", Percent: 50}}})
	counts := map[string]int{}
	const n = 200
	for range n {
		resp, body := e.get("split.ns.example.com")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		counts[body]++
	}
	for _, name := range []string{"a", "b"} {
		if counts[name] < n/4 {
			t.Errorf("revision %s got %d of %d requests, want >= %d (%v)", name, counts[name], n, n/4, counts)
		}
	}
}

func TestPickWeights(t *testing.T) {
	t.Parallel()
	tg := &target{splits: []routing.Split{{Revision: "a", Percent: 90}, {Revision: "b", Percent: 10}}, total: 100}
	counts := map[string]int{}
	for range 10000 {
		counts[tg.pick()]++
	}
	// 1000 expected for b; 30 standard deviations is 900.
	if counts["b"] < 500 || counts["b"] > 1500 || counts["a"]+counts["b"] != 10000 {
		t.Errorf("90/10 split gave %v", counts)
	}
	if got := (&target{tagRevision: "t", splits: tg.splits, total: 100}).pick(); got != "t" {
		t.Errorf("tag target picked %q", got)
	}
	if got := (&target{}).pick(); got != "" {
		t.Errorf("empty target picked %q", got)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	type seen struct {
		Host   string
		Header http.Header
		Query  string
		Proto  string
	}
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(seen{Host: r.Host, Header: r.Header, Query: r.URL.RawQuery, Proto: r.Proto})
	})
	host := e.service("default", "hello", "hello-1", RevisionConfig{}, srv)

	sent := http.Header{
		"X-Custom":          {"one", "two"},
		"Authorization":     {"Bearer abc"},
		"Cookie":            {"a=b"},
		"User-Agent":        {"knbox-test/1"},
		"X-Forwarded-For":   {"203.0.113.9"},
		"X-Forwarded-Proto": {"https"},
		"X-Forwarded-Host":  {"evil.example"},
		"Forwarded":         {"for=203.0.113.9;proto=https"},
		"Traceparent":       {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"Tracestate":        {"vendor=x"},
		"X-B3-Traceid":      {"80f198ee56343ba864fe8b2a57d3eff7"},
		"X-B3-Spanid":       {"e457b5a2e4d86bd1"},
		"X-B3-Sampled":      {"1"},
		"B3":                {"80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"},
	}
	resp, body := e.do(http.MethodGet, host+":8080", "/p/a%2Fth?a=1;b=2&c", nil, sent)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got seen
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Host != host+":8080" {
		t.Errorf("Host %q, want %q", got.Host, host+":8080")
	}
	if got.Query != "a=1;b=2&c" {
		t.Errorf("query %q, want it as received", got.Query)
	}
	if got.Proto != "HTTP/1.1" {
		t.Errorf("proto to the instance %q", got.Proto)
	}
	for _, k := range []string{"X-Custom", "Authorization", "Cookie", "User-Agent", "Traceparent", "Tracestate", "X-B3-Traceid", "X-B3-Spanid", "X-B3-Sampled", "B3"} {
		if fmt.Sprint(got.Header[k]) != fmt.Sprint(sent[k]) {
			t.Errorf("%s: %q, want %q as received", k, got.Header[k], sent[k])
		}
	}
	want := map[string]string{
		"X-Forwarded-For":   "127.0.0.1",
		"X-Forwarded-Proto": "http",
		"Forwarded":         `for=127.0.0.1;host="` + host + `:8080";proto=http`,
	}
	for k, v := range want {
		if vs := got.Header[k]; len(vs) != 1 || vs[0] != v {
			t.Errorf("%s: %q, want [%q]", k, vs, v)
		}
	}
	if vs, ok := got.Header["X-Forwarded-Host"]; ok {
		t.Errorf("X-Forwarded-Host from the client was forwarded: %q", vs)
	}

	// No traceparent: one is started.
	resp, body = e.do(http.MethodGet, host, "/", nil, http.Header{"X-B3-Traceid": {"abc"}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got = seen{}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	tp := got.Header.Get("Traceparent")
	if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(tp) ||
		strings.HasPrefix(tp, "00-00000000000000000000000000000000") {
		t.Errorf("started traceparent %q is not a valid W3C traceparent", tp)
	}
	if got.Header.Get("X-B3-Traceid") != "abc" {
		t.Errorf("B3 header not passed: %q", got.Header)
	}
	if f := got.Header.Get("Forwarded"); f != "for=127.0.0.1;host="+host+";proto=http" {
		t.Errorf("Forwarded %q", f)
	}
}

func TestForwardedSyntax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ip, host, proto, want string }{
		{"192.0.2.1", "a.example", "http", "for=192.0.2.1;host=a.example;proto=http"},
		{"2001:db8::1", "a.example:8080", "https", `for="[2001:db8::1]";host="a.example:8080";proto=https`},
		{"", "", "http", "for=unknown;proto=http"},
		{"192.0.2.1", `we"ird\host`, "http", `for=192.0.2.1;host="we\"ird\\host";proto=http`},
	} {
		if got := forwarded(tc.ip, tc.host, tc.proto); got != tc.want {
			t.Errorf("forwarded(%q, %q, %q) = %s, want %s", tc.ip, tc.host, tc.proto, got, tc.want)
		}
	}
	for in, want := range map[string]string{"127.0.0.1:5": "127.0.0.1", "[::1]:5": "::1", "[fe80::1%eth0]:5": "fe80::1", "junk": ""} {
		if got := clientIP(in); got != want {
			t.Errorf("clientIP(%q) = %q, want %q", in, got, want)
		}
	}
}

// concurrencyMeter counts the requests in flight at a backend.
type concurrencyMeter struct {
	mu       sync.Mutex
	cur, max int
	total    int
}

func (m *concurrencyMeter) enter() {
	m.mu.Lock()
	m.cur++
	m.total++
	m.max = max(m.max, m.cur)
	m.mu.Unlock()
}

func (m *concurrencyMeter) leave() {
	m.mu.Lock()
	m.cur--
	m.mu.Unlock()
}

func (m *concurrencyMeter) stats() (maxSeen, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max, m.total
}

func TestContainerConcurrency(t *testing.T) {
	t.Parallel()
	for _, instances := range []int{1, 2} {
		t.Run(fmt.Sprintf("instances=%d", instances), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			meters := make([]*concurrencyMeter, instances)
			var eps []Endpoint
			for i := range instances {
				m := &concurrencyMeter{}
				meters[i] = m
				srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
					m.enter()
					defer m.leave()
					time.Sleep(2 * time.Millisecond) // let requests overlap
					fmt.Fprint(w, "ok")
				})
				eps = append(eps, loopbackEndpoint(fmt.Sprint(i), srv))
			}
			host := e.service("default", "cc", "cc-1", RevisionConfig{ContainerConcurrency: 1}, nil)
			e.inst.setEndpoints("default", "cc-1", eps...)

			const clients, each = 5, 10
			var wg sync.WaitGroup
			var failed atomic.Int32
			for range clients {
				wg.Go(func() {
					for range each {
						req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
						req.Host = host
						resp, err := e.client.Do(req)
						if err != nil {
							failed.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d requests failed", n)
			}
			sum := 0
			for i, m := range meters {
				maxSeen, total := m.stats()
				sum += total
				if maxSeen > 1 {
					t.Errorf("instance %d saw %d requests in flight, containerConcurrency is 1", i, maxSeen)
				}
			}
			if sum != clients*each {
				t.Errorf("instances served %d requests, want %d", sum, clients*each)
			}
		})
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{MaxQueuedPerRevision: 2})
	g := newGate(t)
	defer g.open()
	var arrived atomic.Int32
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		g.wait(r.Context())
		fmt.Fprint(w, "done")
	})
	host := e.service("default", "q", "q-1", RevisionConfig{ContainerConcurrency: 1}, srv)

	codes := make(chan int, 3)
	send := func() {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
		req.Host = host
		resp, err := e.client.Do(req)
		if err != nil {
			codes <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go send()
	eventually(t, "the first request at the instance", func() bool { return arrived.Load() == 1 })
	go send()
	go send()
	eventually(t, "two requests queued", func() bool { return e.queued("default", "q-1") == 2 })

	resp, body := e.get(host)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("with the queue full: status %d, want 503 (%q)", resp.StatusCode, body)
	}
	if arrived.Load() != 1 {
		t.Errorf("%d requests reached the instance while it had one in flight", arrived.Load())
	}
	g.open()
	for range 3 {
		if c := <-codes; c != 200 {
			t.Errorf("queued request: status %d, want 200", c)
		}
	}
}

func TestScaleFromZero(t *testing.T) {
	t.Parallel()
	var pokes atomic.Int32
	e := newEnv(t, Options{Poke: func(ns, rev string, _ int) {
		if ns == "default" && rev == "cold-1" {
			pokes.Add(1)
		}
	}})
	host := e.service("default", "cold", "cold-1", RevisionConfig{ContainerConcurrency: 1}, nil)

	type result struct {
		code int
		body string
	}
	const n = 3
	results := make(chan result, n)
	for range n {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
			req.Host = host
			resp, err := e.client.Do(req)
			if err != nil {
				results <- result{code: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, string(b)}
		}()
	}
	select {
	case k := <-e.inst.pokedCh:
		if k != (revKey{"default", "cold-1"}) {
			t.Errorf("poked %v", k)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Poke was not called")
	}
	eventually(t, "requests held", func() bool { return e.queued("default", "cold-1") == n })
	if pokes.Load() == 0 {
		t.Error("Poke was not called")
	}
	select {
	case r := <-results:
		t.Fatalf("a request was answered before an instance was ready: %+v", r)
	default:
	}

	srv := backend(t, named("warm"))
	e.inst.setEndpoints("default", "cold-1", loopbackEndpoint("i-0", srv))
	for range n {
		if r := <-results; r.code != 200 || r.body != "warm" {
			t.Errorf("held request: %+v", r)
		}
	}
}

// A burst at zero is poked with the whole queue before any instance is
// ready, not as one request.
func TestScaleFromZeroPokesQueue(t *testing.T) {
	t.Parallel()
	var most atomic.Int32
	e := newEnv(t, Options{Poke: func(ns, rev string, waiting int) {
		if ns == "default" && rev == "burst-1" {
			for {
				m := most.Load()
				if int32(waiting) <= m || most.CompareAndSwap(m, int32(waiting)) {
					return
				}
			}
		}
	}})
	host := e.service("default", "burst", "burst-1", RevisionConfig{ContainerConcurrency: 1}, nil)
	const n = 6
	done := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
			req.Host = host
			resp, err := e.client.Do(req)
			if err != nil {
				done <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	eventually(t, "requests held", func() bool { return e.queued("default", "burst-1") == n })
	eventually(t, "poked with the whole queue", func() bool { return most.Load() == n })

	srv := backend(t, named("warm"))
	e.inst.setEndpoints("default", "burst-1", loopbackEndpoint("i-0", srv))
	for range n {
		if code := <-done; code != 200 {
			t.Errorf("held request: %d", code)
		}
	}
}

func TestActivationTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{ActivationTimeout: 50 * time.Millisecond})
	host := e.service("default", "never", "never-1", RevisionConfig{}, nil)
	resp, body := e.get(host)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503 (%q)", resp.StatusCode, body)
	}
	if e.inst.pokeCount("default", "never-1") == 0 {
		t.Error("Poke was not called")
	}
	if q := e.queued("default", "never-1"); q != 0 {
		t.Errorf("%d requests still queued", q)
	}
}

func TestUnknownRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.table.Set(routing.Route{Namespace: "default", Name: "ghost", Host: "ghost.example.com",
		Traffic: []routing.Split{{Revision: "ghost-1", Percent: 100}}})
	if resp, body := e.get("ghost.example.com"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503 (%q)", resp.StatusCode, body)
	}
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	const short = 50 * time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  RevisionConfig
	}{
		{"timeout", RevisionConfig{Timeout: short}},
		{"responseStart", RevisionConfig{Timeout: time.Hour, ResponseStartTimeout: short}},
		{"idle", RevisionConfig{IdleTimeout: short}},
	} {
		t.Run(tc.name+"/before first byte", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
				select { // silent until the router gives up
				case <-r.Context().Done():
				case <-time.After(20 * time.Second):
				}
			})
			host := e.service("default", "slow", "slow-1", tc.cfg, srv)
			resp, body := e.get(host)
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("status %d, want 504 (%q)", resp.StatusCode, body)
			}
		})
	}
	t.Run("started response is not cut by timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Options{})
		srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "first;")
			w.(http.Flusher).Flush()
			time.Sleep(4 * short) // well past both timeouts
			fmt.Fprint(w, "second")
		})
		host := e.service("default", "stream", "stream-1",
			RevisionConfig{Timeout: short, ResponseStartTimeout: short}, srv)
		resp, body := e.get(host)
		if resp.StatusCode != 200 || body != "first;second" {
			t.Errorf("status %d body %q, want 200 first;second", resp.StatusCode, body)
		}
	})
	t.Run("idle timeout cuts a silent response", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Options{})
		srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "first;")
			w.(http.Flusher).Flush()
			select { // silent until the router cuts
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
			fmt.Fprint(w, "never")
		})
		host := e.service("default", "idle", "idle-1", RevisionConfig{IdleTimeout: short}, srv)
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
		req.Host = host
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil || string(b) != "first;" {
			t.Errorf("read %q, %v: want first; and an error", b, err)
		}
		eventually(t, "nothing in flight", func() bool { return e.inflight("default", "idle-1") == 0 })
	})
}

func TestStreamingFlush(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"http1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			g := newGate(t)
			defer g.open()
			srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "one\n")
				w.(http.Flusher).Flush()
				g.wait(r.Context()) // the client has read "one"
				fmt.Fprint(w, "two\n")
			})
			host := e.service("default", "s", "s-1", RevisionConfig{Timeout: time.Hour}, srv)
			client := e.client
			if proto == "h2c" {
				client = h2cClient(t)
			}
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
			req.Host = host
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			if err != nil || line != "one\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			g.open()
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "two\n" {
				t.Fatalf("rest %q, %v", rest, err)
			}
		})
	}
}

func TestRetryOnDialFailure(t *testing.T) {
	t.Parallel()
	// An endpoint that refused a connection is avoided for an hour: one
	// refusal is enough, whatever the speed of the machine.
	e := newEnv(t, Options{}, func(r *Router) { r.suspectFor = time.Hour })
	var bodies sync.Map
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store(string(b), true)
		fmt.Fprint(w, "alive")
	})
	var dead countingDial
	host := e.service("default", "flaky", "flaky-1", RevisionConfig{}, nil)
	e.inst.setEndpoints("default", "flaky-1", deadEndpoint("dead", &dead), loopbackEndpoint("alive", srv))
	for i := range 20 {
		method, body := http.MethodGet, io.Reader(nil)
		if i%2 == 1 {
			method, body = http.MethodPost, strings.NewReader(fmt.Sprintf("body-%d", i))
		}
		resp, got := e.do(method, host, "/", body, nil)
		if resp.StatusCode != 200 || got != "alive" {
			t.Fatalf("request %d: status %d %q", i, resp.StatusCode, got)
		}
		if method == http.MethodPost {
			if _, ok := bodies.Load(fmt.Sprintf("body-%d", i)); !ok {
				t.Errorf("request %d: the instance did not get the body", i)
			}
		}
	}
	// Tried once, then avoided while another instance has room. (Among
	// ties the first pick is random: the odds that it never came up in 20
	// requests are one in a million.)
	if n := dead.count(); n != 1 {
		t.Errorf("the dead endpoint was dialled %d times, want 1", n)
	}

	// Every instance dead: 502.
	var dead2 countingDial
	host = e.service("default", "gone", "gone-1", RevisionConfig{}, nil)
	e.inst.setEndpoints("default", "gone-1", deadEndpoint("d1", &dead2), deadEndpoint("d2", &dead2))
	resp, body := e.get(host)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("all dead: status %d, want 502 (%q)", resp.StatusCode, body)
	}
	if n := dead2.count(); n != 2 {
		t.Errorf("all dead: %d dials, want one per instance", n)
	}
}

func TestInstanceDies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		if r.URL.Path == "/mid" {
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
			_ = buf.Flush()
		}
	})
	host := e.service("default", "dies", "dies-1", RevisionConfig{}, srv)

	resp, body := e.do(http.MethodGet, host, "/before", nil, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("died before answering: status %d, want 502 (%q)", resp.StatusCode, body)
	}

	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/mid", nil)
	req.Host = host
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || err == nil || string(b) != "partial" {
		t.Errorf("died mid-response: status %d, read %q, %v: want 200, partial and an error", resp.StatusCode, b, err)
	}
	// The aborted request is counted out and its slot given back.
	eventually(t, "nothing in flight", func() bool { return e.inflight("default", "dies-1") == 0 })
}

// h2cClient speaks HTTP/2 cleartext with prior knowledge.
func h2cClient(t *testing.T) *http.Client {
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func TestH2C(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	proto := func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.Proto) }

	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	h2 := httptest.NewUnstartedServer(h2c.NewHandler(http.HandlerFunc(proto), &http2.Server{}))
	h2.Start()
	t.Cleanup(h2.Close)
	ep := loopbackEndpoint("h2", h2)
	ep.H2C = true
	h2host := e.service("default", "grpc", "grpc-1", RevisionConfig{}, nil)
	e.inst.setEndpoints("default", "grpc-1", ep)
	h1host := e.service("default", "web", "web-1", RevisionConfig{}, backend(t, proto))

	client := h2cClient(t)
	for _, tc := range []struct {
		name, host     string
		client         *http.Client
		clientProto    int
		containerProto string
	}{
		{"http1 to h2c", h2host, e.client, 1, "HTTP/2.0"},
		{"h2c to h2c", h2host, client, 2, "HTTP/2.0"},
		{"h2c to http1", h1host, client, 2, "HTTP/1.1"},
	} {
		for range 3 { // connections are reused
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader("body"))
			req.Host = tc.host
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != tc.clientProto || string(b) != tc.containerProto {
				t.Errorf("%s: status %d, client proto %d, container saw %q", tc.name, resp.StatusCode, resp.ProtoMajor, b)
			}
		}
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = buf.Flush()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = io.Copy(conn, buf) // echo
	})
	// A short timeout: an upgraded connection is not subject to it.
	host := e.service("default", "ws", "ws-1", RevisionConfig{Timeout: 50 * time.Millisecond, IdleTimeout: 50 * time.Millisecond}, srv)

	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	for i, msg := range []string{"ping", "pong after a silence"} {
		if i == 1 {
			time.Sleep(200 * time.Millisecond) // past the revision's timeouts
		}
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q, %v; want %q", got, err, msg)
		}
	}
}

func TestDraining(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := newGate(t)
	defer g.open()
	var atOld atomic.Int32
	old := backend(t, func(w http.ResponseWriter, r *http.Request) {
		atOld.Add(1)
		g.wait(r.Context())
		fmt.Fprint(w, "old")
	})
	idle := backend(t, named("idle"))
	fresh := backend(t, named("new"))
	host := e.service("default", "d", "d-1", RevisionConfig{}, nil)
	e.inst.setEndpoints("default", "d-1", loopbackEndpoint("old", old))

	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
		req.Host = host
		resp, err := e.client.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	eventually(t, "a request at the old instance", func() bool { return atOld.Load() == 1 })

	e.inst.setEndpoints("default", "d-1", loopbackEndpoint("idle", idle), loopbackEndpoint("new", fresh))
	eventually(t, "the new endpoints", func() bool { return e.readyCount("default", "d-1") == 2 })
	for range 5 {
		if _, body := e.get(host); body == "old" {
			t.Fatal("a new request went to the removed instance")
		}
	}
	if d := e.inst.drainedList(); len(d) != 0 {
		t.Fatalf("drained %v while a request was in flight", d)
	}

	// An endpoint removed with nothing in flight drains at once.
	e.inst.setEndpoints("default", "d-1", loopbackEndpoint("new", fresh))
	if id := <-e.inst.drainedCh; id != "idle" {
		t.Fatalf("drained %q, want idle", id)
	}

	g.open()
	if body := <-done; body != "old" {
		t.Errorf("in-flight request on the draining instance: %q", body)
	}
	select {
	case id := <-e.inst.drainedCh:
		if id != "old" {
			t.Errorf("drained %q, want old", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Drained was not called after the last request ended")
	}
	if d := e.inst.drainedList(); len(d) != 2 {
		t.Errorf("Drained calls %v, want one per removed instance", d)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	type rec struct {
		at                    time.Time
		concurrency, requests float64
	}
	var mu sync.Mutex
	var samples []rec
	stats := func(ns, rev string, at time.Time, c, r float64) {
		if ns == "default" && rev == "held-1" {
			mu.Lock()
			samples = append(samples, rec{at, c, r})
			mu.Unlock()
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(samples)
	}
	e := newEnv(t, Options{Stats: stats})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.router.Run(ctx)

	host := e.service("default", "held", "held-1", RevisionConfig{}, nil)
	const n = 8
	var wg sync.WaitGroup
	defer wg.Wait()
	reqCtx, stop := context.WithCancel(context.Background())
	defer stop()
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, e.srv.URL, nil)
			req.Host = host
			if resp, err := e.client.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	eventually(t, "all requests held", func() bool { return e.queued("default", "held-1") == n })
	base := count()
	eventually(t, "two more samples", func() bool { return count() >= base+2 })
	stop()
	wg.Wait()
	// Clients that gave up left the queue and were counted out.
	eventually(t, "the queue empty", func() bool {
		return e.queued("default", "held-1") == 0 && e.inflight("default", "held-1") == 0
	})

	mu.Lock()
	defer mu.Unlock()
	var maxC, reqs float64
	for i, s := range samples {
		maxC = max(maxC, s.concurrency)
		reqs += s.requests
		if i > 0 && !s.at.After(samples[i-1].at) {
			t.Errorf("sample %d at %v, not after %v", i, s.at, samples[i-1].at)
		}
		if s.at.Nanosecond() != 0 {
			t.Errorf("sample at %v is not a whole second", s.at)
		}
	}
	if maxC < n/2 {
		t.Errorf("highest concurrency sample %.2f with %d held requests, want >= %d (%v)", maxC, n, n/2, samples)
	}
	if reqs != n {
		t.Errorf("%.0f arrivals reported, want %d", reqs, n)
	}
}

func TestSampleTimeWeighted(t *testing.T) {
	t.Parallel()
	rv := newRevision(nil, revKey{"ns", "r"})
	t0 := time.Unix(1000, 0)
	rv.periodStart, rv.lastChange = t0, t0
	rv.inflight = 2
	rv.mu.Lock()
	rv.advanceLocked(t0.Add(500 * time.Millisecond))
	rv.inflight = 4
	rv.arrivals = 2
	rv.mu.Unlock()
	s := rv.sample(t0.Add(time.Second))
	if s.concurrency != 3 || s.requests != 2 || !s.at.Equal(t0) || !s.report {
		t.Errorf("sample %+v, want concurrency 3 requests 2 at %v", s, t0)
	}
	s = rv.sample(t0.Add(2 * time.Second))
	if s.concurrency != 4 || s.requests != 0 || !s.at.Equal(t0.Add(time.Second)) {
		t.Errorf("second sample %+v, want concurrency 4 requests 0", s)
	}
}

func TestForgetGoneRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.inst.setConfig("default", "old-1", RevisionConfig{})
	e.router.revision("default", "old-1")
	now := time.Now()
	for i := range 2 * forgetCheckEvery {
		e.router.report(now.Add(time.Duration(i+1) * time.Second))
	}
	if len(e.router.revisions()) != 1 {
		t.Fatal("a revision that still exists was forgotten")
	}
	e.inst.mu.Lock()
	delete(e.inst.cfgs, revKey{"default", "old-1"})
	e.inst.mu.Unlock()
	for i := range forgetCheckEvery {
		e.router.report(now.Add(time.Duration(1000+i) * time.Second))
	}
	if n := len(e.router.revisions()); n != 0 {
		t.Fatalf("%d revisions known after the revision was deleted", n)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	host := e.service("default", "m", "m-1", RevisionConfig{}, backend(t, named("ok")))
	for range 3 {
		e.get(host)
	}
	e.get("unknown.example.com")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.router.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for k, want := range map[string]float64{
		"knbox_router_requests_total{code=2xx,namespace=default,revision=m-1}": 3,
		"knbox_router_requests_total{code=4xx,namespace=,revision=}":           1,
		"knbox_router_requests_in_flight{namespace=default,revision=m-1}":      0,
		"knbox_router_queue_depth{namespace=default,revision=m-1}":             0,
		"knbox_router_instances{namespace=default,revision=m-1}":               1,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Instances: newFakeInstances()}); err == nil {
		t.Error("no table: no error")
	}
	if _, err := New(Options{Table: routing.NewTable()}); err == nil {
		t.Error("no instances: no error")
	}
	if _, err := New(Options{Table: routing.NewTable(), Instances: newFakeInstances(), MaxQueuedPerRevision: -1}); err == nil {
		t.Error("negative queue bound: no error")
	}
}

// TestInstanceScope: a Server with a Namespace serves instances' calls on
// an external router: cluster-local Routes, their short forms and bare
// names of its own namespace, on the fast path and on net/http's.
func TestInstanceScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{External: true})
	hello, priv, other := backend(t, named("hello")), backend(t, named("private")), backend(t, named("other"))
	e.service("default", "hello", "hello-1", RevisionConfig{}, hello)
	e.service("shop", "hello", "other-1", RevisionConfig{}, other)
	e.inst.setConfig("default", "private-1", RevisionConfig{})
	e.inst.setEndpoints("default", "private-1", loopbackEndpoint("c", priv))
	e.table.Set(routing.Route{Namespace: "default", Name: "private", Host: "private.default.svc.cluster.local",
		ClusterLocal: true, Traffic: []routing.Split{{Revision: "private-1", Percent: 100}}})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{URL: "http://" + ln.Addr().String(), Listener: ln, server: &Server{Router: e.router, Namespace: "default"}, done: make(chan error, 1)}
	go func() { s.done <- s.server.Serve(ln) }()
	t.Cleanup(s.Close)
	inner := &env{t: t, table: e.table, inst: e.inst, router: e.router, srv: s, client: e.client}

	for _, tc := range []struct {
		host           string
		external, code int
		body           string
	}{
		{"private.default.svc.cluster.local", 404, 200, "private"},
		{"private.default.svc", 404, 200, "private"},
		{"private.default", 404, 200, "private"},
		{"private", 404, 200, "private"},
		{"PRIVATE:80", 404, 200, "private"},
		{"hello", 404, 200, "hello"},
		{"hello.shop", 404, 200, "other"},
		{"hello.shop.svc.cluster.local", 404, 200, "other"},
		{"hello.default.example.com", 200, 200, "hello"},
		{"nope", 404, 404, ""},
		{"private.shop", 404, 404, ""},
	} {
		if resp, body := e.get(tc.host); resp.StatusCode != tc.external {
			t.Errorf("external %q: %d, want %d (%q)", tc.host, resp.StatusCode, tc.external, body)
		}
		resp, body := inner.get(tc.host)
		if resp.StatusCode != tc.code || tc.body != "" && body != tc.body {
			t.Errorf("instance %q: %d %q, want %d %q", tc.host, resp.StatusCode, body, tc.code, tc.body)
		}
		// net/http's path (HTTP/1.0) has the same scope.
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", tc.host)
		r10, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r10.Body)
		c.Close()
		if r10.StatusCode != tc.code || tc.body != "" && string(b) != tc.body {
			t.Errorf("instance HTTP/1.0 %q: %d %q, want %d %q", tc.host, r10.StatusCode, b, tc.code, tc.body)
		}
	}
	if !e.router.ServesLocal("private.default.svc.cluster.local") || e.router.ServesLocal("nope.default.svc.cluster.local") {
		t.Error("ServesLocal disagrees with the routes")
	}
}

// TestDomainMappingHosts: a mapping's host serves its Route's split, even a
// cluster-local Route's on the external listener; it goes with the mapping
// or the Route.
func TestDomainMappingHosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{External: true})
	priv := backend(t, named("private"))
	e.inst.setConfig("default", "private-1", RevisionConfig{})
	e.inst.setEndpoints("default", "private-1", loopbackEndpoint("c", priv))
	e.table.Set(routing.Route{Namespace: "default", Name: "private", Host: "private.default.svc.cluster.local",
		ClusterLocal: true, Traffic: []routing.Split{{Revision: "private-1", Percent: 100}}})
	if resp, _ := e.get("shop.example.com"); resp.StatusCode != 404 {
		t.Fatalf("unmapped: %d", resp.StatusCode)
	}
	e.table.SetMapping(routing.Mapping{Host: "shop.example.com", Namespace: "default", Route: "private"})
	if resp, body := e.get("Shop.Example.com:8080"); resp.StatusCode != 200 || body != "private" {
		t.Errorf("mapped: %d %q", resp.StatusCode, body)
	}
	if resp, _ := e.get("private.default.svc.cluster.local"); resp.StatusCode != 404 {
		t.Errorf("the cluster-local Route itself: %d, want 404", resp.StatusCode)
	}
	e.table.SetMapping(routing.Mapping{Host: "gone.example.com", Namespace: "default", Route: "nope"})
	if resp, _ := e.get("gone.example.com"); resp.StatusCode != 404 {
		t.Errorf("mapping to a missing Route: %d, want 404", resp.StatusCode)
	}
	e.table.DeleteMapping("shop.example.com")
	if resp, _ := e.get("shop.example.com"); resp.StatusCode != 404 {
		t.Errorf("deleted mapping: %d, want 404", resp.StatusCode)
	}
}

// TestClusterDomain: with another cluster domain, cluster-local addresses
// are under it, and no longer under cluster.local.
func TestClusterDomain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{ClusterDomain: "Corp.Internal."})
	priv := backend(t, named("private"))
	e.inst.setConfig("default", "private-1", RevisionConfig{})
	e.inst.setEndpoints("default", "private-1", loopbackEndpoint("c", priv))
	e.table.Set(routing.Route{Namespace: "default", Name: "private", Host: "private.default.svc.corp.internal",
		ClusterLocal: true, Traffic: []routing.Split{{Revision: "private-1", Percent: 100}}})
	for _, tc := range []struct {
		host string
		code int
	}{
		{"private.default.svc.corp.internal", 200},
		{"private.default.svc", 200},
		{"private.default", 200},
		{"private.default.svc.cluster.local", 404},
	} {
		if resp, body := e.get(tc.host); resp.StatusCode != tc.code {
			t.Errorf("%q: %d, want %d (%q)", tc.host, resp.StatusCode, tc.code, body)
		}
	}
	if !e.router.ServesLocal("private.default.svc.corp.internal") || e.router.ServesLocal("private.default.svc.cluster.local") {
		t.Error("ServesLocal disagrees with the cluster domain")
	}
}

// TestDomainMappingRewritesHost: a mapped domain's requests reach the
// instance with the Route's cluster-local host, as Knative rewrites them,
// on the fast path and on net/http's; the client's host stays in
// Forwarded. The Route's own hosts are not rewritten.
func TestDomainMappingRewritesHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{External: true, ClusterDomain: "corp.internal"})
	echo := backend(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s", r.Host, r.Header.Get("Forwarded"))
	})
	e.service("default", "hello", "hello-1", RevisionConfig{}, echo)
	e.table.SetMapping(routing.Mapping{Host: "shop.example.com", Namespace: "default", Route: "hello"})
	const want = "hello.default.svc.corp.internal|for=127.0.0.1;host=shop.example.com;proto=http"
	if resp, body := e.get("shop.example.com"); resp.StatusCode != 200 || body != want {
		t.Errorf("fast path: %d %q, want %q", resp.StatusCode, body, want)
	}
	if resp, body := e.get("hello.default.example.com"); resp.StatusCode != 200 || !strings.HasPrefix(body, "hello.default.example.com|") {
		t.Errorf("the Route's own host: %d %q", resp.StatusCode, body)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: shop.example.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != want {
		t.Errorf("net/http path: %d %q, want %q", resp.StatusCode, b, want)
	}
}
