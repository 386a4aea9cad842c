// Package metrics owns what knbox tells Prometheus and the access log: the
// request metrics of the router (Knative's queue-proxy and activator
// names: revision_request_count, revision_request_latencies, ...), the
// autoscaler's gauges (autoscaler_desired_pods, ...), the instances' cold
// starts, restarts and cgroup usage (cAdvisor's container_* names), the API
// server's request metrics (apiserver_request_total, ...) and the Go
// runtime and process collectors, all in one registry served by Handler.
//
// The router tells it about each request through router.Observer; the
// request goroutine only hands the RequestInfo to a bounded queue, and one
// goroutine (Run) updates the metrics and writes the access log, so the
// request path neither waits for a lock nor formats a log line. What the
// queue cannot take is dropped and counted (knbox_observer_dropped_total).
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
