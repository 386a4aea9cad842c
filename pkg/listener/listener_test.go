package listener

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestHandover: a second Set on the same handover path takes the first
// one's sockets (the first is told so, and its Linger ends), and accepts a
// connection that was made while nobody accepted.
func TestHandover(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "handover.sock")
	first, err := Open(ctx, map[string]string{"api": "127.0.0.1:0", "http": "127.0.0.1:0"}, path, time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if first.From() != "new" || first.Activated() {
		t.Fatalf("first from %s, activated %v", first.From(), first.Activated())
	}
	addrs := map[string]string{"api": first.Listener("api").Addr().String(), "http": first.Listener("http").Addr().String()}
	if err := first.ServeHandover(path); err != nil {
		t.Fatal(err)
	}
	// The first stops accepting; a client connects meanwhile: it waits in
	// the backlog, not refused.
	first.Listener("http").Close()
	conn, err := net.DialTimeout("tcp", addrs["http"], 5*time.Second)
	if err != nil {
		t.Fatalf("a connection while nobody accepts: %v", err)
	}
	defer conn.Close()
	lingered := make(chan bool, 1)
	go func() { lingered <- first.Linger(ctx, time.Minute) }()

	second, err := Open(ctx, addrs, path, 10*time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.From() != "handover" {
		t.Errorf("second from %s, want handover", second.From())
	}
	select {
	case <-first.Requested():
	default:
		t.Error("the first Set was not told that a successor asked")
	}
	if !<-lingered {
		t.Error("Linger did not see the handover")
	}
	for name, a := range addrs {
		if got := second.Listener(name).Addr().String(); got != a {
			t.Errorf("%s: %s, want %s", name, got, a)
		}
	}
	_ = second.Listener("http").(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := second.Listener("http").Accept()
	if err != nil {
		t.Fatalf("the connection made before the handover: %v", err)
	}
	c.Close()
}

// TestNoPredecessor: without a handover socket, or with one a killed
// process left, new sockets are opened at once.
func TestNoPredecessor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "handover.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // a stale socket file
	start := time.Now()
	s, err := Open(context.Background(), map[string]string{"http": "127.0.0.1:0"}, path, time.Minute, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.From() != "new" || time.Since(start) > 30*time.Second {
		t.Errorf("from %s after %v", s.From(), time.Since(start))
	}
}

// FuzzReceive: whatever a process at the handover path sends, receive
// returns sockets only when they match the names, and never crashes.
func FuzzReceive(f *testing.F) {
	f.Add([]byte(`{"names":["api","http"]}`))
	f.Add([]byte(`{"names":null}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, header []byte) {
		path := filepath.Join(t.TempDir(), "h.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = c.Write(header)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		files, err := receive(ctx, path)
		if err == nil {
			t.Fatalf("sockets %v from a header without any", files)
		}
	})
}
