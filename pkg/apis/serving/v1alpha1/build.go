package v1alpha1

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// The seed API's builds, on the v1 objects (see the package
// documentation, "Builds"). Unlike the other v1alpha1- annotations these
// are also what a v1 client writes to say the same: Knative's v1 has no
// build, and the annotations keep a v1 Service valid for Knative.
const (
	// BuildAnnotation on a v1 template (and so on each Revision stamped
	// from it) holds, as JSON, the Build each new Revision gets: a
	// build.knative.dev/v1alpha1 Build whose metadata keeps labels and
	// annotations only. The Revision controller creates it, named after the
	// Revision and owned by it.
	BuildAnnotation = "serving.knbox.dev/v1alpha1-build"
	// BuildRefAnnotation on a v1 Revision (or template) names, as JSON of
	// a corev1.ObjectReference, an existing Build the Revision waits for.
	BuildRefAnnotation = "serving.knbox.dev/v1alpha1-build-ref"
	// BuildNameAnnotation is the deprecated buildName: the name of a
	// Build of the Revision's namespace.
	BuildNameAnnotation = "serving.knbox.dev/v1alpha1-build-name"
)

// RevisionConditionBuildSucceeded is the condition of a Revision that
// waits for a Build: Unknown while it runs, then the Build's Succeeded.
const RevisionConditionBuildSucceeded apis.ConditionType = "BuildSucceeded"

var buildKind = buildv1alpha1.SchemeGroupVersion.WithKind("Build")

// ParseBuild reads a Configuration's build: a build.knative.dev/v1alpha1
// Build, or (as the seed API allows for back-compatibility) its spec
// alone. It returns the Build with the metadata a template may carry
// (labels and annotations) and the spec, or an error that names the field
// relative to build.
func ParseBuild(raw []byte) (*buildv1alpha1.Build, *apis.FieldError) {
	var probe struct {
		APIVersion *string          `json:"apiVersion"`
		Kind       *string          `json:"kind"`
		Spec       *json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, &apis.FieldError{Message: "not a JSON object", Paths: []string{apis.CurrentField}}
	}
	b := &buildv1alpha1.Build{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if probe.APIVersion == nil && probe.Kind == nil && probe.Spec == nil {
		// A BuildSpec alone.
		if err := dec.Decode(&b.Spec); err != nil {
			return nil, &apis.FieldError{Message: "not a build.knative.dev/v1alpha1 Build or BuildSpec", Paths: []string{apis.CurrentField}, Details: err.Error()}
		}
	} else {
		var full struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"metadata,omitempty"`
			Spec buildv1alpha1.BuildSpec `json:"spec"`
		}
		if err := dec.Decode(&full); err != nil {
			return nil, &apis.FieldError{Message: "not a build.knative.dev/v1alpha1 Build (metadata may hold labels and annotations only)", Paths: []string{apis.CurrentField}, Details: err.Error()}
		}
		if full.APIVersion != buildKind.GroupVersion().String() || full.Kind != buildKind.Kind {
			return nil, &apis.FieldError{
				Message: fmt.Sprintf("knbox builds with %s %s only, not %s %s", buildKind.GroupVersion(), buildKind.Kind, full.APIVersion, full.Kind),
				Paths:   []string{"apiVersion", "kind"},
			}
		}
		b.Labels, b.Annotations, b.Spec = full.Metadata.Labels, full.Metadata.Annotations, full.Spec
	}
	if dec.More() {
		return nil, &apis.FieldError{Message: "more than one JSON value", Paths: []string{apis.CurrentField}}
	}
	b.TypeMeta = metav1.TypeMeta{APIVersion: buildKind.GroupVersion().String(), Kind: buildKind.Kind}
	return b, nil
}

// canonicalBuild is a Build as BuildAnnotation holds it.
func canonicalBuild(b *buildv1alpha1.Build) string {
	out := struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"metadata,omitempty"`
		Spec buildv1alpha1.BuildSpec `json:"spec"`
	}{TypeMeta: b.TypeMeta, Spec: b.Spec}
	out.Metadata.Labels, out.Metadata.Annotations = b.Labels, b.Annotations
	raw, err := json.Marshal(out)
	if err != nil { // cannot happen for these types
		return ""
	}
	return string(raw)
}

// validateBuild checks a Configuration's build with Build's own checks.
func validateBuild(ctx context.Context, raw *runtime.RawExtension) *apis.FieldError {
	b, fe := ParseBuild(raw.Raw)
	if fe != nil {
		return fe
	}
	return b.Spec.Validate(ctx).ViaField("spec")
}

// validateBuildRef checks buildRef and buildName.
func validateBuildRef(ref *corev1.ObjectReference, name string) *apis.FieldError {
	var errs *apis.FieldError
	if ref != nil {
		if ref.APIVersion != "" && ref.APIVersion != buildKind.GroupVersion().String() {
			errs = errs.Also(apis.ErrInvalidValue(ref.APIVersion, "buildRef.apiVersion", "knbox builds with "+buildKind.GroupVersion().String()))
		}
		if ref.Kind != "" && ref.Kind != buildKind.Kind {
			errs = errs.Also(apis.ErrInvalidValue(ref.Kind, "buildRef.kind", "knbox builds with Build"))
		}
		switch {
		case ref.Name == "":
			errs = errs.Also(apis.ErrMissingField("buildRef.name"))
		case len(validation.IsDNS1123Subdomain(ref.Name)) > 0:
			errs = errs.Also(apis.ErrInvalidValue(ref.Name, "buildRef.name", "must be a DNS subdomain"))
		}
		if ref.Namespace != "" {
			errs = errs.Also(apis.ErrDisallowedFields("buildRef.namespace"))
		}
	}
	if name != "" && len(validation.IsDNS1123Subdomain(name)) > 0 {
		errs = errs.Also(apis.ErrInvalidValue(name, "buildName", "must be a DNS subdomain"))
	}
	if ref != nil && name != "" && ref.Name != name {
		errs = errs.Also(apis.ErrGeneric("buildName and buildRef name different builds", "buildName", "buildRef"))
	}
	return errs
}

// buildRefToV1 records buildRef and buildName in annotations.
func buildRefToV1(in *RevisionSpec, annotations map[string]string) map[string]string {
	annotations, _ = takeAnnotation(annotations, BuildRefAnnotation)
	annotations, _ = takeAnnotation(annotations, BuildNameAnnotation)
	if in.BuildRef != nil {
		ref := corev1.ObjectReference{APIVersion: buildKind.GroupVersion().String(), Kind: buildKind.Kind, Name: in.BuildRef.Name}
		raw, _ := json.Marshal(ref)
		annotations = setAnnotation(annotations, BuildRefAnnotation, string(raw))
	}
	return setAnnotation(annotations, BuildNameAnnotation, in.BuildName)
}

// buildRefFromV1 reads (and removes) buildRef and buildName.
func buildRefFromV1(out *RevisionSpec, annotations map[string]string) map[string]string {
	var ref, name string
	annotations, ref = takeAnnotation(annotations, BuildRefAnnotation)
	annotations, name = takeAnnotation(annotations, BuildNameAnnotation)
	if r, err := ParseBuildRef(ref); err == nil && r != nil {
		out.BuildRef = r
	}
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		out.BuildName = name
	}
	return annotations
}

// ParseBuildRef reads BuildRefAnnotation's value ("": nil, nil).
func ParseBuildRef(s string) (*corev1.ObjectReference, error) {
	if s == "" {
		return nil, nil
	}
	var ref corev1.ObjectReference
	if err := json.Unmarshal([]byte(s), &ref); err != nil {
		return nil, fmt.Errorf("annotation %s: not a JSON object reference: %w", BuildRefAnnotation, err)
	}
	if fe := validateBuildRef(&ref, ""); fe != nil {
		return nil, fmt.Errorf("annotation %s: %w", BuildRefAnnotation, fe)
	}
	return &ref, nil
}

// RevisionBuild says which Build a v1 Revision waits for, from its
// annotations: the inline Build it gets (inline non-nil, named after the
// Revision), or the name of an existing Build ("" and nil: none). An
// annotation that cannot be read is an error.
func RevisionBuild(rev metav1.Object) (name string, inline *buildv1alpha1.Build, err error) {
	a := rev.GetAnnotations()
	if raw, ok := a[BuildAnnotation]; ok {
		b, fe := ParseBuild([]byte(raw))
		if fe != nil {
			return "", nil, fmt.Errorf("annotation %s: %w", BuildAnnotation, fe)
		}
		return rev.GetName(), b, nil
	}
	ref, err := ParseBuildRef(a[BuildRefAnnotation])
	if err != nil {
		return "", nil, err
	}
	if ref != nil {
		return ref.Name, nil, nil
	}
	return a[BuildNameAnnotation], nil, nil
}
