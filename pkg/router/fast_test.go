package router

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawExchange writes raw bytes to the router and reads what comes back
// until the router closes or n responses were read.
func (e *env) raw(t *testing.T, req string) (*bufio.Reader, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(conn), conn
}

func TestFastPathRefusesSmuggling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	var hits atomic.Int32
	host := e.service("default", "s", "s-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	for name, head := range map[string]string{
		"CL+TE":        "POST / HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"duplicate CL": "POST / HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"bare LF":      "GET / HTTP/1.1\nHost: " + host + "\n\n",
		"obs-fold":     "GET / HTTP/1.1\r\nHost: " + host + "\r\nX: a\r\n b\r\n\r\n",
	} {
		br, _ := e.raw(t, head)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Errorf("%s: status %d close %v, want 400 and close", name, resp.StatusCode, resp.Close)
		}
	}
	br, _ := e.raw(t, "POST / HTTP/1.1\r\nHost: "+host+"\r\nTransfer-Encoding: gzip\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("unknown transfer coding: %v %v, want 501", resp, err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d refused requests reached the instance", n)
	}
}

func TestFastPathPipelining(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	host := e.service("default", "p", "p-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	br, _ := e.raw(t, "GET /one HTTP/1.1\r\nHost: "+host+"\r\n\r\n"+
		"POST /two HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 4\r\n\r\nbody"+
		"POST /three HTTP/1.1\r\nHost: "+host+"\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nab\r\n1\r\nc\r\n0\r\nX-T: 1\r\n\r\n"+
		"GET /four HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
	for _, want := range []string{"GET /one ", "POST /two body", "POST /three abc", "GET /four "} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("want %q: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("status %d %q, want %q", resp.StatusCode, b, want)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v, want EOF", err)
	}
}

func TestFastPathBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	host := e.service("default", "b", "b-1", RevisionConfig{Timeout: time.Minute}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		if n := r.URL.Query().Get("n"); n != "" {
			var size int
			fmt.Sscan(n, &size)
			if r.URL.Query().Get("chunked") == "" {
				w.Header().Set("Content-Length", n)
			}
			_, _ = io.Copy(w, io.LimitReader(repeatReader('z'), int64(size)))
			return
		}
		// Echo (read first: net/http's server does not interleave
		// reading a body with writing the response).
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader(big)
		if chunked {
			body = io.MultiReader(bytes.NewReader(big)) // no length: sent chunked
		}
		resp, got := e.do(http.MethodPost, host, "/", body, nil)
		if resp.StatusCode != 200 || got != string(big) {
			t.Errorf("echo of 1 MiB (chunked %v): status %d, %d bytes", chunked, resp.StatusCode, len(got))
		}
	}
	for _, q := range []string{"n=4194304", "n=4194304&chunked=1", "n=0"} {
		resp, got := e.do(http.MethodGet, host, "/?"+q, nil, nil)
		want := strings.Repeat("z", map[string]int{"n=0": 0}[q]+map[bool]int{true: 4 << 20}[q != "n=0"])
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: status %d, %d bytes, want %d", q, resp.StatusCode, len(got), len(want))
		}
	}
	resp, got := e.do(http.MethodHead, host, "/?n=100", nil, nil)
	if resp.StatusCode != 200 || got != "" || resp.ContentLength != 100 {
		t.Errorf("HEAD: status %d, body %q, length %d", resp.StatusCode, got, resp.ContentLength)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func TestFastPathHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	host := e.service("default", "h", "h-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %d", r.Proto, len(b))
	}))
	// HTTP/1.0 goes to net/http.
	br, _ := e.raw(t, "GET / HTTP/1.0\r\nHost: "+host+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP/1.0: %v %v", resp, err)
	}
	// A head larger than the fast path's buffer, and Expect: 100-continue.
	resp, got := e.do(http.MethodGet, host, "/", nil, http.Header{"X-Big": {strings.Repeat("b", 16<<10)}})
	if resp.StatusCode != 200 || got != "HTTP/1.1 0" {
		t.Errorf("large head: %d %q", resp.StatusCode, got)
	}
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader("12345"))
	req.Host = host
	req.Header.Set("Expect", "100-continue")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "HTTP/1.1 5" {
		t.Errorf("Expect: 100-continue: %d %q", resp.StatusCode, b)
	}
	if n := e.srv.server.handedOver.Load(); n != 3 {
		t.Errorf("%d connections handed over, want 3", n)
	}
}

// TestFastPathStaleConnection: an instance that closes kept connections
// without saying so costs no request, with or without a body.
func TestFastPathStaleConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b)+2, "ok"+string(b))
		_ = buf.Flush()
		conn.Close() // no Connection: close
	})
	host := e.service("default", "st", "st-1", RevisionConfig{}, srv)
	for i := range 10 {
		method, body, want := http.MethodGet, io.Reader(nil), "ok"
		if i%2 == 1 {
			method, body, want = http.MethodPost, strings.NewReader("x"), "okx"
			// A POST is not sent twice: the kept connection is checked
			// first. Wait until the instance's close has arrived (else
			// the POST races it, as with any proxy).
			eventually(t, "the kept connections closed by the instance", func() bool { return e.keptAlive("default", "st-1") == 0 })
		}
		resp, got := e.do(method, host, "/", body, nil)
		if resp.StatusCode != 200 || got != want {
			t.Fatalf("request %d (%s): %d %q", i, method, resp.StatusCode, got)
		}
	}
}

func TestFastPathClientGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := newGate(t)
	cancelled := make(chan struct{}, 10)
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-g.ch:
		case <-r.Context().Done():
			cancelled <- struct{}{}
		}
	})
	host := e.service("default", "g", "g-1", RevisionConfig{ContainerConcurrency: 1}, srv)
	// One at the instance, one queued; both clients leave.
	var conns []net.Conn
	for range 2 {
		_, conn := e.raw(t, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		conns = append(conns, conn)
		if len(conns) == 1 {
			eventually(t, "one request at the instance", func() bool { return e.inflight("default", "g-1") == 1+1<<16 })
		}
	}
	eventually(t, "one request queued", func() bool { return e.queued("default", "g-1") == 1 })
	for _, c := range conns {
		c.Close()
	}
	eventually(t, "the queue emptied", func() bool { return e.queued("default", "g-1") == 0 })
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the instance's request was not cancelled when its client left")
	}
	eventually(t, "nothing in flight", func() bool { return e.inflight("default", "g-1") == 0 })
}

func TestFastPathResponseFraming(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	srv := backend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		switch r.URL.Path {
		case "/eof": // no length: the body ends when the connection does
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
		case "/hints":
			fmt.Fprint(buf, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case "/nocontent":
			fmt.Fprint(buf, "HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n")
		case "/hop":
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nConnection: X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok")
		case "/garbage":
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok")
		}
		_ = buf.Flush()
	})
	host := e.service("default", "f", "f-1", RevisionConfig{}, srv)
	var hints []int
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/eof", 200, "until the end"},
		{"/hints", 200, "ok"},
		{"/nocontent", 204, ""},
		{"/hop", 200, "ok"},
		{"/garbage", 502, ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+tc.path, nil)
		req.Host = host
		req = req.WithContext(withHints(req.Context(), &hints))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.code != 502 && string(b) != tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.path, resp.StatusCode, b, tc.code, tc.body)
		}
		if tc.path == "/hop" && (resp.Header.Get("X-Private") != "" || resp.Header.Get("Keep-Alive") != "") {
			t.Errorf("hop-by-hop headers forwarded: %v", resp.Header)
		}
	}
	if len(hints) != 1 || hints[0] != 103 {
		t.Errorf("informational responses seen by the client: %v, want [103]", hints)
	}
}

// TestObserver: the Observer sees each request once, on both paths.
func TestObserver(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	e := newEnv(t, Options{Observer: obs})
	host := e.service("default", "o", "o-1", RevisionConfig{}, backend(t, named("hello")))
	e.do(http.MethodPost, host, "/x?y", strings.NewReader("abc"), http.Header{"User-Agent": {"t/1"}})
	e.get("unknown.example.com")
	resp, err := h2cClient(t).Get(e.srv.URL + "/h2")
	if err == nil {
		resp.Body.Close()
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e.do(http.MethodGet, host, "/traced", nil, http.Header{"Traceparent": {tp}})
	// A request is observed once its response is written: await all, and
	// find each by what it was.
	eventually(t, "4 observations", func() bool { return len(obs.list()) >= 4 })
	got := obs.list()
	if len(got) != 4 {
		t.Fatalf("%d observations, want 4: %+v", len(got), got)
	}
	var r, unknown, h2, traced RequestInfo
	for _, o := range got {
		switch {
		case o.Target == "/x?y":
			r = o
		case o.Target == "/traced":
			traced = o
		case o.Proto == "HTTP/2.0":
			h2 = o
		default:
			unknown = o
		}
	}
	if r.Namespace != "default" || r.Route != "o" || r.Revision != "o-1" || r.Instance != "o-1-0" || r.Code != 200 ||
		r.Method != "POST" || r.Target != "/x?y" || r.RequestBytes != 3 || r.ResponseBytes != 5 || r.UserAgent != "t/1" ||
		r.Traceparent == "" || r.Duration <= 0 {
		t.Errorf("fast path: %+v", r)
	}
	if unknown.Code != 404 || unknown.Route != "" || h2.Proto != "HTTP/2.0" {
		t.Errorf("unknown host %+v / h2c %+v", unknown, h2)
	}
	if !r.TraceStarted || traced.TraceStarted || traced.Traceparent != tp {
		t.Errorf("trace started %v with %q, %v with %q (the client's)", r.TraceStarted, r.Traceparent, traced.TraceStarted, traced.Traceparent)
	}
}

type recorder struct {
	mu   sync.Mutex
	seen []RequestInfo
}

func (r *recorder) ObserveRequest(i *RequestInfo) {
	r.mu.Lock()
	r.seen = append(r.seen, *i)
	r.mu.Unlock()
}

func (r *recorder) list() []RequestInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RequestInfo(nil), r.seen...)
}

func TestServerShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := newGate(t)
	arrived := make(chan struct{})
	host := e.service("default", "d", "d-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			g.wait(r.Context())
		}
		fmt.Fprint(w, "done")
	}))
	e.get(host) // leaves an idle connection
	slow := make(chan string, 1)
	go func() {
		_, body := e.do(http.MethodGet, host, "/slow", nil, nil)
		slow <- body
	}()
	// Awaited at the instance: the router's in-flight count may still
	// hold the first request for a moment after its client has the answer.
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow request did not reach the instance")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.server.Shutdown(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.open()
	if body := <-slow; body != "done" {
		t.Errorf("request in flight got %q", body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-e.srv.done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
	e.srv.done <- http.ErrServerClosed
}

// withHints records the informational responses the client sees.
func withHints(ctx context.Context, codes *[]int) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		*codes = append(*codes, code)
		return nil
	}})
}

// keptAlive counts a revision's kept instance connections that are still
// open.
func (e *env) keptAlive(ns, rev string) int {
	rv := e.router.revision(ns, rev)
	rv.mu.Lock()
	var pools []*connPool
	for _, ep := range rv.ready {
		if ep.pool != nil {
			pools = append(pools, ep.pool)
		}
	}
	rv.mu.Unlock()
	n := 0
	for _, p := range pools {
		p.mu.Lock()
		for _, uc := range p.idle {
			if uc.alive() {
				n++
			}
		}
		p.mu.Unlock()
	}
	return n
}

// TestFastPathRequestWhileServing: a request that arrives while the one
// before it is at the instance (the client pipelines after a pause) is
// served, though the connection's wait for it starts without a read.
func TestFastPathRequestWhileServing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := newGate(t)
	arrived := make(chan struct{}, 2)
	host := e.service("default", "w", "w-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		switch r.URL.Path {
		case "/slow":
			g.wait(r.Context())
		case "/mid":
			time.Sleep(watchAfter / 2)
		}
		fmt.Fprint(w, r.URL.Path)
	}))
	for _, first := range []string{"/slow", "/mid"} {
		// Twice: once with the instance slower than the watch's start
		// (the client is then watched through another descriptor), once
		// answering before it.
		br, conn := e.raw(t, "GET "+first+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		<-arrived
		if first == "/slow" {
			time.Sleep(2 * watchAfter)
		}
		if _, err := io.WriteString(conn, "GET /second HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if first == "/slow" {
			time.Sleep(10 * time.Millisecond) // the second request's bytes are there before the first's answer
			g.open()
		}
		for _, want := range []string{first, "/second"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("want %q: %v", want, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != want {
				t.Errorf("got %q, want %q", b, want)
			}
		}
		<-arrived
	}
}

// TestServerCloseWithRequestAtInstance: Close ends a connection whose
// request waits for the instance at once, not when the instance answers.
func TestServerCloseWithRequestAtInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := newGate(t)
	arrived := make(chan struct{})
	host := e.service("default", "c", "c-1", RevisionConfig{}, backend(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		g.wait(r.Context())
	}))
	br, _ := e.raw(t, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- e.srv.server.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the request at the instance")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the client read a byte after Close")
	}
	g.open()
	<-e.srv.done
	e.srv.done <- http.ErrServerClosed
}

// opaqueListener hides the TCP connection beneath its connections, so
// the server reads them with net.Conn's Read (readHead), not the hold.
type opaqueListener struct{ net.Listener }

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return struct{ net.Conn }{c}, err
}

// TestFastPathHeadTimeoutFromFirstByte checks that the head timeout
// counts from a head's first byte: a client sending a byte at a time is
// cut off after one timeout, not one timeout per byte. The client sends
// at most 150 bytes, one per 20 ms (3 s, 15 timeouts); with the timeout
// restarted by each read, it would never be cut off.
func TestFastPathHeadTimeoutFromFirstByte(t *testing.T) {
	t.Parallel()
	for _, opaque := range []bool{false, true} {
		t.Run(fmt.Sprintf("opaque=%v", opaque), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			host := e.service("default", "s", "s-1", RevisionConfig{}, backend(t, func(http.ResponseWriter, *http.Request) {}))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &Server{Router: e.router, ReadHeaderTimeout: 200 * time.Millisecond}
			done := make(chan error, 1)
			go func() {
				if opaque {
					done <- srv.Serve(opaqueListener{ln})
				} else {
					done <- srv.Serve(ln)
				}
			}()
			t.Cleanup(func() { _ = srv.Close(); <-done })

			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			// A first request, so the slow head is a later one on a
			// connection the server has already served.
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()

			slow := "GET / HTTP/1.1\r\nHost: " + host + "\r\nX-Pad: " + strings.Repeat("a", 200)
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_, _ = io.Copy(io.Discard, br) // until the server closes
			}()
			for i := 0; i < 150; i++ {
				select {
				case <-closed:
					if i < 2 {
						t.Fatalf("closed after %d bytes, before the timeout could pass", i)
					}
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := c.Write([]byte{slow[i]}); err != nil {
					return // the server closed
				}
			}
			t.Fatal("the server kept reading a head sent a byte at a time for 15 head timeouts")
		})
	}
}
