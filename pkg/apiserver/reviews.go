package apiserver

import (
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// serveReview answers the virtual kinds: SelfSubjectAccessReview
// (kubectl auth can-i), SelfSubjectRulesReview (kubectl auth can-i --list),
// SubjectAccessReview and LocalSubjectAccessReview (may someone else?), and
// SelfSubjectReview (kubectl auth whoami). Each is created and answered,
// never stored.
func (s *Server) serveReview(w http.ResponseWriter, r *http.Request, req request) error {
	if r.Method != http.MethodPost || req.name != "" || req.subresource != "" {
		return apierrors.NewMethodNotSupported(req.kind.GroupResource(), r.Method+" (only create)")
	}
	if req.kind.Namespaced && req.namespace == "" {
		return newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
	}
	out, _, body, err := readWrite(r)
	if err != nil {
		return err
	}
	k := req.kind
	tm, err := typeMeta(body)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the request body is not a JSON object: %v", err))
	}
	if gv := k.GroupVersion().String(); (tm.APIVersion != "" && tm.APIVersion != gv) || (tm.Kind != "" && tm.Kind != k.Kind) {
		return apierrors.NewBadRequest(fmt.Sprintf("the body is a %s %s, want a %s %s", tm.APIVersion, tm.Kind, gv, k.Kind))
	}
	obj := k.New()
	unknown, err := decodeStrict(body, obj)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("%s cannot be decoded: %v", k.Kind, err))
	}
	if len(unknown) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("%s cannot be handled: strict decoding error: %s", k.Kind, joinMsgs(unknown)))
	}
	requester := userInfoFrom(r.Context())
	if requester == nil {
		requester = &user.DefaultInfo{}
	}
	spec := field.NewPath("spec")
	switch o := obj.(type) {
	case *authorizationv1.SelfSubjectAccessReview:
		if errs := validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, spec); len(errs) > 0 {
			return invalid(k.GroupKind(), "", errs)
		}
		o.Status = s.accessReview(r, requester, o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
	case *authorizationv1.SubjectAccessReview:
		errs := validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, spec)
		if o.Spec.User == "" && len(o.Spec.Groups) == 0 {
			errs = append(errs, field.Invalid(spec.Child("user"), o.Spec.User, "at least one of user or group must be specified"))
		}
		if len(errs) > 0 {
			return invalid(k.GroupKind(), "", errs)
		}
		o.Status = s.accessReview(r, subjectOf(o.Spec), o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes)
	case *authorizationv1.LocalSubjectAccessReview:
		errs := validateAccessSpec(o.Spec.ResourceAttributes, o.Spec.NonResourceAttributes, spec)
		if o.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(spec.Child("nonResourceAttributes"), o.Spec.NonResourceAttributes, "disallowed on this kind of request"))
		}
		if o.Spec.User == "" && len(o.Spec.Groups) == 0 {
			errs = append(errs, field.Invalid(spec.Child("user"), o.Spec.User, "at least one of user or group must be specified"))
		}
		if ra := o.Spec.ResourceAttributes; ra != nil && ra.Namespace != req.namespace {
			errs = append(errs, field.Invalid(spec.Child("resourceAttributes", "namespace"), ra.Namespace, "must match the namespace of the request ("+req.namespace+")"))
		}
		if o.Namespace != "" && o.Namespace != req.namespace {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), o.Namespace, "must match the namespace of the request"))
		}
		if len(errs) > 0 {
			return invalid(k.GroupKind(), "", errs)
		}
		o.Namespace = req.namespace
		o.Status = s.accessReview(r, subjectOf(o.Spec), o.Spec.ResourceAttributes, nil)
	case *authorizationv1.SelfSubjectRulesReview:
		res, nonRes, incomplete, err := s.authz.RulesFor(requester, o.Spec.Namespace)
		o.Status = authorizationv1.SubjectRulesReviewStatus{
			ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}, Incomplete: incomplete,
		}
		for _, rr := range res {
			o.Status.ResourceRules = append(o.Status.ResourceRules, authorizationv1.ResourceRule{
				Verbs: rr.GetVerbs(), APIGroups: rr.GetAPIGroups(), Resources: rr.GetResources(), ResourceNames: rr.GetResourceNames()})
		}
		for _, nr := range nonRes {
			o.Status.NonResourceRules = append(o.Status.NonResourceRules, authorizationv1.NonResourceRule{Verbs: nr.GetVerbs(), NonResourceURLs: nr.GetNonResourceURLs()})
		}
		if err != nil {
			o.Status.EvaluationError = err.Error()
		}
	case *authenticationv1.SelfSubjectReview:
		o.Status.UserInfo = authenticationv1.UserInfo{Username: requester.GetName(), UID: requester.GetUID(), Groups: requester.GetGroups()}
		if extra := requester.GetExtra(); len(extra) > 0 {
			o.Status.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
			for key, v := range extra {
				o.Status.UserInfo.Extra[key] = v
			}
		}
	default:
		return apierrors.NewMethodNotSupported(k.GroupResource(), "create")
	}
	obj.GetObjectKind().SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind))
	writeObject(w, http.StatusCreated, out, obj)
	return nil
}

func validateAccessSpec(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, spec *field.Path) field.ErrorList {
	switch {
	case ra != nil && nra != nil:
		return field.ErrorList{field.Invalid(spec.Child("nonResourceAttributes"), nra, "cannot be specified in combination with resourceAttributes")}
	case ra == nil && nra == nil:
		return field.ErrorList{field.Invalid(spec.Child("resourceAttributes"), nra, "exactly one of nonResourceAttributes or resourceAttributes must be specified")}
	}
	return nil
}

func subjectOf(s authorizationv1.SubjectAccessReviewSpec) user.Info {
	u := &user.DefaultInfo{Name: s.User, UID: s.UID, Groups: s.Groups}
	if len(s.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range s.Extra {
			u.Extra[k] = v
		}
	}
	return u
}

// accessReview asks the authorizer about u, as if u made the request the
// attributes describe.
func (s *Server) accessReview(r *http.Request, u user.Info, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	var attrs authorizer.AttributesRecord
	if ra != nil {
		version := ra.Version
		if version == "" {
			version = "*"
		}
		attrs = authorizer.AttributesRecord{User: u, Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: version,
			Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name, ResourceRequest: true}
	} else {
		attrs = authorizer.AttributesRecord{User: u, Verb: nra.Verb, Path: nra.Path}
	}
	d, reason, err := s.authz.Authorize(r.Context(), attrs)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: d == authorizer.DecisionAllow, Denied: d == authorizer.DecisionDeny, Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}
