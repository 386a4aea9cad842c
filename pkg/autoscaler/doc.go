// Package autoscaler decides how many instances each Revision should have,
// as Knative's KPA does, from exact per-second samples of in-flight requests
// (or request counts) that the router reports.
//
// It owns the scaling algorithm and nothing else: it is fed samples
// ([Collector.Record], [Autoscaler.Record]), told when a request waits for a
// revision without instances ([Autoscaler.Poke]), and asked for decisions. It
// must not import the router, the runtime, the controllers or the API server;
// the caller wires it to them through the hooks in [Options].
//
// The pieces, from the bottom up:
//
//   - [SpecFor] turns config-autoscaler (Knative's own parser,
//     knative.dev/serving/pkg/autoscaler/config) and a Revision's
//     autoscaling.knative.dev/* annotations into a [Spec], with Knative's
//     precedence and defaults; values that Knative's admission would reject
//     fall back to the defaults instead of failing.
//   - [Collector] keeps one bucket per second per revision and returns the
//     plain average over the stable and the panic window, as Knative's
//     default "linear" aggregation does. (Knative's optional
//     weighted-exponential aggregation is not implemented; the
//     metric-aggregation-algorithm annotation is ignored.)
//   - [Decider] is Knative's per-revision decision: ceil(observed/target) over
//     both windows, clamped by the scale-up and scale-down rates against the
//     ready count, panic mode, scale-down delay, then the KPA reconciler's
//     part: min-scale (only while the revision is reachable), max-scale,
//     initial-scale until first reached, activation-scale, and scale to zero
//     only after a stable window without traffic plus the grace period.
//   - [Autoscaler] ties them together on a tick (2s, Knative's), keeps the
//     Active condition (False with reason NoTraffic once the revision is
//     being scaled to zero, True again on the next request) and reports
//     changes through hooks.
//
// Where knbox deliberately differs from Knative on a cluster, because the
// router is activator, queue-proxy and metric source in one, the difference
// is documented where it is implemented: see [Decider] and [Autoscaler].
package autoscaler
