// Package metrics owns what knbox tells Prometheus and the access log: the
// request metrics of the router (Knative's queue-proxy and activator
// names: revision_request_count, revision_request_latencies, ...), the
// autoscaler's gauges (autoscaler_desired_pods, ...), the instances' cold
// starts, restarts and cgroup usage (cAdvisor's container_* names), the API
// server's request metrics (apiserver_request_total, ...) and the Go
// runtime and process collectors, all in one registry served by Handler.
//
// The router tells it about each request through router.Observer. The
// request goroutine counts it on label-bound series cached per revision
// and response code (client_golang's Inc and Observe are atomic): no
// allocation, no lock but a read lock on the cache, no hand-off. Only with
// the access log or the trace hook on does it also hand a copy of the
// RequestInfo to a bounded queue that one goroutine (Run) drains, so the
// request path never formats a log line; what the queue cannot take is
// left out of the log and the spans and counted
// (knbox_observer_dropped_total). The console's samples (Totals) gather
// the same series on the console's own timer.
// Everything else is read when scraped, from the parts that own it.
//
// Label sets are bounded: a revision's series are removed when the
// revision is deleted (Forget), instance series exist only while the
// instance does, and response codes outside 100-599 count as "0".
//
// It must not reach into the parts it reads: it is given functions that
// return their state, and imports no part of knbox but the router's
// RequestInfo.
package metrics
