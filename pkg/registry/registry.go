// Package registry serves the OCI distribution API (push and pull: blobs
// with monolithic and chunked uploads and cross-repository mounts,
// manifests by tag and digest, tags lists) over knbox's image cache, so
// that `crane push`, `docker push`, `ko build` and build steps push straight
// into knbox and Revisions run what was pushed without a network.
//
// Repositories are "<namespace>/<name>" (the name may have more
// components). Every request carries one of knbox's tokens, as a Bearer
// token or as the password of HTTP Basic authentication with any user name
// (so `docker login` and `crane auth login` work); the challenge is Basic.
// Pulling (GET and HEAD) needs the verb "get", pushing "create" and
// deleting "delete" on the resource "repositories" of the API group
// registry.knbox.dev in the repository's namespace, with the repository's
// name (after the namespace) as the resource name; a mount needs "get" on
// the repository it mounts from too. The default roles grant edit and admin
// push and pull, view pull.
//
// The package owns the protocol, authentication, authorization and upload
// sessions; what is stored, and how, belongs to pkg/image. It must not
// import the API server.
package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/image"
)

// The authorization vocabulary of the registry.
const (
	APIGroup = authz.RegistryGroup
	Resource = authz.RegistryResource
)

// Defaults of Options.
const (
	DefaultMaxBlobBytes     = image.DefaultMaxLayerBytes
	DefaultMaxManifestBytes = image.DefaultMaxManifestBytes
	DefaultMaxUploads       = 64
	DefaultUploadTTL        = 15 * time.Minute
	// maxTagsPage bounds a tags list page.
	maxTagsPage = 1000
)

// Options configure a Handler. Zero values are the documented defaults.
type Options struct {
	Store *image.Store
	// Authenticate returns the user a token names; false if it names
	// none. Required.
	Authenticate func(token string) (user.Info, bool)
	// Authorizer decides what the user may do. Required.
	Authorizer authorizer.Authorizer
	// MaxBlobBytes bounds a blob upload (DefaultMaxBlobBytes;
	// registry.maxBlobBytes).
	MaxBlobBytes int64
	// MaxManifestBytes bounds a pushed manifest (DefaultMaxManifestBytes;
	// registry.maxManifestBytes).
	MaxManifestBytes int64
	// MaxUploads bounds the upload sessions open at once
	// (DefaultMaxUploads; registry.maxUploads).
	MaxUploads int
	// UploadTTL is how long an upload session may stay idle before it is
	// dropped (DefaultUploadTTL; registry.uploadTTL).
	UploadTTL time.Duration
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// Now; nil: time.Now (tests).
	Now func() time.Time
}

// Handler serves the distribution API under /v2/.
type Handler struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
}

// session is an upload in progress.
type session struct {
	mu   sync.Mutex // one request at a time
	up   *image.Upload
	repo string
	user string
	used time.Time
	gone bool
}

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Store == nil || opts.Authenticate == nil || opts.Authorizer == nil {
		return nil, errors.New("registry: Store, Authenticate and Authorizer are required")
	}
	if opts.MaxBlobBytes <= 0 {
		opts.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if opts.MaxManifestBytes <= 0 {
		opts.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if opts.MaxUploads <= 0 {
		opts.MaxUploads = DefaultMaxUploads
	}
	if opts.UploadTTL <= 0 {
		opts.UploadTTL = DefaultUploadTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Handler{opts: opts, log: log, sessions: map[string]*session{}}, nil
}

// regError is an error of the distribution API.
type regError struct {
	status int
	code   string
	msg    string
}

func (e *regError) Error() string { return e.msg }

func fail(status int, code, format string, args ...any) *regError {
	return &regError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func (h *Handler) writeError(w http.ResponseWriter, err error) {
	var re *regError
	if !errors.As(err, &re) {
		var pe *pathError
		if errors.As(err, &pe) {
			status := http.StatusBadRequest
			if pe.code == "NAME_UNKNOWN" || pe.code == "BLOB_UPLOAD_UNKNOWN" {
				status = http.StatusNotFound
			}
			re = &regError{status: status, code: pe.code, msg: pe.msg}
		} else {
			re = h.storeError(err, "BLOB_UNKNOWN")
		}
	}
	if re.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="knbox"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(re.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": re.code, "message": re.msg}}})
}

// storeError maps an error of the image store; notFound is the code of
// ErrNotFound in the request's context.
func (h *Handler) storeError(err error, notFound string) *regError {
	switch {
	case errors.Is(err, image.ErrDigestMismatch):
		return fail(http.StatusBadRequest, "DIGEST_INVALID", "%v", err)
	case errors.Is(err, image.ErrTooLarge):
		return fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "%v", err)
	case errors.Is(err, image.ErrInvalidManifest):
		return fail(http.StatusBadRequest, "MANIFEST_INVALID", "%v", err)
	case errors.Is(err, image.ErrBlobUnknown):
		return fail(http.StatusBadRequest, "MANIFEST_BLOB_UNKNOWN", "%v: push it first", err)
	case errors.Is(err, image.ErrInvalidName):
		return fail(http.StatusBadRequest, "NAME_INVALID", "%v", err)
	case errors.Is(err, image.ErrNotFound):
		return fail(http.StatusNotFound, notFound, "%v", err)
	}
	h.log.Error("registry storage", "err", err)
	return fail(http.StatusInternalServerError, "UNKNOWN", "the registry could not store or read it: %v", err)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	u, ok := h.authenticate(r)
	if !ok {
		h.writeError(w, fail(http.StatusUnauthorized, "UNAUTHORIZED", "authentication required: a knbox token as Bearer token, or as the password of Basic authentication (any user name)"))
		return
	}
	rt, err := parseRoute(r.URL.Path)
	if err != nil {
		h.writeError(w, err)
		return
	}
	if rt.kind == routeBase {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "%s /v2/ is not supported", r.Method))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
		return
	}
	if rt.kind == routeCatalog {
		h.writeError(w, fail(http.StatusNotFound, "UNSUPPORTED", "the catalog is not served: list the images of a namespace with `knbox image ls`"))
		return
	}
	verb := ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		verb = "create"
	case http.MethodDelete:
		verb = "delete"
		if rt.kind == routeUpload {
			verb = "create" // cancelling one's own upload
		}
	default:
		h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "method %s is not supported", r.Method))
		return
	}
	if err := h.authorize(r.Context(), u, verb, rt.namespace, rt.name); err != nil {
		h.writeError(w, err)
		return
	}
	switch rt.kind {
	case routeBlob:
		h.serveBlob(w, r, rt)
	case routeUploads:
		h.startUpload(w, r, u, rt)
	case routeUpload:
		h.serveUpload(w, r, u, rt)
	case routeManifest:
		h.serveManifest(w, r, rt)
	case routeTags:
		h.serveTags(w, r, rt)
	}
}

// authenticate reads a Bearer token, or the password of Basic
// authentication.
func (h *Handler) authenticate(r *http.Request) (user.Info, bool) {
	scheme, cred, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	cred = strings.TrimSpace(cred)
	var token string
	switch {
	case strings.EqualFold(scheme, "bearer"):
		token = cred
	case strings.EqualFold(scheme, "basic"):
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return nil, false
		}
		_, token, _ = strings.Cut(string(raw), ":")
	}
	if token == "" {
		return nil, false
	}
	u, ok := h.opts.Authenticate(token)
	if !ok || u == nil || u.GetName() == "" {
		return nil, false
	}
	return u, true
}

// authorize asks the authorizer whether u may do verb on the repository.
func (h *Handler) authorize(ctx context.Context, u user.Info, verb, namespace, name string) error {
	attrs := authorizer.AttributesRecord{User: u, Verb: verb, Namespace: namespace, APIGroup: APIGroup, APIVersion: "v1",
		Resource: Resource, Name: name, ResourceRequest: true}
	d, reason, err := h.opts.Authorizer.Authorize(ctx, attrs)
	if err != nil {
		h.log.Warn("authorizing a registry request", "err", err)
	}
	if d == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot %s repositories.%s %q in the namespace %q", u.GetName(), verb, APIGroup, name, namespace)
	if reason != "" {
		msg += ": " + reason
	}
	return fail(http.StatusForbidden, "DENIED", "%s", msg)
}

func (h *Handler) serveBlob(w http.ResponseWriter, r *http.Request, rt route) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "%s of a blob is not supported: blobs go when nothing references them (knbox image prune)", r.Method))
		return
	}
	f, size, err := h.opts.Store.OpenBlob(rt.repo, rt.ref)
	if err != nil {
		h.writeError(w, h.storeError(err, "BLOB_UNKNOWN"))
		return
	}
	defer f.Close()
	w.Header().Set("Docker-Content-Digest", rt.ref)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Etag", `"`+rt.ref+`"`)
	w.Header().Set("Cache-Control", "max-age=31536000")
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(f, 0, size))
}

// startUpload serves POST /v2/<repo>/blobs/uploads/: a mount, a
// monolithic upload (?digest=) or the start of a session.
func (h *Handler) startUpload(w http.ResponseWriter, r *http.Request, u user.Info, rt route) {
	if r.Method != http.MethodPost {
		h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "%s of %s is not supported", r.Method, r.URL.Path))
		return
	}
	q := r.URL.Query()
	if mount, from := q.Get("mount"), q.Get("from"); mount != "" && from != "" {
		if h.mount(r.Context(), u, rt, mount, from) {
			w.Header().Set("Location", "/v2/"+rt.repo+"/blobs/"+mount)
			w.Header().Set("Docker-Content-Digest", mount)
			w.WriteHeader(http.StatusCreated)
			return
		}
		// Not mountable: an ordinary upload session, as the spec says.
	}
	if d := q.Get("digest"); d != "" {
		if !image.ValidDigest(d) {
			h.writeError(w, fail(http.StatusBadRequest, "DIGEST_INVALID", "digest %q is not a sha256 digest", d))
			return
		}
		if r.ContentLength > h.opts.MaxBlobBytes {
			h.writeError(w, h.tooLarge(r.ContentLength))
			return
		}
		up, err := h.opts.Store.NewUpload()
		if err != nil {
			h.writeError(w, err)
			return
		}
		defer up.Abort()
		if _, err := up.Append(r.Context(), r.Body, h.opts.MaxBlobBytes); err != nil {
			h.writeError(w, h.uploadError(err))
			return
		}
		h.commit(w, up, rt, d)
		return
	}
	id, err := h.newSession(u, rt.repo)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.accepted(w, rt, id, 0)
}

// mount links a blob of another repository, if the user may pull it.
func (h *Handler) mount(ctx context.Context, u user.Info, rt route, digest, from string) bool {
	if !image.ValidDigest(digest) || checkRepo(from) != nil {
		return false
	}
	ns, name, _ := strings.Cut(from, "/")
	if h.authorize(ctx, u, "get", ns, name) != nil {
		return false
	}
	_, err := h.opts.Store.MountBlob(from, rt.repo, digest)
	return err == nil
}

func (h *Handler) uploadError(err error) error {
	if errors.Is(err, image.ErrTooLarge) {
		return fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "%v (registry.maxBlobBytes)", err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "%v", err)
	}
	return fail(http.StatusBadRequest, "BLOB_UPLOAD_INVALID", "reading the upload: %v", err)
}

// tooLarge is the 413 of a blob of n bytes, said before reading it.
func (h *Handler) tooLarge(n int64) error {
	return fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "the blob is %d bytes, more than %d (registry.maxBlobBytes)", n, h.opts.MaxBlobBytes)
}

// commit checks and stores a finished upload and answers 201.
func (h *Handler) commit(w http.ResponseWriter, up *image.Upload, rt route, digest string) {
	if _, err := up.Commit(rt.repo, digest); err != nil {
		h.writeError(w, h.storeError(err, "BLOB_UNKNOWN"))
		return
	}
	w.Header().Set("Location", "/v2/"+rt.repo+"/blobs/"+digest)
	w.Header().Set("Docker-Content-Digest", digest)
	w.WriteHeader(http.StatusCreated)
}

func (h *Handler) accepted(w http.ResponseWriter, rt route, id string, size int64) {
	w.Header().Set("Location", "/v2/"+rt.repo+"/blobs/uploads/"+id)
	w.Header().Set("Docker-Upload-UUID", id)
	w.Header().Set("Range", fmt.Sprintf("0-%d", max(size-1, 0)))
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// newSession opens an upload session, dropping idle ones first; when
// MaxUploads are open it answers 429.
func (h *Handler) newSession(u user.Info, repo string) (string, error) {
	id, err := image.NewUploadID()
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expireLocked()
	if len(h.sessions) >= h.opts.MaxUploads {
		return "", fail(http.StatusTooManyRequests, "TOOMANYREQUESTS", "%d uploads are in progress, the most this registry takes at once (registry.maxUploads): retry later", h.opts.MaxUploads)
	}
	up, err := h.opts.Store.NewUpload()
	if err != nil {
		return "", err
	}
	h.sessions[id] = &session{up: up, repo: repo, user: u.GetName(), used: h.opts.Now()}
	return id, nil
}

// expireLocked drops the sessions idle for longer than UploadTTL. A
// session in use is skipped.
func (h *Handler) expireLocked() {
	now := h.opts.Now()
	for id, s := range h.sessions {
		if !s.mu.TryLock() {
			continue
		}
		if now.Sub(s.used) > h.opts.UploadTTL {
			s.up.Abort()
			s.gone = true
			delete(h.sessions, id)
		}
		s.mu.Unlock()
	}
}

// session returns the session id of u on repo, locked, or nil.
func (h *Handler) session(u user.Info, repo, id string) *session {
	h.mu.Lock()
	h.expireLocked()
	s := h.sessions[id]
	h.mu.Unlock()
	if s == nil || s.repo != repo || s.user != u.GetName() {
		return nil
	}
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil
	}
	return s
}

func (h *Handler) endSession(id string, s *session) {
	s.up.Abort()
	s.gone = true
	h.mu.Lock()
	delete(h.sessions, id)
	h.mu.Unlock()
}

// serveUpload serves PATCH (a chunk), PUT (the last chunk and the digest),
// GET (the status) and DELETE (cancel) of an upload session.
func (h *Handler) serveUpload(w http.ResponseWriter, r *http.Request, u user.Info, rt route) {
	s := h.session(u, rt.repo, rt.ref)
	if s == nil {
		h.writeError(w, fail(http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN", "upload %s of %s is unknown: it ended, expired (registry.uploadTTL) or was never started", rt.ref, rt.repo))
		return
	}
	defer s.mu.Unlock()
	s.used = h.opts.Now()
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Docker-Upload-UUID", rt.ref)
		w.Header().Set("Location", "/v2/"+rt.repo+"/blobs/uploads/"+rt.ref)
		w.Header().Set("Range", fmt.Sprintf("0-%d", max(s.up.Size()-1, 0)))
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		h.endSession(rt.ref, s)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPatch, http.MethodPut:
		if cr := r.Header.Get("Content-Range"); cr != "" && r.Method == http.MethodPatch {
			start, ok := rangeStart(cr)
			if !ok || start != s.up.Size() {
				w.Header().Set("Location", "/v2/"+rt.repo+"/blobs/uploads/"+rt.ref)
				w.Header().Set("Range", fmt.Sprintf("0-%d", max(s.up.Size()-1, 0)))
				h.writeError(w, fail(http.StatusRequestedRangeNotSatisfiable, "BLOB_UPLOAD_INVALID", "Content-Range %q does not start at %d, the bytes received so far", cr, s.up.Size()))
				return
			}
		}
		if r.ContentLength > 0 && s.up.Size()+r.ContentLength > h.opts.MaxBlobBytes {
			h.endSession(rt.ref, s)
			h.writeError(w, h.tooLarge(s.up.Size()+r.ContentLength))
			return
		}
		if _, err := s.up.Append(r.Context(), r.Body, h.opts.MaxBlobBytes); err != nil {
			h.endSession(rt.ref, s)
			h.writeError(w, h.uploadError(err))
			return
		}
		s.used = h.opts.Now()
		if r.Method == http.MethodPatch {
			h.accepted(w, rt, rt.ref, s.up.Size())
			return
		}
		d := r.URL.Query().Get("digest")
		if !image.ValidDigest(d) {
			h.endSession(rt.ref, s)
			h.writeError(w, fail(http.StatusBadRequest, "DIGEST_INVALID", "the digest parameter %q is not a sha256 digest", d))
			return
		}
		defer h.endSession(rt.ref, s)
		h.commit(w, s.up, rt, d)
	}
}

// rangeStart reads the start of a Content-Range "start-end" (or
// "bytes start-end/*").
func rangeStart(cr string) (int64, bool) {
	cr = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(cr), "bytes"))
	cr, _, _ = strings.Cut(cr, "/")
	a, _, ok := strings.Cut(strings.TrimSpace(cr), "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil && n >= 0
}

func (h *Handler) serveManifest(w http.ResponseWriter, r *http.Request, rt route) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		raw, mt, digest, err := h.opts.Store.GetManifest(rt.repo, rt.ref)
		if err != nil {
			h.writeError(w, h.storeError(err, "MANIFEST_UNKNOWN"))
			return
		}
		w.Header().Set("Content-Type", mt)
		w.Header().Set("Docker-Content-Digest", digest)
		w.Header().Set("Etag", `"`+digest+`"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(raw)
		}
	case http.MethodPut:
		if r.ContentLength > h.opts.MaxManifestBytes {
			h.writeError(w, fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "the manifest is %d bytes, more than %d (registry.maxManifestBytes)", r.ContentLength, h.opts.MaxManifestBytes))
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, h.opts.MaxManifestBytes+1))
		if err != nil {
			h.writeError(w, fail(http.StatusBadRequest, "MANIFEST_INVALID", "reading the manifest: %v", err))
			return
		}
		if int64(len(raw)) > h.opts.MaxManifestBytes {
			h.writeError(w, fail(http.StatusRequestEntityTooLarge, "SIZE_INVALID", "the manifest is more than %d bytes (registry.maxManifestBytes)", h.opts.MaxManifestBytes))
			return
		}
		digest, err := h.opts.Store.PutManifest(rt.repo, rt.ref, raw, r.Header.Get("Content-Type"))
		if err != nil {
			h.writeError(w, h.storeError(err, "MANIFEST_UNKNOWN"))
			return
		}
		w.Header().Set("Location", "/v2/"+rt.repo+"/manifests/"+digest)
		w.Header().Set("Docker-Content-Digest", digest)
		w.WriteHeader(http.StatusCreated)
	case http.MethodDelete:
		if !image.ValidDigest(rt.ref) {
			h.writeError(w, fail(http.StatusBadRequest, "UNSUPPORTED", "delete a manifest by digest, not by tag"))
			return
		}
		if err := h.opts.Store.DeleteManifest(rt.repo, rt.ref); err != nil {
			h.writeError(w, h.storeError(err, "MANIFEST_UNKNOWN"))
			return
		}
		w.WriteHeader(http.StatusAccepted)
	default:
		h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "%s of a manifest is not supported", r.Method))
	}
}

func (h *Handler) serveTags(w http.ResponseWriter, r *http.Request, rt route) {
	if r.Method != http.MethodGet {
		h.writeError(w, fail(http.StatusMethodNotAllowed, "UNSUPPORTED", "%s of a tags list is not supported", r.Method))
		return
	}
	tags, err := h.opts.Store.Tags(rt.repo)
	if err != nil {
		h.writeError(w, h.storeError(err, "NAME_UNKNOWN"))
		return
	}
	q := r.URL.Query()
	if last := q.Get("last"); last != "" {
		i := 0
		for i < len(tags) && tags[i] <= last {
			i++
		}
		tags = tags[i:]
	}
	n := maxTagsPage
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			h.writeError(w, fail(http.StatusBadRequest, "PAGINATION_NUMBER_INVALID", "n=%q is not a number of tags", s))
			return
		}
		n = min(v, maxTagsPage)
	}
	if len(tags) > n {
		tags = tags[:n]
		if n > 0 {
			w.Header().Set("Link", fmt.Sprintf(`</v2/%s/tags/list?n=%d&last=%s>; rel="next"`, rt.repo, n, url.QueryEscape(tags[n-1])))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"name": rt.repo, "tags": tags})
}
