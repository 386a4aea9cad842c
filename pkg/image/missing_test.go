package image_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestResolveMissingFailsAtOnce: a tag the registry does not have fails the
// first time, with the registry's answer in the error, after one manifest
// request (a 404 is not retried: the Revision reconciler reports it at
// once and tries again later with its own backoff).
func TestResolveMissingFailsAtOnce(t *testing.T) {
	var manifests atomic.Int32
	host := imagetest.StartRegistryWith(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/manifests/") {
				manifests.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	s := newStore(t)
	ref := host + "/knative-tests/invalidhelloworld:latest"
	_, err := s.Resolve(ctx, ref, nil)
	if err == nil {
		t.Fatal("Resolve of a missing tag succeeded")
	}
	// The registry's code: NAME_UNKNOWN, as the repository is unknown
	// too (MANIFEST_UNKNOWN for a missing tag of a known one).
	if !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "NAME_UNKNOWN") {
		t.Errorf("error %q, want the reference and the registry's NAME_UNKNOWN", err)
	}
	if n := manifests.Load(); n != 1 {
		t.Errorf("%d manifest requests, want 1 (no retries of a 404)", n)
	}
}

// TestResolveUnreachableRegistry: a registry nobody listens on fails with
// the dial's error; one that accepts and never answers is cut by ctx (the
// reconciler's digest-resolution-timeout), not left to hang.
func TestResolveUnreachableRegistry(t *testing.T) {
	s := newStore(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	if _, err := s.Resolve(ctx, addr+"/app:v1", nil); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Resolve from a closed port: %v, want connection refused", err)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accept, read nothing, answer nothing
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 100 {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Resolve(rctx, silent.Addr().String()+"/app:v1", nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) && (err == nil || !strings.Contains(err.Error(), "deadline exceeded")) {
			t.Errorf("Resolve from a silent registry: %v, want the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Resolve from a silent registry ignored its context")
	}
}
