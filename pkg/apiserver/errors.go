package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// statusError is the one error type handlers return; it becomes the
// metav1.Status the client reads.
func statusOf(err error) *metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st := se.Status()
		return &st
	}
	if st := storageStatus(err); st != nil {
		return st
	}
	// Anything else is a bug or an I/O failure of the store: say so without
	// leaking internals, and keep the detail in the server log.
	st := apierrors.NewInternalError(errors.New("the server could not complete the request; see the knbox log")).Status()
	return &st
}

func newStatus(code int, reason metav1.StatusReason, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	}}
}

func errUnsupportedMediaType(ct string) error {
	return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json (got %q)", ct))
}

func errNotAcceptable(accept string) error {
	return newStatus(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
		fmt.Sprintf("only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (got %q)", accept))
}

// invalid builds the 422 that kubectl prints for a cluster from field
// errors, with one cause per field: apierrors.NewInvalid's status and text,
// built in linear time (NewInvalid joins the messages by repeated string
// concatenation, which took minutes for an object with 60,000 bad keys).
func invalid(gk schema.GroupKind, name string, errs field.ErrorList) error {
	causes := make([]metav1.StatusCause, 0, len(errs))
	var msg strings.Builder
	seen := make(map[string]bool, len(errs))
	for _, e := range errs {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Message: e.ErrorBody(), Field: e.Field})
		m := e.Error()
		if seen[m] {
			continue
		}
		if len(seen) > 0 {
			msg.WriteString(", ")
		}
		seen[m] = true
		msg.WriteString(m)
	}
	text := msg.String()
	if len(seen) > 1 {
		text = "[" + text + "]"
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Details: &metav1.StatusDetails{Group: gk.Group, Kind: gk.Kind, Name: name, Causes: causes},
		Message: fmt.Sprintf("%s %q is invalid: %s", gk.String(), name, text),
	}}
}
