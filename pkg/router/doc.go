// Package router is knbox's data plane: Knative's ingress, activator and
// queue-proxy in one hop.
//
// For each request it picks the Route by Host from the routing table
// ([routing.Table]), the Revision by weighted choice (or the tag host's
// revision), holds the request while the Revision scales from zero, enforces
// containerConcurrency per instance with a bounded queue, and proxies to the
// instance, while counting the exact number of requests in flight per
// revision for the autoscaler.
//
// It owns request routing, admission and proxying, and nothing else. It must
// not import the API server, the store, the controllers or the runtime:
// instances come through the [Instances] interface, samples leave through
// the hooks in [Options].
//
// # Hosts
//
// The Host header (without its port, case-insensitive, a trailing dot
// ignored) selects a Route's main host or one of its tag hosts. A listener
// with [Options.External] set does not serve cluster-local Routes (nor their
// tag hosts); a listener without it also answers every Route's cluster-local
// address, name.namespace.svc.cluster.local, and its short forms
// name.namespace.svc and name.namespace, as Knative's cluster-local gateway
// does (a host published in the table wins over these). An unknown host gets
// 404 with a short text body.
//
// # Headers
//
// Request headers are forwarded as received, Host included, except:
//   - hop-by-hop headers (Connection and what it names, Keep-Alive,
//     Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE except
//     "trailers", Trailer, Transfer-Encoding, Upgrade except for an upgrade
//     that is proxied), as HTTP requires of a proxy;
//   - X-Forwarded-For, X-Forwarded-Proto and Forwarded (RFC 7239), which
//     knbox sets itself from the connection (client values are not trusted),
//     and X-Forwarded-Host, which is dropped for the same reason.
//
// Trace headers (traceparent, tracestate, X-B3-*, b3) pass through; a W3C
// traceparent with a random trace id and span id and flags 01 is started
// when the request has none.
//
// # Admission
//
// An instance never gets more requests in flight than the revision's
// containerConcurrency (0: unlimited). A request that finds no instance with
// spare capacity waits in the revision's FIFO queue; a request for a
// revision with no ready instance is held in the same queue, and the
// autoscaler is poked (Options.Poke) and the runtime asked for an instance
// (Instances.Activate) at once, then again every second while requests are
// held. Waiting requests are sent the moment capacity frees up or an
// instance becomes ready (Instances.Subscribe). Among ready instances with
// spare capacity the one with the fewest requests in flight is chosen, ties
// at random.
//
// The queue is bounded per revision by Options.MaxQueuedPerRevision,
// default 10000: Knative's activator buffers up to 10000 requests per
// revision, and it sits in front of every revision that is at zero or short
// of burst capacity, so that is what a Knative user can rely on. knbox does
// not add the queue-proxy's own 10 x containerConcurrency bound per
// instance on top, because here queue and instances are in one place: a
// request waits once, for the first instance with a free slot. A request
// that finds the queue full gets 503.
//
// A request waits at most Options.ActivationTimeout (default: the
// revision's timeoutSeconds, or 5 minutes when it has none) for a slot,
// whether the revision is scaling from zero or its instances are busy, and
// then gets 503, as Knative's activator answers when its wait times out.
//
// # Timeouts
//
// timeoutSeconds, responseStartTimeoutSeconds and idleTimeoutSeconds count
// from the moment the request is handed to an instance (the wait before
// that is bounded by ActivationTimeout). If no byte of the response (its
// status line and headers) has come back when the first of them expires,
// the request to the instance is cancelled and the client gets 504. A
// response that has started is not cut by timeoutSeconds or
// responseStartTimeoutSeconds; idleTimeoutSeconds cuts a started response
// that stays silent (no body bytes from the instance) for longer than it.
// An upgraded connection (WebSocket) is not subject to these timeouts.
//
// # Failures
//
// When the connection to an instance cannot be made (the instance died or
// is not listening), nothing has reached the container, so the request is
// retried on another ready instance, up to three attempts in all, if the
// request body has not been read yet. Otherwise the client gets 502 when
// the instance failed before its response started. When the instance fails
// after the response started, the status cannot be changed: knbox aborts
// the client's connection (HTTP/1.1) or resets the stream (HTTP/2), so the
// client sees an incomplete response, never a silently short one.
//
// # Draining
//
// An instance that disappears from Instances.Endpoints gets no new requests;
// once its last request in flight has ended, Instances.Drained is called so
// the runtime can stop it.
//
// # Statistics and metrics
//
// Run reports, once a second per revision with traffic or instances, the
// time-weighted average number of requests in flight during that second
// (requests that wait for a slot or for an instance included, as Knative's
// activator reports them) and the number of requests that arrived in it.
// The Prometheus collector ([Router.Collector]) exports requests by code
// class, requests in flight and queue depth per revision. Nothing is logged
// per request unless the logger has debug enabled.
//
// # Bounds
//
// Every goroutine and buffer on the request path has an owner and a bound:
// the router starts no goroutine per request (a timer callback per request
// runs only when a timeout fires); net/http's ReverseProxy owns two copy
// goroutines per upgraded connection, which end when either side closes or
// the request ends; an endpoint refresh runs in at most two goroutines per
// revision at a time (one running, one pending); each endpoint owns its
// connection pool (at most 100 idle connections, closed when the endpoint
// is drained); response bodies are copied through 32 KiB buffers from one
// pool, one per response being copied; response headers are limited to 1
// MiB; waiting requests are bounded by MaxQueuedPerRevision and
// ActivationTimeout.
//
// Clients speak HTTP/1.1, or HTTP/2 cleartext when the caller wraps the
// Router with h2c.NewHandler (golang.org/x/net/http2/h2c). Instances get
// HTTP/1.1, or HTTP/2 cleartext when their port is named h2c
// ([Endpoint.H2C]).
package router
