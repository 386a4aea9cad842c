// Package apiserver serves the Knative Serving API (and the few core
// Kubernetes kinds knbox needs) on the Kubernetes wire format: discovery,
// CRUD, the status subresource, patches, watches and server-side tables, over
// the durable store, with admission from package admission. kubectl and
// Knative's generated clientset are its clients.
//
// It owns the semantics Kubernetes gives objects (uid, generation,
// resourceVersion concurrency, ownerReferences and cascading deletion,
// namespace lifecycle, ResourceQuota status) and the request path of
// kube-apiserver: every request is authenticated (bearer tokens,
// ServiceAccount tokens), then authorized by package authz (RBAC) before
// any handler runs (auth.go). It serves the
// RBAC kinds, ServiceAccounts with the TokenRequest API, and the access
// reviews. It must not import the data plane (router, runtime): controllers
// and the data plane read and write objects through it or the store.
package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/serviceaccount"
	"github.com/knbox/knbox/pkg/store"
)

// DefaultMaxBodyBytes bounds a request body, as kube-apiserver does (3 MiB).
const DefaultMaxBodyBytes = 3 << 20

// Options configure a Server. Zero values are documented defaults.
type Options struct {
	Store    *store.Store
	Kinds    *Kinds
	Admitter *admission.Admitter
	// Authenticate checks the Authorization header; nil lets every request
	// in as "admin" (tests only).
	Authenticate func(authorization string) (admission.User, bool)
	// MaxRequestBodyBytes bounds request bodies; 0 means DefaultMaxBodyBytes.
	MaxRequestBodyBytes int64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Extensions are knbox's own endpoints, served under /knbox/v1/NAME
	// behind the same authentication, without the body size limit of API
	// objects (an image archive is large); each bounds what it reads.
	Extensions map[string]http.Handler
	// Logs streams a revision's logs for the revisions/{name}/log
	// subresource (as pods/{name}/log on Kubernetes); nil: not served.
	Logs func(ctx context.Context, w io.Writer, namespace, revision string, opts LogOptions) error
	// BuildLogs streams a Build's steps' output for the builds/{name}/log
	// subresource; nil: not served.
	BuildLogs func(ctx context.Context, w io.Writer, namespace, build string, opts LogOptions) error
	// BuildSource receives a Build's source archive, PUT to the
	// builds/{name}/source subresource; build is the stored Build. It
	// returns API status errors (a Conflict when the Build takes no upload
	// now); nil: not served.
	BuildSource func(ctx context.Context, build runtime.Object, body io.Reader) error
	// MaxBuildSourceBytes bounds that upload's body (413 past it) in place
	// of MaxRequestBodyBytes; 0 means DefaultMaxBuildSourceBytes.
	MaxBuildSourceBytes int64
	// PodLogs streams one container's output of a Pod (an instance) for
	// the pods/{name}/log subresource; nil: not served. It returns
	// ErrNoPreviousContainer when opts.Previous finds no ended run.
	PodLogs func(ctx context.Context, w io.Writer, pod *corev1.Pod, opts PodLogOptions) error
	// Exec runs cmd in a container of a Pod's instance for pods/exec
	// (stdin nil: none; stdout and stderr nil: not wanted) and returns its
	// exit code; nil: not served.
	Exec func(ctx context.Context, pod *corev1.Pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)
	// PortForward connects to a port of a Pod's instance for
	// pods/portforward; nil: not served.
	PortForward func(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, error)
	// ReadyChecks are checked by /readyz besides the store's free space.
	ReadyChecks []ReadyCheck
	// Limits bound what requests may cost; see Limits.
	Limits Limits
	// ServiceAccountTokens signs and verifies ServiceAccount tokens; nil: a
	// key made for this process (its tokens do not outlive it).
	ServiceAccountTokens *serviceaccount.Signer
	// RootCA, when set, is the CA bundle (PEM) clients inside instances
	// trust the API with: it is published as the ConfigMap
	// kube-root-ca.crt (key ca.crt) in every namespace, as
	// kube-controller-manager's root-ca-cert-publisher does.
	RootCA []byte
	// MaxTokenExpiration caps the lifetime of issued tokens; 0 means
	// serviceaccount.DefaultMaxTokenExpiration.
	MaxTokenExpiration time.Duration
	// PodUID returns the UID of the Pod (instance) namespace/name, for
	// tokens bound to one; nil: the Pods the API serves (RunPods).
	PodUID func(namespace, name string) (types.UID, error)
	// Metrics, if not nil, serves /metrics, authorized as kube-apiserver
	// authorizes it (RBAC: get on the non-resource URL /metrics, which the
	// default policy grants to the group system:monitoring).
	Metrics http.Handler
	// Observe, if not nil, is told about every request once it has ended,
	// the refused ones included (see RequestRecord).
	Observe func(RequestRecord)
	// Ingress, if not nil, is the core/v1 Service that describes knbox's
	// ingress, stored at Start (with its namespace) and read-only to users.
	Ingress *corev1.Service
}

// LogOptions are the query parameters of the log subresource.
type LogOptions struct {
	Follow bool
	Since  time.Time // zero: from the start
}

// Server is the API server. Create it with New, start its background work
// with Start, and serve Handler().
type Server struct {
	opts  Options
	store *store.Store
	kinds *Kinds
	log   *slog.Logger

	// gc is the queue of the garbage collector and namespace finaliser;
	// it carries one key: a full, level-triggered pass.
	gc workqueue.RateLimitingInterface

	openapiOnce sync.Once
	openapi     *openAPI // the OpenAPI documents (openapi.go)
	openapiErr  error
	fms         fieldManagers // server-side apply (apply.go)

	limits   Limits   // Options.Limits with defaults
	inflight inflight // requests being served, by class

	readyMu  sync.Mutex
	notReady map[string]bool // by readiness check
	// authentication and authorization (auth.go)
	rbac   *rbacSource
	authz  *authz.Authorizer
	tokens *serviceaccount.Signer
	saAuth *serviceaccount.Authenticator

	// the Pods mirror (pods.go)
	podsMu   sync.Mutex
	pods     PodSource
	podQueue workqueue.RateLimitingInterface
}

// New builds a Server.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Kinds == nil || opts.Admitter == nil {
		return nil, fmt.Errorf("apiserver: Store, Kinds and Admitter are required")
	}
	if opts.MaxBuildSourceBytes <= 0 {
		opts.MaxBuildSourceBytes = DefaultMaxBuildSourceBytes
	}
	if opts.MaxRequestBodyBytes == 0 {
		opts.MaxRequestBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		opts: opts, store: opts.Store, kinds: opts.Kinds, log: opts.Logger, limits: opts.Limits.withDefaults(),
		gc: workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), "gc"),
	}
	if opts.Admitter.RuntimeClassExists == nil {
		opts.Admitter.RuntimeClassExists = s.runtimeClassExists
	}
	if err := s.initAuth(); err != nil {
		return nil, err
	}
	s.wireTenants()
	return s, nil
}

// Start makes sure the default namespace exists and starts the garbage
// collector, which runs until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if err := s.ensureNamespace(ctx, metav1.NamespaceDefault); err != nil {
		return err
	}
	if err := s.startAuth(ctx); err != nil {
		return err
	}
	if err := s.ensureIngress(ctx); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		s.gc.ShutDown()
	}()
	s.gc.Add(gcKey) // finish what a previous run left half-done
	go s.runGC(ctx)
	go s.runQuotaStatus(ctx)
	go s.runEventGC(ctx)
	return nil
}

func (s *Server) ensureNamespace(ctx context.Context, name string) error {
	k := s.kinds.Lookup("", "namespaces")
	ns := &corev1.Namespace{}
	ns.Name = name
	_, err := s.createObject(ctx, k, ns, admission.User{Name: "system:knbox"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

type ctxKey int

const userKey ctxKey = 0

func userFrom(ctx context.Context) admission.User {
	u, _ := ctx.Value(userKey).(admission.User)
	return u
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var obs *observed
	if s.opts.Observe != nil {
		// Deferred first, so it runs last: after a panic was answered.
		obs = &observed{ResponseWriter: w}
		w = obs
		start, method, ct := time.Now(), r.Method, r.Header.Get("Content-Type")
		defer func() { s.opts.Observe(s.record(obs, method, ct, time.Since(start))) }()
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, fmt.Errorf("panic: %v", v))
		}
	}()
	r, ok := s.authorize(w, r)
	if !ok {
		return
	}
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz":
		s.serveHealth(w, r)
		return
	}
	release, ok := s.admit(w, r, userFrom(r.Context()))
	if !ok {
		return
	}
	defer release()
	if r.URL.Path == "/metrics" && s.opts.Metrics != nil {
		s.opts.Metrics.ServeHTTP(w, r)
		return
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(p, "/knbox/v1/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		if h, ok := s.opts.Extensions[name]; ok {
			h.ServeHTTP(w, r)
			return
		}
		writeError(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
		return
	}
	if r.Body != nil {
		limit := s.opts.MaxRequestBodyBytes
		if isBuildSource(p) {
			limit = s.opts.MaxBuildSourceBytes
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}

	switch {
	case p == "/version":
		s.serveVersion(w, r)
	case p == "/api":
		s.serveAPIVersions(w, r)
	case p == "/apis":
		s.serveAPIGroups(w, r)
	case p == "/openapi/v2":
		s.serveOpenAPIV2(w, r)
	case p == "/openapi/v3" || strings.HasPrefix(p, "/openapi/v3/"):
		s.serveOpenAPIV3(w, r)
	case strings.HasPrefix(p, "/api/"):
		s.serveGroupPath(w, r, "", strings.Split(strings.TrimPrefix(p, "/api/"), "/"))
	case strings.HasPrefix(p, "/apis/"):
		segs := strings.Split(strings.TrimPrefix(p, "/apis/"), "/")
		if len(segs) == 1 {
			s.serveAPIGroup(w, r, segs[0])
			return
		}
		s.serveGroupPath(w, r, segs[0], segs[1:])
	default:
		writeError(w, apierrors.NewNotFound(metav1.SchemeGroupVersion.WithResource("").GroupResource(), ""))
	}
}

// request is a parsed resource request.
type request struct {
	kind        *Kind
	version     string
	namespace   string
	name        string
	subresource string
	watch       bool
}

// serveGroupPath handles /api/v1/... and /apis/{group}/{version}/...
func (s *Server) serveGroupPath(w http.ResponseWriter, r *http.Request, group string, segs []string) {
	notFound := func() {
		writeError(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
	}
	if len(segs) == 0 || segs[0] == "" {
		notFound()
		return
	}
	version := segs[0]
	segs = segs[1:]
	if len(segs) == 0 {
		s.serveResourceList(w, r, group, version)
		return
	}
	req := request{version: version}
	if segs[0] == "watch" {
		req.watch = true
		segs = segs[1:]
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		if k := s.kinds.Lookup(group, segs[2]); k != nil && k.Namespaced {
			req.namespace = segs[1]
			segs = segs[2:]
		}
	}
	if len(segs) == 0 || len(segs) > 3 {
		notFound()
		return
	}
	req.kind = s.kinds.Lookup(group, segs[0])
	if req.kind == nil || !req.kind.Serves(version) {
		notFound()
		return
	}
	if len(segs) > 1 {
		req.name = segs[1]
	}
	if len(segs) > 2 {
		req.subresource = segs[2]
	}
	if req.name == "" && r.URL.Query().Get("watch") == "true" || req.name == "" && r.URL.Query().Get("watch") == "1" {
		req.watch = true
	}
	if !sameRequest(r, req) || !verbMatches(r, req) {
		writeError(w, apierrors.NewBadRequest("the request's path and query are ambiguous: they read as another request than the one that was authorized"))
		return
	}
	if req.kind.Virtual {
		if err := s.serveReview(w, r, req); err != nil {
			writeError(w, err)
		}
		return
	}
	if req.kind.ReadOnly && r.Method != http.MethodGet {
		verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
		if verb == "" {
			verb = strings.ToLower(r.Method)
		}
		writeError(w, apierrors.NewMethodNotSupported(req.kind.GroupResource(), verb))
		return
	}
	if req.subresource != "" {
		switch {
		case req.subresource == "token" && req.kind.Group == "" && req.kind.Resource == "serviceaccounts" && req.name != "":
			if err := s.handleTokenRequest(w, r, req); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "status" && req.kind.HasStatus:
		case req.subresource == "exec" && req.kind.Mirror && s.opts.Exec != nil && (r.Method == http.MethodGet || r.Method == http.MethodPost):
			if err := s.handlePodExec(w, r, req); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "portforward" && req.kind.Mirror && s.opts.PortForward != nil && (r.Method == http.MethodGet || r.Method == http.MethodPost):
			if err := s.handlePodPortForward(w, r, req); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "log" && req.kind.Mirror && req.kind.Kind == "Pod" && s.opts.PodLogs != nil && r.Method == http.MethodGet:
			if err := s.handlePodLog(w, r, req); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "log" && req.kind.Kind == "Revision" && req.kind.Group == "serving.knative.dev" && s.opts.Logs != nil && r.Method == http.MethodGet:
			if err := s.handleLog(w, r, req, s.opts.Logs); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "source" && req.kind.Kind == "Build" && req.kind.Group == "build.knative.dev" && s.opts.BuildSource != nil && r.Method == http.MethodPut:
			if err := s.handleBuildSource(w, r, req); err != nil {
				writeError(w, err)
			}
			return
		case req.subresource == "log" && req.kind.Kind == "Build" && req.kind.Group == "build.knative.dev" && s.opts.BuildLogs != nil && r.Method == http.MethodGet:
			if err := s.handleLog(w, r, req, s.opts.BuildLogs); err != nil {
				writeError(w, err)
			}
			return
		default:
			notFound()
			return
		}
	}
	if req.kind.Mirror && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch) {
		// Pods are the instances' mirror: they change with the instances.
		verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch"}[r.Method]
		writeError(w, apierrors.NewMethodNotSupported(req.kind.GroupResource(), verb))
		return
	}
	if req.kind.Namespaced && req.namespace == "" && (req.name != "" || r.Method == http.MethodPost) {
		notFound()
		return
	}

	var err error
	switch r.Method {
	case http.MethodGet:
		switch {
		case req.watch:
			err = s.handleWatch(w, r, req)
		case req.name == "":
			err = s.handleList(w, r, req)
		default:
			err = s.handleGet(w, r, req)
		}
	case http.MethodPost:
		if req.name != "" {
			err = apierrors.NewMethodNotSupported(req.kind.GroupResource(), "create with a name in the path")
			break
		}
		err = s.handleCreate(w, r, req)
	case http.MethodPut:
		if req.name == "" {
			err = apierrors.NewMethodNotSupported(req.kind.GroupResource(), "update of a collection")
			break
		}
		err = s.handleUpdate(w, r, req)
	case http.MethodPatch:
		if req.name == "" {
			err = apierrors.NewMethodNotSupported(req.kind.GroupResource(), "patch of a collection")
			break
		}
		err = s.handlePatch(w, r, req)
	case http.MethodDelete:
		if req.subresource != "" {
			err = apierrors.NewMethodNotSupported(req.kind.GroupResource(), "delete of a subresource")
			break
		}
		if req.name == "" {
			err = s.handleDeleteCollection(w, r, req)
			break
		}
		err = s.handleDelete(w, r, req)
	default:
		err = apierrors.NewMethodNotSupported(req.kind.GroupResource(), r.Method)
	}
	if err != nil {
		if st := statusOf(err); st.Code == http.StatusInternalServerError {
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeError(w, err)
	}
}

// writeWarnings adds Kubernetes-style Warning headers.
func writeWarnings(w http.ResponseWriter, warns []string) {
	for _, m := range warns {
		b, _ := json.Marshal(m)
		w.Header().Add("Warning", "299 - "+string(b))
	}
}

// handleLog streams a revision's logs as text, following them with
// ?follow=true, from ?sinceSeconds=N or ?sinceTime=RFC3339 on.
func (s *Server) handleLog(w http.ResponseWriter, r *http.Request, req request,
	logs func(ctx context.Context, w io.Writer, namespace, name string, opts LogOptions) error) error {
	if _, _, err := s.getStored(req.kind, req.namespace, req.name); err != nil {
		return err
	}
	q := r.URL.Query()
	var opts LogOptions
	opts.Follow = q.Get("follow") == "true"
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("sinceSeconds: invalid value %q", v))
		}
		opts.Since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("sinceTime: invalid value %q: want RFC 3339", v))
		}
		opts.Since = t
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fw := flushWriter{w: w}
	if f, ok := w.(http.Flusher); ok {
		fw.f = f
		f.Flush()
	}
	if err := logs(r.Context(), fw, req.namespace, req.name, opts); err != nil && r.Context().Err() == nil {
		s.log.Warn("streaming logs", "namespace", req.namespace, "kind", req.kind.Kind, "name", req.name, "err", err)
	}
	return nil
}

// DefaultMaxBuildSourceBytes bounds a Build's source upload when
// Options.MaxBuildSourceBytes does not.
const DefaultMaxBuildSourceBytes = 256 << 20

// isBuildSource tells whether a path is a Build's source subresource,
// whose body has a bound of its own.
func isBuildSource(p string) bool {
	return strings.HasPrefix(p, "/apis/build.knative.dev/") && strings.HasSuffix(p, "/source")
}

// handleBuildSource takes a Build's source archive (builds/NAME/source).
func (s *Server) handleBuildSource(w http.ResponseWriter, r *http.Request, req request) error {
	obj, _, err := s.getStored(req.kind, req.namespace, req.name)
	if err != nil {
		return err
	}
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the source archive is larger than %d bytes (builds.maxUploadBytes)", s.opts.MaxBuildSourceBytes))
	if r.ContentLength > s.opts.MaxBuildSourceBytes {
		return tooLarge
	}
	if err := s.opts.BuildSource(r.Context(), obj, r.Body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge
		}
		if _, ok := err.(apierrors.APIStatus); !ok {
			s.log.Warn("storing a build's source", "namespace", req.namespace, "build", req.name, "err", err)
			return apierrors.NewInternalError(errors.New("the source archive could not be stored"))
		}
		return err
	}
	writeObject(w, http.StatusOK, output{}, &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusSuccess,
		Message:  fmt.Sprintf("the source of Build %q is uploaded", req.name),
	})
	return nil
}

// flushWriter flushes after every write, so followed logs arrive at once.
type flushWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}
