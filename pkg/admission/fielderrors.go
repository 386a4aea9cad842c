package admission

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"knative.dev/pkg/apis"
)

// FieldErrors turns Knative's FieldError (its error level; warnings are
// left out) into Kubernetes field errors, one per path, so a refusal reads
// as it does on a cluster. rewrite maps each path (nil: unchanged).
func FieldErrors(fe *apis.FieldError, rewrite func(string) string) field.ErrorList {
	if fe == nil {
		return nil
	}
	var out field.ErrorList
	for _, e := range fe.Filter(apis.ErrorLevel).WrappedErrors() {
		msg := e.Message
		if e.Details != "" {
			msg += ": " + e.Details
		}
		paths := e.Paths
		if len(paths) == 0 {
			paths = []string{""}
		}
		for _, p := range paths {
			if rewrite != nil {
				p = rewrite(p)
			}
			var path *field.Path
			if p != "" {
				path = field.NewPath(p)
			}
			switch {
			case strings.HasPrefix(e.Message, "missing field"):
				out = append(out, field.Required(path, msg))
			case strings.HasPrefix(e.Message, "must not set"), strings.HasPrefix(e.Message, "must not update"):
				out = append(out, field.Forbidden(path, msg))
			default:
				out = append(out, field.Invalid(path, field.OmitValueType{}, msg))
			}
		}
	}
	return out
}

// Warnings returns the warning-level messages of a FieldError.
func Warnings(fe *apis.FieldError) []string {
	if fe == nil {
		return nil
	}
	var out []string
	for _, e := range fe.Filter(apis.WarningLevel).WrappedErrors() {
		out = append(out, e.Error())
	}
	return out
}
