package router

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t testing.TB) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { c.Close(); r.c.Close() })
	return c.(*net.TCPConn), r.c.(*net.TCPConn)
}

// TestSockMatchesNetConn checks that sock's raw reads and writes behave
// as net.Conn's: whole writes larger than the socket buffers, reads that
// wait, deadlines, EOF, and errors after Close.
func TestSockMatchesNetConn(t *testing.T) {
	t.Parallel()
	a, b := tcpPair(t)
	var sa, sb sock
	sa.init(a, a)
	sb.init(b, b)
	if sa.rc == nil || sb.rc == nil {
		t.Fatal("sock did not take the raw path on TCP")
	}

	// A write far larger than the socket buffers waits for the reader.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		n, err := sa.Write(big)
		if err == nil && n != len(big) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got := make([]byte, 0, len(big))
	buf := make([]byte, 32<<10)
	_ = b.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(got) < len(big) {
		n, err := sb.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("the bytes read are not the bytes written")
	}

	// A read with nothing to read ends at the deadline.
	_ = b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := sb.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	var ne net.Error
	if _, err := sb.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a net.Error timeout", err)
	}

	// A waiting read gets what comes later; an empty read returns at once.
	_ = b.SetReadDeadline(time.Now().Add(20 * time.Second))
	go func() {
		time.Sleep(10 * time.Millisecond)
		_, _ = sa.Write([]byte("later"))
	}()
	if n, err := sb.Read(buf); err != nil || string(buf[:n]) != "later" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	if n, err := sb.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}

	// The peer's close is EOF.
	_ = a.CloseWrite()
	if n, err := sb.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer's close: %d, %v; want io.EOF", n, err)
	}

	// Reads and writes on a closed connection fail as net.Conn's do.
	b.Close()
	if _, err := sb.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v; want net.ErrClosed", err)
	}
	if _, err := sb.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v; want net.ErrClosed", err)
	}

	// A write to a peer that reset the connection reports the reset as
	// a *net.OpError, as net.Conn's Write does.
	c, d := tcpPair(t)
	var sc sock
	sc.init(c, c)
	_ = d.SetLinger(0)
	d.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = sc.Write([]byte("after the reset"))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write after the peer's reset: %v; want a *net.OpError of op write", err)
	}
}

// TestSockWithoutTCP falls back to the connection's own methods.
func TestSockWithoutTCP(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var s sock
	s.init(a, nil)
	go func() { _, _ = b.Write([]byte("pipe")) }()
	buf := make([]byte, 8)
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "pipe" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
}

// BenchmarkSockRoundTrip is a small write and the read of it, with
// net.Conn's methods and with sock's raw ones.
func BenchmarkSockRoundTrip(b *testing.B) {
	for _, raw := range []bool{false, true} {
		name := "netconn"
		if raw {
			name = "sock"
		}
		b.Run(name, func(b *testing.B) {
			x, y := tcpPair(b)
			var sx, sy sock
			if raw {
				sx.init(x, x)
				sy.init(y, y)
			} else {
				sx.init(x, nil)
				sy.init(y, nil)
			}
			msg := []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sx.Write(msg); err != nil {
					b.Fatal(err)
				}
				for n := 0; n < len(msg); {
					m, err := sy.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					n += m
				}
			}
		})
	}
}

// TestSockWriteThenAwait checks that the wait armed before the write
// misses no answer, however soon it comes, that a passed deadline or a
// full socket buffer leave the rest of the write to the caller, and that
// a write error is reported.
func TestSockWriteThenAwait(t *testing.T) {
	t.Parallel()
	a, b := tcpPair(t)
	var sa sock
	sa.init(a, a)
	// The peer answers every byte at once, as fast as it can.
	go func() { _, _ = io.Copy(b, b) }()
	buf := make([]byte, 64)
	for i := 0; i < 2000; i++ {
		_ = a.SetReadDeadline(time.Now().Add(20 * time.Second))
		msg := []byte{byte('a' + i%26)}
		n, err := sa.writeThenAwait(msg)
		if err != nil || n != 1 {
			t.Fatalf("round %d: writeThenAwait: %d, %v", i, n, err)
		}
		// The wait ended: the answer is there, or the deadline (20s,
		// which fails the test) passed.
		m, err := sa.Read(buf)
		if err != nil || m != 1 || buf[0] != msg[0] {
			t.Fatalf("round %d: read %q, %v; want %q", i, buf[:m], err, msg)
		}
	}

	// A deadline that passed: nothing is written, Read reports it.
	_ = a.SetReadDeadline(aLongTimeAgo)
	if n, err := sa.writeThenAwait([]byte("x")); n != 0 || err != nil {
		t.Fatalf("writeThenAwait past the deadline: %d, %v; want 0, nil", n, err)
	}
	if _, err := sa.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}

	// A write larger than the socket buffers: the rest is the caller's.
	c, d := tcpPair(t)
	var sc sock
	sc.init(c, c)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	big := bytes.Repeat([]byte("x"), 32<<20)
	n, err := sc.writeThenAwait(big)
	if err != nil || n == 0 || n >= len(big) {
		t.Fatalf("writeThenAwait of 32 MiB: %d, %v; want part of it written", n, err)
	}
	go func() { _, _ = io.Copy(io.Discard, d) }()
	if _, err := sc.Write(big[n:]); err != nil {
		t.Fatalf("write of the rest: %v", err)
	}

	// A peer that reset the connection: the write fails, or the wait
	// ends and the read reports the reset.
	e, f := tcpPair(t)
	var se sock
	se.init(e, e)
	_ = f.SetLinger(0)
	f.Close()
	_ = e.SetReadDeadline(time.Now().Add(20 * time.Second))
	failed := false
	for i := 0; i < 100 && !failed; i++ {
		if _, err := se.writeThenAwait([]byte("after the reset")); err != nil {
			failed = true
			break
		}
		if _, err := se.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			failed = true
		}
	}
	if !failed {
		t.Fatal("a reset connection never failed")
	}
}
