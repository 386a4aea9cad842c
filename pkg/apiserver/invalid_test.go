package apiserver

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestInvalidMatchesUpstream: invalid gives apierrors.NewInvalid's status
// and text, and stays linear for many errors.
func TestInvalidMatchesUpstream(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	for _, errs := range []field.ErrorList{
		{field.Invalid(field.NewPath("data").Key("a b"), "a b", "bad key")},
		{field.Required(field.NewPath("spec", "x"), "needed"), field.Invalid(field.NewPath("y"), 3, "too big"), field.Required(field.NewPath("spec", "x"), "needed")},
	} {
		got := invalid(gk, "c", errs).(*apierrors.StatusError).ErrStatus
		want := apierrors.NewInvalid(gk, "c", errs).ErrStatus
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("invalid:\n%v\nNewInvalid:\n%v", got, want)
		}
	}
	var many field.ErrorList
	for i := 0; i < 60000; i++ {
		many = append(many, field.Invalid(field.NewPath("data").Key(fmt.Sprintf("bad key %d", i)), "", "a valid config key must consist of alphanumeric characters"))
	}
	err := invalid(gk, "c", many)
	if st := err.(*apierrors.StatusError).ErrStatus; len(st.Details.Causes) != len(many) || !strings.HasSuffix(st.Message, "]") {
		t.Errorf("%d causes, message ends %q", len(st.Details.Causes), st.Message[len(st.Message)-20:])
	}
}
