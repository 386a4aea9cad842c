package listen

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve starts a server with l on loopback and returns its listener.
func serve(t *testing.T, l Limits) net.Listener {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(raw)
	srv := l.Apply(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, "ok")
	})})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln
}

func get(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// closedByServer reports whether the server closed c (a read gets EOF or a
// reset) within the deadline.
func closedByServer(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestIdleConnectionsAreClosed is the finding: 3,000 idle keep-alive
// connections stayed open on the API and the router. With an idle timeout
// they are closed, and the listener counts none left.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	ln := serve(t, Limits{MaxConnections: 1000, IdleTimeout: 200 * time.Millisecond})
	var conns []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		get(t, c)
		conns = append(conns, c)
	}
	waitFor(t, "idle connections closed", func() bool { st, _ := StatsOf(ln); return st.Open == 0 })
	for _, c := range conns[:3] {
		if !closedByServer(c, 5*time.Second) {
			t.Error("an idle connection is still open")
		}
	}
}

// TestSlowHeadersAreCut: a client that sends a request's headers a byte at
// a time (slowloris) is disconnected after ReadHeaderTimeout.
func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	ln := serve(t, Limits{MaxConnections: 10, ReadHeaderTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // keep trickling until the server hangs up
		defer close(done)
		for i := 0; i < 500; i++ {
			if _, err := c.Write([]byte("X")); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	<-done
	waitFor(t, "slow connection closed", func() bool { st, _ := StatsOf(ln); return st.Open == 0 })
}

// TestConnectionLimit: connections over the limit are closed as they come;
// a slot freed is taken by the next one.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	ln := serve(t, Limits{MaxConnections: 3})
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		get(t, c) // accepted and served
		held = append(held, c)
	}
	over, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closedByServer(over, 10*time.Second) {
		t.Fatal("a connection over the limit was kept")
	}
	if st, _ := StatsOf(ln); st.Rejected != 1 || st.Open != 3 {
		t.Errorf("stats %+v, want 3 open, 1 rejected", st)
	}
	held[0].Close()
	waitFor(t, "a slot freed", func() bool { st, _ := StatsOf(ln); return st.Open == 2 })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get(t, c)
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	srv := Limits{}.Apply(&http.Server{})
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.IdleTimeout != DefaultIdleTimeout || srv.ReadTimeout != 0 || srv.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults: %+v", srv)
	}
	srv = Limits{ReadHeaderTimeout: -1, IdleTimeout: -1, ReadTimeout: time.Minute}.Apply(&http.Server{})
	if srv.ReadHeaderTimeout != 0 || srv.IdleTimeout != 0 || srv.ReadTimeout != time.Minute {
		t.Errorf("off: %+v", srv)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if ln := (Limits{}).Listener(raw); ln != raw {
		t.Error("no limit, yet the listener is wrapped")
	}
	if _, ok := StatsOf(raw); ok {
		t.Error("stats of a plain listener")
	}
	if h := (Limits{}).H2C(); h.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("h2c idle timeout %v", h.IdleTimeout)
	}
}
