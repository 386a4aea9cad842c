package metrics

import (
	"context"
	"log/slog"

	"github.com/knbox/knbox/pkg/router"
)

// logRequest writes one access log line: a JSON object with the time, the
// message "request" and these fields (durations in seconds):
//
//	host, method, path (the request target), proto, remote, user_agent,
//	namespace, route, revision, instance, status (0: none was sent),
//	bytes (response body), request_bytes, duration, queue_wait,
//	cold_start, traceparent
func (m *Metrics) logRequest(info *router.RequestInfo) {
	m.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("host", info.Host),
		slog.String("method", info.Method),
		slog.String("path", info.Target),
		slog.String("proto", info.Proto),
		slog.String("remote", info.RemoteAddr),
		slog.String("user_agent", info.UserAgent),
		slog.String("namespace", info.Namespace),
		slog.String("route", info.Route),
		slog.String("revision", info.Revision),
		slog.String("instance", info.Instance),
		slog.Int("status", info.Code),
		slog.Int64("bytes", info.ResponseBytes),
		slog.Int64("request_bytes", info.RequestBytes),
		slog.Float64("duration", info.Duration.Seconds()),
		slog.Float64("queue_wait", info.QueueWait.Seconds()),
		slog.Bool("cold_start", info.ColdStart),
		slog.String("traceparent", info.Traceparent),
	)
}
