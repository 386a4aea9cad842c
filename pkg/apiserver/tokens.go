package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/knbox/knbox/pkg/serviceaccount"
)

var tokenRequestKind = schema.GroupKind{Group: authenticationv1.SchemeGroupVersion.Group, Kind: "TokenRequest"}

// handleTokenRequest serves POST .../serviceaccounts/NAME/token: the
// TokenRequest API, which kubectl create token and the runtime's projected
// volumes use.
func (s *Server) handleTokenRequest(w http.ResponseWriter, r *http.Request, req request) error {
	if r.Method != http.MethodPost {
		return apierrors.NewMethodNotSupported(req.kind.GroupResource(), r.Method)
	}
	out, dryRun, body, err := readWrite(r)
	if err != nil {
		return err
	}
	tm, err := typeMeta(body)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the request body is not a JSON object: %v", err))
	}
	if (tm.APIVersion != "" && tm.APIVersion != authenticationv1.SchemeGroupVersion.String()) || (tm.Kind != "" && tm.Kind != "TokenRequest") {
		return apierrors.NewBadRequest(fmt.Sprintf("the body is a %s %s, want an authentication.k8s.io/v1 TokenRequest", tm.APIVersion, tm.Kind))
	}
	var tr authenticationv1.TokenRequest
	if unknown, err := decodeStrict(body, &tr); err != nil || len(unknown) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("TokenRequest cannot be decoded: %v%s", err, joinMsgs(unknown)))
	}
	if tr.Name != "" && tr.Name != req.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the TokenRequest (%s) does not match the service account in the URL (%s)", tr.Name, req.name))
	}
	var bound *serviceaccount.BoundObject
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		bound = &serviceaccount.BoundObject{Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)}
		if ref.APIVersion != "" && ref.APIVersion != "v1" {
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s, %s", ref.APIVersion, ref.Kind))
		}
	}
	if dryRun {
		return apierrors.NewBadRequest("dryRun is not supported for TokenRequest")
	}
	token, exp, issued, err := s.issue(req.namespace, req.name, tr.Spec.Audiences, tr.Spec.ExpirationSeconds, bound)
	if err != nil {
		return err
	}
	tr.APIVersion, tr.Kind = authenticationv1.SchemeGroupVersion.String(), "TokenRequest"
	tr.Name, tr.Namespace = req.name, req.namespace
	tr.CreationTimestamp = metav1.NewTime(issued)
	tr.Spec.Audiences = effectiveAudiences(tr.Spec.Audiences, s.tokens.APIAudiences())
	secs := int64(exp.Sub(issued) / time.Second)
	tr.Spec.ExpirationSeconds = &secs
	tr.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(exp)}
	writeObject(w, http.StatusCreated, out, &tr)
	return nil
}

func effectiveAudiences(asked, api []string) []string {
	if len(asked) == 0 {
		return api
	}
	return asked
}

// maxTokenExpiration is the configured cap on token lifetimes.
func (s *Server) maxTokenExpiration() time.Duration {
	if s.opts.MaxTokenExpiration > 0 {
		return s.opts.MaxTokenExpiration
	}
	return serviceaccount.DefaultMaxTokenExpiration
}

// issue signs a token for an existing ServiceAccount, with kube-apiserver's
// rules: audiences default to the API's, the lifetime to an hour, at least
// ten minutes, at most 2^32 s, capped at the configured maximum; a bound
// object must exist (with the UID given, if any).
func (s *Server) issue(namespace, name string, audiences []string, expirationSeconds *int64, bound *serviceaccount.BoundObject) (token string, exp, issued time.Time, err error) {
	secs := serviceaccount.DefaultExpirationSeconds
	if expirationSeconds != nil {
		secs = *expirationSeconds
	}
	spec := field.NewPath("spec")
	switch {
	case secs < serviceaccount.MinExpirationSeconds:
		return "", exp, issued, apierrors.NewInvalid(tokenRequestKind, name, field.ErrorList{field.Invalid(spec.Child("expirationSeconds"), secs, "may not specify a duration less than 10 minutes")})
	case secs > serviceaccount.MaxExpirationSeconds:
		return "", exp, issued, apierrors.NewInvalid(tokenRequestKind, name, field.ErrorList{field.Invalid(spec.Child("expirationSeconds"), secs, "may not specify a duration larger than 2^32 seconds")})
	}
	lifetime := time.Duration(secs) * time.Second
	if max := s.maxTokenExpiration(); lifetime > max {
		lifetime = max
	}
	for i, a := range audiences {
		if a == "" {
			return "", exp, issued, apierrors.NewInvalid(tokenRequestKind, name, field.ErrorList{field.Required(spec.Child("audiences").Index(i), "an audience must not be empty")})
		}
	}
	if len(audiences) == 0 {
		audiences = s.tokens.APIAudiences()
	}
	sa, err := s.rbac.serviceAccount(namespace, name)
	if err != nil {
		return "", exp, issued, err
	}
	if bound != nil {
		uid, err := s.objectUID(bound.Kind, namespace, bound.Name)
		if err != nil {
			return "", exp, issued, err
		}
		if bound.UID != "" && bound.UID != uid {
			return "", exp, issued, apierrors.NewConflict(schema.GroupResource{Resource: bound.Kind}, bound.Name,
				fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record (%s): the object might have been deleted and then recreated", bound.UID, uid))
		}
		bound.UID = uid
	}
	issued = time.Now().Truncate(time.Second)
	exp = issued.Add(lifetime)
	token, err = s.tokens.Sign(serviceaccount.Claims{Namespace: namespace, ServiceAccount: name, ServiceAccountUID: string(sa.UID),
		Audiences: audiences, IssuedAt: issued, Expiry: exp, Bound: bound})
	if errors.Is(err, serviceaccount.ErrTooLarge) {
		return "", exp, issued, apierrors.NewInvalid(tokenRequestKind, name, field.ErrorList{field.Invalid(spec.Child("audiences"), len(audiences), err.Error())})
	}
	return token, exp, issued, err
}

// Issue implements serviceaccount.TokenIssuer for knbox's runtime: the
// token a projected serviceAccountToken volume holds.
func (s *Server) Issue(_ context.Context, namespace, name string, audiences []string, expirationSeconds int64, bound *serviceaccount.BoundObject) (string, time.Time, error) {
	var secs *int64
	if expirationSeconds != 0 {
		secs = &expirationSeconds
	}
	var b *serviceaccount.BoundObject
	if bound != nil {
		c := *bound
		b = &c
	}
	token, exp, _, err := s.issue(namespace, name, audiences, secs, b)
	return token, exp, err
}

// objectUID is the UID of an object a token may be bound to.
func (s *Server) objectUID(kind, namespace, name string) (string, error) {
	switch kind {
	case "Secret":
		o, _, err := s.getStored(s.kinds.Lookup("", "secrets"), namespace, name)
		if err != nil {
			return "", err
		}
		return string(o.(*corev1.Secret).UID), nil
	case "Pod":
		if s.opts.PodUID != nil {
			uid, err := s.opts.PodUID(namespace, name)
			return string(uid), err
		}
		// The Pods the API serves (RunPods).
		o, _, err := s.getStored(s.kinds.Lookup("", "pods"), namespace, name)
		if err != nil {
			return "", err
		}
		if o.(*corev1.Pod).DeletionTimestamp != nil {
			return "", fmt.Errorf("pod %s/%s is being deleted", namespace, name)
		}
		return string(o.(*corev1.Pod).UID), nil
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", kind))
}

// saLookup answers the token authenticator from the store.
type saLookup struct{ s *Server }

func (l saLookup) ServiceAccountUID(namespace, name string) (string, error) {
	sa, err := l.s.rbac.serviceAccount(namespace, name)
	if err != nil {
		return "", err
	}
	if sa.DeletionTimestamp != nil {
		return "", fmt.Errorf("service account %s/%s is being deleted", namespace, name)
	}
	return string(sa.UID), nil
}

func (l saLookup) ObjectUID(kind, namespace, name string) (string, error) {
	return l.s.objectUID(kind, namespace, name)
}

var (
	_ serviceaccount.TokenIssuer = (*Server)(nil)
	_ serviceaccount.Lookup      = saLookup{}
)
