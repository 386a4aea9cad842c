package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestBoundRequests checks that a request of knbox's own components is
// cut off at the timeout, body included, and that a watch is not.
func TestBoundRequests(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // a body that never ends on its own: a hung server, or a watch
		case <-r.Context().Done():
		case <-release:
			_, _ = io.WriteString(w, "end")
		}
	}))
	defer srv.Close()
	defer close(release)
	client := &http.Client{Transport: boundRequests{next: http.DefaultTransport, timeout: timeout}}

	resp, err := client.Get(srv.URL + "/apis/serving.knative.dev/v1/services")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reading a hung response: %v, want the deadline", err)
	}

	resp, err = client.Get(srv.URL + "/apis/serving.knative.dev/v1/services?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		got <- err
	}()
	// The watch outlives ten timeouts (not a timed assertion: a bound
	// watch fails after one, however slow the machine).
	select {
	case err := <-got:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(10 * timeout):
	}
	release <- struct{}{}
	if err := <-got; err != nil {
		t.Fatalf("the watch: %v", err)
	}
}
