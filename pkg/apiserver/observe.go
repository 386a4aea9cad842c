package apiserver

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
)

// RequestRecord describes one API request once it has ended, for
// kube-apiserver's request metrics (apiserver_request_total and
// apiserver_request_duration_seconds). Every field takes its value from a
// bounded set, whatever the client sent: a resource knbox does not serve
// leaves Group, Version, Resource and Subresource empty, and an unknown
// method is the verb "OTHER", so a client cannot grow the label sets.
type RequestRecord struct {
	// Verb is kube-apiserver's: GET, LIST, WATCH, POST, PUT, PATCH, APPLY,
	// DELETE, DELETECOLLECTION; a non-resource request its method.
	Verb string
	// Group, Version, Resource and Subresource name what was asked for.
	Group, Version, Resource, Subresource string
	// Scope is "resource" (one named object), "namespace", "cluster", or
	// empty for non-resource requests.
	Scope string
	// Code is the status of the response (0 if none was written).
	Code     int
	Duration time.Duration
}

// observed is the response writer of an observed request: it remembers the
// status and the request's attributes once authorize found them.
type observed struct {
	http.ResponseWriter
	code int
	info *genericrequest.RequestInfo
}

func (o *observed) WriteHeader(code int) {
	if o.code == 0 {
		o.code = code
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *observed) Write(p []byte) (int, error) {
	if o.code == 0 {
		o.code = http.StatusOK
	}
	return o.ResponseWriter.Write(p)
}

// Flush lets watches and followed logs stream through the wrapper.
func (o *observed) Flush() {
	if f, ok := o.ResponseWriter.(http.Flusher); ok {
		if o.code == 0 {
			o.code = http.StatusOK
		}
		f.Flush()
	}
}

// Unwrap is for http.ResponseController (read deadlines).
func (o *observed) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// verbs are the verb labels kube-apiserver reports, by RequestInfo verb.
var metricVerbs = map[string]string{
	"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT", "patch": "PATCH",
	"delete": "DELETE", "deletecollection": "DELETECOLLECTION",
}

// methods are the methods reported as themselves for non-resource
// requests.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// record describes a finished request with bounded labels.
func (s *Server) record(o *observed, method, contentType string, d time.Duration) RequestRecord {
	rec := RequestRecord{Code: o.code, Duration: d, Verb: "OTHER"}
	if methods[method] {
		rec.Verb = method
	}
	ri := o.info
	if ri == nil || !ri.IsResourceRequest {
		return rec
	}
	if v, ok := metricVerbs[ri.Verb]; ok {
		rec.Verb = v
		if v == "PATCH" && strings.HasPrefix(contentType, "application/apply-patch") {
			rec.Verb = "APPLY"
		}
	}
	switch {
	case ri.Name != "":
		rec.Scope = "resource"
	case ri.Namespace != "":
		rec.Scope = "namespace"
	default:
		rec.Scope = "cluster"
	}
	if k := s.kinds.Lookup(ri.APIGroup, ri.Resource); k != nil && k.Serves(ri.APIVersion) {
		rec.Group, rec.Version, rec.Resource = k.Group, ri.APIVersion, k.Resource
		switch ri.Subresource {
		case "status", "log", "token", "source", "":
			rec.Subresource = ri.Subresource
		default:
			rec.Subresource = "other"
		}
	}
	return rec
}

// Hijack lets exec and port-forward upgrade the connection (SPDY,
// WebSocket) through the wrapper; it counts as 101 Switching Protocols.
func (o *observed) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := o.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over")
	}
	if o.code == 0 {
		o.code = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}
