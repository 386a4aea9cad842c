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
// # Request path
//
// [Server] serves a Router on plain TCP listeners. The common HTTP/1.1
// request takes the fast path: the connection's one goroutine parses the
// request head itself, routes and admits it, writes it to a pooled
// connection of the instance in one write (with its body when the body
// came with the head), reads the response head, and writes head and body
// to the client; bodies of known length are spliced from socket to socket,
// chunked ones decoded and chunked again (chunk extensions dropped,
// trailers kept). Its reads and writes are raw system calls on the
// non-blocking sockets, waiting in Go's network poller (deadlines kept),
// so that the scheduler never hands the goroutine's P to another thread
// during one (see sock). Its parser is stricter than net/http's, as RFC 9112 §11
// asks of a proxy: lines end with CRLF, a request with both Content-Length
// and Transfer-Encoding, with more than one Content-Length or
// Transfer-Encoding, or with obsolete line folding gets 400, an unknown
// transfer coding 501, and the connection is closed. Whatever the fast
// path does not handle (HTTP/1.0, HTTP/2 cleartext by prior knowledge or
// Upgrade, WebSocket and other upgrades, Expect, CONNECT, absolute or
// asterisk targets, targets with bytes outside printable ASCII, heads over
// 8 KiB) is handed with the bytes read so far to a net/http server that
// runs [Router.ServeHTTP] wrapped for h2c, for the rest of the
// connection's life. Behaviour is the same on both paths, but for what
// the fast path forwards exactly as received: header names keep their
// case and order, and a response without Content-Type gets none (net/http
// would sniff one). Both add Date to a response that has none.
//
// A client connection waits at most Server.IdleTimeout (default 90s) for
// a request, at most Server.ReadHeaderTimeout (default 10s) for the rest
// of a head once its first byte came, and a request's body is read within
// Server.ReadTimeout if it is set (knbox's limits.router keys set them).
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
// A [Server] with a Namespace serves the calls of that namespace's
// instances, on listeners knbox opens inside their network namespaces: it
// answers as a listener without [Options.External] does, and also takes a
// bare Route name ("hello") as a Route of its namespace, which is what a
// pod's search path makes of it. Such calls share everything else with
// external ones: the same revisions, concurrency limits, queues, statistics
// and scale from zero.
//
// # Headers
//
// Request headers are forwarded as received, Host included (on the fast
// path with their names' case and their order), except:
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
// autoscaler is poked (Options.Poke: the router has no other say in a
// revision's scale) with the number of requests held: at once, again
// whenever more are held than the last poke said (so a burst counts whole
// in the first decisions), then every second while requests are held. Waiting requests are sent the moment capacity frees up or an
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
// request body has not been read yet. A kept connection that the instance
// had closed is not a failure: a request without a body and of an
// idempotent method (GET, HEAD, OPTIONS, TRACE) is sent again on a new
// connection, as net/http's transport does; for any other request a kept
// connection is checked (a non-blocking peek) before it is used. Otherwise the client gets 502 when
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
// per request unless the logger has debug enabled. An [Observer]
// (Options.Observer) is told about every request once it has ended, on
// both paths: route, revision, instance, code, body bytes, duration, queue
// wait and whether it waited for a cold start; without one the router does
// no work for it.
//
// # Bounds
//
// Every goroutine and buffer on the request path has an owner and a bound.
// On the fast path: one goroutine per client connection, which ends with
// the connection; a second one per request whose body does not come with
// its head, copying the body while the response is read, which ends with
// the request; a third one only while a request waits in the queue or
// waits more than 50ms for the instance's first byte, reading the client
// connection to notice a client that leaves (as net/http's server does for
// every request), which ends when the wait does. Each client connection
// owns an 8 KiB read buffer, each instance connection in use another
// (from one pool); a response head may grow its buffer up to 1 MiB, not
// more; at most 5 informational responses are forwarded per request; the
// revision's timeouts are read deadlines on the instance connection. On
// the net/http path the router starts no goroutine per request (a timer
// callback per request runs only when a timeout fires); net/http's
// ReverseProxy owns two copy goroutines per upgraded connection, which end
// when either side closes or the request ends; response bodies are copied
// through 32 KiB buffers from one pool. An endpoint refresh runs in at
// most two goroutines per revision at a time (one running, one pending);
// each endpoint owns its connection pools (at most 100 idle connections
// each, idle at most 60s, closed when the endpoint is drained); response
// headers are limited to 1 MiB; waiting requests are bounded by
// MaxQueuedPerRevision and ActivationTimeout.
//
// Clients speak HTTP/1.1 or HTTP/2 cleartext to a [Server] (or whatever
// a caller's http.Server speaks, with the Router as its handler, e.g. over
// TLS). Instances get HTTP/1.1, or HTTP/2 cleartext when their port is
// named h2c ([Endpoint.H2C]); a fast-path request to such an instance goes
// through the net/http proxy, its answer written to the client as
// HTTP/1.1.
package router
