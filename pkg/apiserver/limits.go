package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/store"
)

// This file holds the API's resource limits: requests in flight, the JSON
// patch copy limit, the statuses of the store's limits, the writes that
// deletions make (accepted while the disk is low), and the readiness checks.

// Limits bound what API requests may cost. Zero values are the documented
// defaults (kube-apiserver's); a negative count turns that limit off.
type Limits struct {
	// MaxRequestsInFlight bounds the reads (get, list, discovery) served at
	// once; one more gets 429 Too Many Requests with Retry-After.
	// DefaultMaxRequestsInFlight if zero.
	MaxRequestsInFlight int
	// MaxMutatingRequestsInFlight bounds creates, updates, patches and
	// deletes in the same way (DefaultMaxMutatingRequestsInFlight).
	MaxMutatingRequestsInFlight int
	// MaxLongRunningRequests bounds watches, followed logs and image
	// uploads, which the limits above do not count as they last
	// (DefaultMaxLongRunningRequests).
	MaxLongRunningRequests int
	// RequestTimeout bounds the time to read the body of a request that is
	// not long-running (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// StreamIdleTimeout closes an exec or port-forward session idle this
	// long (DefaultStreamIdleTimeout); StreamCreationTimeout bounds the
	// time to open its streams (DefaultStreamCreationTimeout).
	StreamIdleTimeout, StreamCreationTimeout time.Duration
	// ExemptGroups are never limited (nil: system:masters, as in
	// Kubernetes).
	ExemptGroups []string
	// EventTTL: an Event not seen again for this long is deleted
	// (DefaultEventTTL, kube-apiserver's --event-ttl).
	EventTTL time.Duration
	// MaxEventsPerNamespace: beyond, the least recently seen Events of
	// the namespace are deleted (DefaultMaxEventsPerNamespace).
	MaxEventsPerNamespace int
}

// Defaults of Limits.
const (
	DefaultMaxRequestsInFlight         = 400 // kube-apiserver's --max-requests-inflight
	DefaultMaxMutatingRequestsInFlight = 200 // --max-mutating-requests-inflight
	DefaultMaxLongRunningRequests      = 1000
	DefaultRequestTimeout              = 60 * time.Second // --request-timeout
	DefaultStreamIdleTimeout           = 4 * time.Hour    // the kubelet's
	DefaultStreamCreationTimeout       = 30 * time.Second // the kubelet's
	DefaultEventTTL                    = time.Hour        // --event-ttl
	DefaultMaxEventsPerNamespace       = 1000
)

func (l Limits) withDefaults() Limits {
	def := func(n *int, d int) {
		if *n == 0 {
			*n = d
		}
	}
	def(&l.MaxRequestsInFlight, DefaultMaxRequestsInFlight)
	def(&l.MaxMutatingRequestsInFlight, DefaultMaxMutatingRequestsInFlight)
	def(&l.MaxLongRunningRequests, DefaultMaxLongRunningRequests)
	if l.RequestTimeout == 0 {
		l.RequestTimeout = DefaultRequestTimeout
	}
	if l.StreamIdleTimeout == 0 {
		l.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if l.StreamCreationTimeout == 0 {
		l.StreamCreationTimeout = DefaultStreamCreationTimeout
	}
	def(&l.MaxEventsPerNamespace, DefaultMaxEventsPerNamespace)
	if l.EventTTL <= 0 {
		l.EventTTL = DefaultEventTTL
	}
	if l.ExemptGroups == nil {
		l.ExemptGroups = []string{"system:masters"}
	}
	return l
}

// inflight counts the requests being served, by class.
type inflight struct {
	reads, mutating, long atomic.Int64
}

// requestClass is how a request counts against the limits.
type requestClass int

const (
	classRead requestClass = iota
	classMutating
	classLongRunning
)

// classify tells a request's class: watches (?watch= or /watch/), followed
// logs and image uploads are long-running, as kube-apiserver's
// long-running check says; other requests are mutating unless GET, HEAD or
// OPTIONS.
func classify(r *http.Request) requestClass {
	q := r.URL.Query()
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1" || strings.Contains(r.URL.Path, "/watch/"):
		return classLongRunning
	case strings.HasSuffix(r.URL.Path, "/log") && q.Get("follow") == "true":
		return classLongRunning
	case strings.HasPrefix(r.URL.Path, "/knbox/v1/images/load"):
		return classLongRunning
	case strings.HasSuffix(r.URL.Path, "/exec") || strings.HasSuffix(r.URL.Path, "/portforward"):
		// Sessions, as kube-apiserver counts them (pods/exec, portforward).
		return classLongRunning
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return classRead
	}
	return classMutating
}

// admit counts an authenticated request against the limits of its class.
// Over a limit it answers 429 with Retry-After and returns false. The
// caller calls release when the request is done. It also bounds the time to
// read the request: long-running requests have no read deadline, others
// RequestTimeout.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, user admission.User) (release func(), ok bool) {
	l := s.limits
	class := classify(r)
	rc := http.NewResponseController(w)
	if class == classLongRunning {
		_ = rc.SetReadDeadline(time.Time{})
	} else if l.RequestTimeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(l.RequestTimeout))
	}
	for _, g := range user.Groups {
		if slices.Contains(l.ExemptGroups, g) {
			return func() {}, true
		}
	}
	var counter *atomic.Int64
	var limit int
	switch class {
	case classRead:
		counter, limit = &s.inflight.reads, l.MaxRequestsInFlight
	case classMutating:
		counter, limit = &s.inflight.mutating, l.MaxMutatingRequestsInFlight
	default:
		counter, limit = &s.inflight.long, l.MaxLongRunningRequests
	}
	if limit < 0 {
		return func() {}, true
	}
	if counter.Add(1) > int64(limit) {
		counter.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, apierrors.NewTooManyRequests("too many requests, please try again later", 1))
		return nil, false
	}
	return func() { counter.Add(-1) }, true
}

// applyJSONPatch applies a JSON patch (RFC 6902) as kube-apiserver does: at
// most maxJSONPatchOps operations, and "copy" operations that add at most
// the largest request body in all (a 1.7 KiB patch of copies doubling a
// value took 1.65 GB before).
func (s *Server) applyJSONPatch(cur, patch []byte) ([]byte, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch could not be applied: %v", err))
	}
	if len(p) > maxJSONPatchOps {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patch has %d operations, the limit is %d", len(p), maxJSONPatchOps))
	}
	opts := jsonpatch.NewApplyOptions()
	opts.AccumulatedCopySizeLimit = s.opts.MaxRequestBodyBytes
	out, err := p.ApplyWithOptions(cur, opts)
	if err != nil {
		var tooMuch *jsonpatch.AccumulatedCopySizeError
		if errors.As(err, &tooMuch) {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patch's copy operations add more than %d bytes", s.opts.MaxRequestBodyBytes))
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch could not be applied: %v", err))
	}
	return out, nil
}

// storageStatus maps the store's limits to the statuses a client reads: a
// value over its size limit is 413, a store out of disk space 507 (the
// message says what to do). Other errors give nil.
func storageStatus(err error) *metav1.Status {
	var tl *store.TooLargeError
	switch {
	case errors.As(err, &tl):
		return &newStatus(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
			fmt.Sprintf("the object is %d bytes stored, the limit for %s is %d bytes", tl.Size, tl.Resource, tl.Limit)).ErrStatus
	case errors.Is(err, store.ErrNoSpace):
		return &newStatus(http.StatusInsufficientStorage, metav1.StatusReasonUnknown,
			"insufficient storage: "+strings.TrimPrefix(err.Error(), "mutate ")+"; delete objects or free disk space").ErrStatus
	}
	return nil
}

// storeUpdate is store.Update, marked as a step of a deletion when deleting
// is set, so that it is accepted while the data dir is low on space: a
// deletion mark, a finalizer or owner reference removed.
func (s *Server) storeUpdate(key store.Key, expect int64, deleting bool, value func(rev int64) ([]byte, error)) (store.Entry, error) {
	return s.store.Mutate(key, func(cur *store.Entry, rev int64) (store.Mutation, error) {
		switch {
		case cur == nil:
			return store.Mutation{}, fmt.Errorf("update %s: %w", key, store.ErrNotFound)
		case expect != 0 && cur.Revision != expect:
			return store.Mutation{}, fmt.Errorf("update %s: at revision %d, expected %d: %w", key, cur.Revision, expect, store.ErrConflict)
		}
		v, err := value(rev)
		return store.Mutation{Value: v, Deleting: deleting}, err
	})
}

// ReadyCheck is one named check of /readyz: nil when ready, else why not.
type ReadyCheck struct {
	Name  string
	Check func() error
}

// serveHealth answers /healthz and /livez ("ok": the process serves), and
// /readyz from the readiness checks, as kube-apiserver does: "ok", or 500
// with a line per check ("[+]name ok", "[-]name failed: reason"), all of
// them with ?verbose. These paths need no token (see anonymousPaths); the reason of a failed
// check is shown to authenticated clients only ("reason withheld"
// otherwise) and logged when the check starts failing.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.URL.Path != "/readyz" {
		_, _ = w.Write([]byte("ok"))
		return
	}
	checks := append([]ReadyCheck{{Name: "store", Check: s.store.Check}}, s.opts.ReadyChecks...)
	sort.SliceStable(checks, func(i, j int) bool { return checks[i].Name < checks[j].Name })
	// Anonymous requests (no token) may ask; only clients with a token see
	// why a check fails.
	u := userFrom(r.Context())
	authenticated := u.Name != "" && u.Name != user.Anonymous
	var b strings.Builder
	failed := false
	for _, c := range checks {
		err := c.Check()
		s.noteReadiness(c.Name, err)
		switch {
		case err == nil:
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
		case authenticated:
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
		default:
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c.Name)
		}
	}
	_, verbose := r.URL.Query()["verbose"]
	switch {
	case failed:
		w.WriteHeader(http.StatusInternalServerError)
		b.WriteString("readyz check failed\n")
		_, _ = w.Write([]byte(b.String()))
	case verbose:
		b.WriteString("readyz check passed\n")
		_, _ = w.Write([]byte(b.String()))
	default:
		_, _ = w.Write([]byte("ok"))
	}
}

// noteReadiness logs a readiness check that starts failing, and one that
// passes again.
func (s *Server) noteReadiness(name string, err error) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if s.notReady == nil {
		s.notReady = map[string]bool{}
	}
	switch was := s.notReady[name]; {
	case err != nil && !was:
		s.log.Warn("not ready", "check", name, "err", err)
	case err == nil && was:
		s.log.Info("ready again", "check", name)
	}
	s.notReady[name] = err != nil
}
