package daemon

import (
	"context"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// internalRequestTimeout bounds each request of knbox's own components to
// its API, but for watches, which last as long as the server keeps them
// (kubeclient's reflectors re-watch when one ends).
const internalRequestTimeout = 30 * time.Second

// internalConfig is the client configuration of knbox's own components.
// It leaves rest.Config.Timeout at zero: that becomes http.Client.Timeout,
// which also ends every watch when it passes, and then each informer
// re-watched every 30 seconds, reading the store's event log and a good
// part of knbox's code back into memory at rest. boundRequests bounds
// the other requests instead.
func internalConfig(apiURL string, caPEM []byte, token string) *rest.Config {
	return &rest.Config{Host: apiURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		QPS: 200, Burst: 400, UserAgent: "knbox", WarningHandler: rest.NoWarnings{},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return boundRequests{next: rt, timeout: internalRequestTimeout}
		}}
}

// boundRequests ends a request that is not a watch once timeout has
// passed from its start, its response body included, as http.Client's
// Timeout does.
type boundRequests struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (b boundRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return b.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), b.timeout)
	resp, err := b.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a bounded request's timer with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
