package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// Every request passes authenticate, then authorize, before any handler
// runs: resource requests (every verb, subresource and namespace, including
// subresources no handler serves yet, such as pods/exec) and non-resource
// URLs alike. The request's attributes come from k8s.io/apiserver's
// RequestInfoFactory, as in kube-apiserver, and the handler that serves a
// resource request must act on the same attributes (sameRequest), so what
// was authorized is what is done.

// anonymousPaths may be asked without credentials, as system:anonymous in
// group system:unauthenticated (RBAC still decides: the default policy
// grants them through system:public-info-viewer). Every other request
// without a token gets 401, as kube-apiserver with anonymous requests
// limited to these endpoints (AnonymousAuthConfigurableEndpoints).
var anonymousPaths = sets.New("/healthz", "/livez", "/readyz", "/version", "/version/")

var requestInfoFactory = &genericrequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

type authKey int

const (
	userInfoKey authKey = iota
	requestInfoKey
)

// userInfoFrom returns the authenticated user of a request's context, nil
// for the server's own calls.
func userInfoFrom(ctx context.Context) user.Info {
	u, _ := ctx.Value(userInfoKey).(user.Info)
	return u
}

func requestInfoFrom(ctx context.Context) *genericrequest.RequestInfo {
	ri, _ := ctx.Value(requestInfoKey).(*genericrequest.RequestInfo)
	return ri
}

// toAdmissionUser is the user as admission (and Knative's creator
// annotations) sees it.
func toAdmissionUser(u user.Info) admission.User {
	if u == nil {
		return admission.User{}
	}
	return admission.User{Name: u.GetName(), UID: u.GetUID(), Groups: slices.Clone(u.GetGroups())}
}

// authenticate returns the user of r, or false after writing 401.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (user.Info, bool) {
	header := r.Header.Get("Authorization")
	if s.opts.Authenticate == nil {
		// Tests only: everyone is the administrator.
		return &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}, true
	}
	if header == "" && anonymousPaths.Has(r.URL.Path) {
		return &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, true
	}
	u, ok := s.userOf(header)
	if !ok {
		writeError(w, apierrors.NewUnauthorized("Unauthorized"))
		return nil, false
	}
	return u, true
}

// userOf returns the user an Authorization header names: a token of the
// token file (or the admin's) or a ServiceAccount token.
func (s *Server) userOf(header string) (user.Info, bool) {
	var u user.Info
	if au, ok := s.opts.Authenticate(header); ok {
		u = &user.DefaultInfo{Name: au.Name, UID: au.UID, Groups: au.Groups}
	} else if scheme, token, _ := strings.Cut(strings.TrimSpace(header), " "); strings.EqualFold(scheme, "bearer") && serviceaccount.LooksLikeJWT(strings.TrimSpace(token)) {
		su, err := s.saAuth.Authenticate(strings.TrimSpace(token))
		if err != nil {
			s.log.Debug("service account token refused", "err", err)
		} else {
			u = su
		}
	}
	if u == nil || u.GetName() == "" {
		return nil, false
	}
	if !slices.Contains(u.GetGroups(), user.AllAuthenticated) {
		u = &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: append(slices.Clone(u.GetGroups()), user.AllAuthenticated), Extra: u.GetExtra()}
	}
	return u, true
}

// AuthenticateToken returns the user a bearer token names, as the API
// authenticates it, for knbox's endpoints outside the API (the embedded
// registry). With no Authenticate option (tests), every token is the
// administrator's.
func (s *Server) AuthenticateToken(token string) (user.Info, bool) {
	if s.opts.Authenticate == nil {
		return &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}, true
	}
	return s.userOf("Bearer " + token)
}

// Authorize decides a request as the API's authorizer does (RBAC), for
// knbox's endpoints outside the API (the embedded registry).
func (s *Server) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	return s.authz.Authorize(ctx, attrs)
}

// infoView is r as RequestInfoFactory needs to see it: of the query, only
// watch and fieldSelector decide the verb and name, and the other
// parameters are left out so that a malformed one (a bad labelSelector, say)
// does not make the factory log; the handlers refuse it.
func infoView(r *http.Request) *http.Request {
	q := r.URL.Query()
	keep := url.Values{}
	for _, k := range []string{"watch", "fieldSelector"} {
		if v, ok := q[k]; ok {
			keep[k] = v
		}
	}
	if fs := keep.Get("fieldSelector"); fs != "" {
		if _, err := fields.ParseSelector(fs); err != nil {
			keep.Del("fieldSelector") // the handlers refuse it
		}
	}
	u := *r.URL
	u.RawQuery = keep.Encode()
	c := *r
	c.URL = &u
	return &c
}

// attributes describes a request for the authorizer.
func attributes(u user.Info, ri *genericrequest.RequestInfo) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: ri.Verb, Namespace: ri.Namespace, APIGroup: ri.APIGroup, APIVersion: ri.APIVersion,
		Resource: ri.Resource, Subresource: ri.Subresource, Name: ri.Name, ResourceRequest: ri.IsResourceRequest, Path: ri.Path,
	}
}

// authorize returns r with the user and its request info in its context,
// or false after writing 401, 403 or 400.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	u, ok := s.authenticate(w, r)
	if !ok {
		return nil, false
	}
	if hasDotSegment(r.URL.Path) {
		writeError(w, apierrors.NewBadRequest(fmt.Sprintf("the path %q has a . or .. segment", r.URL.Path)))
		return nil, false
	}
	ri, err := requestInfoFactory.NewRequestInfo(infoView(r))
	if err != nil {
		writeError(w, apierrors.NewBadRequest(fmt.Sprintf("the path %q names no resource: %v", r.URL.Path, err)))
		return nil, false
	}
	if o, ok := w.(*observed); ok {
		o.info = ri // refused requests count by their attributes too
	}
	attrs := attributes(u, ri)
	d, reason, err := s.authz.Authorize(r.Context(), attrs)
	if err != nil {
		s.log.Error("authorizing a request failed", "path", r.URL.Path, "err", err)
	}
	if d != authorizer.DecisionAllow {
		writeError(w, forbidden(attrs, reason))
		return nil, false
	}
	ctx := context.WithValue(r.Context(), userInfoKey, u)
	ctx = context.WithValue(ctx, userKey, toAdmissionUser(u))
	ctx = context.WithValue(ctx, requestInfoKey, ri)
	return r.WithContext(ctx), true
}

// forbidden is kube-apiserver's 403: `secrets is forbidden: User "alice"
// cannot list resource "secrets" in API group "" in the namespace
// "team-b"`, with the authorizer's reason appended when it has one.
func forbidden(attrs authorizer.Attributes, reason string) error {
	msg := authz.ForbiddenMessage(attrs)
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{Group: attrs.GetAPIGroup(), Resource: attrs.GetResource()}
	return apierrors.NewForbidden(gr, attrs.GetName(), errors.New(msg))
}

// sameRequest reports whether the request the resource handlers parsed is
// the one that was authorized: same group, resource, subresource,
// namespace, name and verb. It holds by construction today; it is checked
// so that a change to either parser cannot silently serve what was not
// authorized.
func sameRequest(r *http.Request, req request) bool {
	ri := requestInfoFrom(r.Context())
	if ri == nil {
		return true // the server's own calls
	}
	k := req.kind
	if !ri.IsResourceRequest || ri.APIGroup != k.Group || ri.Resource != k.Resource || ri.Subresource != req.subresource {
		return false
	}
	ns := req.namespace
	if k.Group == "" && k.Resource == "namespaces" {
		ns = req.name // kube-apiserver authorizes a namespace in itself
	}
	if ri.Namespace != ns {
		return false
	}
	if req.name == "" && ri.Name != "" {
		// A list or watch limited by fieldSelector=metadata.name=X is
		// authorized for X; the handlers apply the same selector.
		sel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
		if err != nil {
			return false
		}
		name, ok := sel.RequiresExactMatch("metadata.name")
		return ok && name == ri.Name
	}
	return ri.Name == req.name
}

// hasDotSegment reports whether a path has a "." or ".." segment, which
// would make what the authorizer and the handlers read of it differ.
func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// verbMatches reports whether the handler about to run does what the
// authorized verb names.
func verbMatches(r *http.Request, req request) bool {
	ri := requestInfoFrom(r.Context())
	if ri == nil {
		return true
	}
	want := ""
	switch r.Method {
	case http.MethodGet:
		switch {
		case req.watch:
			want = "watch"
		case req.name == "":
			want = "list"
		default:
			want = "get"
		}
	case http.MethodPost:
		want = "create"
	case http.MethodPut:
		want = "update"
	case http.MethodPatch:
		want = "patch"
	case http.MethodDelete:
		want = "delete"
		if req.name == "" {
			want = "deletecollection"
		}
	default:
		return true // refused by the handlers
	}
	return ri.Verb == want
}

// initAuth builds the authorizer over the store and the ServiceAccount
// token signer and authenticator.
func (s *Server) initAuth() error {
	s.rbac = newRBACSource(s.store, s.kinds)
	if s.rbac.roles == nil || s.rbac.clusterRoles == nil || s.rbac.rbs == nil || s.rbac.crbs == nil || s.rbac.sas == nil || s.rbac.ns == nil {
		return errors.New("apiserver: Kinds must include the RBAC kinds, ServiceAccount and Namespace")
	}
	s.authz = authz.New(s.rbac)
	s.tokens = s.opts.ServiceAccountTokens
	if s.tokens == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("apiserver: service account key: %w", err)
		}
		if s.tokens, err = serviceaccount.NewSigner(key, "", nil); err != nil {
			return err
		}
	}
	s.saAuth = serviceaccount.NewAuthenticator(s.tokens, saLookup{s})
	if s.opts.Admitter.ServiceAccountExists == nil {
		s.opts.Admitter.ServiceAccountExists = func(_ context.Context, namespace, name string) (bool, error) {
			_, err := s.rbac.serviceAccount(namespace, name)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		}
	}
	return nil
}

// startAuth puts the default policy in place, aggregates it and makes the
// default ServiceAccounts before the server serves, then keeps them so.
func (s *Server) startAuth(ctx context.Context) error {
	if err := s.ensurePolicy(ctx); err != nil {
		return err
	}
	if err := s.aggregate(ctx); err != nil {
		return err
	}
	if err := s.ensureServiceAccounts(ctx); err != nil {
		return err
	}
	if err := s.publishRootCA(ctx); err != nil {
		return err
	}
	go s.runAuthControllers(ctx)
	return nil
}

// checkRBACWrite runs the escalation check on a client's write of a role or
// binding (old is nil on create; name is the name in the request's path).
// The server's own writes (no user in ctx) are not checked.
func (s *Server) checkRBACWrite(ctx context.Context, k *Kind, obj, old runtime.Object, name string) error {
	if k.Group != rbacv1.GroupName {
		return nil
	}
	u := userInfoFrom(ctx)
	if u == nil {
		return nil
	}
	return s.authz.CheckWrite(ctx, authz.Write{User: u, Object: obj, Old: old, Name: name})
}
