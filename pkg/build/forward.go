package build

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/knbox/knbox/pkg/network"
)

// maxForwardConns bounds the connections one forwarded registry carries at
// once for one build.
const maxForwardConns = 64

// forwardDialTimeout bounds the dial to the host's registry.
const forwardDialTimeout = 10 * time.Second

// Forward listens, inside ns, on each of addrs (loopback addresses of the
// host's registries) and relays every connection to the same address on the
// host. Close stops the listeners and the connections.
func Forward(ns *network.NS, addrs []netip.AddrPort, log *slog.Logger) (io.Closer, error) {
	f := &forwarder{log: log, conns: map[net.Conn]struct{}{}}
	for _, a := range addrs {
		ln, err := ns.Listen("tcp", a.String())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("forward %s into the build's network namespace: %w", a, err)
		}
		f.lns = append(f.lns, ln)
		f.wg.Add(1)
		go f.serve(ln, a.String())
	}
	return f, nil
}

type forwarder struct {
	log *slog.Logger
	lns []net.Listener
	wg  sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (f *forwarder) serve(ln net.Listener, target string) {
	defer f.wg.Done()
	sem := make(chan struct{}, maxForwardConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.log.Debug("forwarded registry listener ended", "addr", target, "err", err)
			}
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close() // over the bound
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() { <-sem }()
			f.relay(c, target)
		}()
	}
}

func (f *forwarder) relay(in net.Conn, target string) {
	out, err := net.DialTimeout("tcp", target, forwardDialTimeout)
	if err != nil {
		in.Close()
		f.log.Debug("dial a forwarded registry", "addr", target, "err", err)
		return
	}
	if !f.track(in, out) {
		return
	}
	defer f.untrack(in, out)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
}

func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(f.conns, c)
	}
}

// Close stops listening, ends the relayed connections and waits for the
// goroutines.
func (f *forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	for _, ln := range f.lns {
		ln.Close()
	}
	f.wg.Wait()
	return nil
}
