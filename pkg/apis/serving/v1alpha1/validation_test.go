package v1alpha1

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/ptr"
)

func validConfig() ConfigurationSpec {
	return ConfigurationSpec{RevisionTemplate: RevisionTemplateSpec{Spec: RevisionSpec{
		Container: &corev1.Container{Image: "registry.example/hello:v1"},
	}}}
}

func TestServiceValidate(t *testing.T) {
	noImage := ConfigurationSpec{RevisionTemplate: RevisionTemplateSpec{Spec: RevisionSpec{
		Container: &corev1.Container{},
	}}}
	withBuild := validConfig()
	withBuild.Build = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"build.knative.dev/v1alpha1"}`)}
	withGoodBuild := validConfig()
	withGoodBuild.Build = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"build.knative.dev/v1alpha1","kind":"Build","spec":{"steps":[{"name":"a","image":"busybox"}]}}`)}

	tests := []struct {
		name string
		spec ServiceSpec
		ann  map[string]string
		want *apis.FieldError
	}{{
		name: "runLatest",
		spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: validConfig()}},
	}, {
		name: "no mode",
		want: apis.ErrMissingOneOf("spec.runLatest", "spec.pinned", "spec.release", "spec.manual"),
	}, {
		name: "two modes",
		spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: validConfig()}, Manual: &ManualMode{}},
		want: apis.ErrMultipleOneOf("spec.runLatest", "spec.manual"),
	}, {
		name: "runLatest without image",
		spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: noImage}},
		want: apis.ErrMissingField("spec.runLatest.configuration.revisionTemplate.spec.container.image"),
	}, {
		name: "runLatest without container",
		spec: ServiceSpec{RunLatest: &RunLatestMode{}},
		want: apis.ErrMissingField("spec.runLatest.configuration.revisionTemplate.spec.container"),
	}, {
		name: "build of another kind",
		spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: withBuild}},
		want: &apis.FieldError{
			Message: "knbox builds with build.knative.dev/v1alpha1 Build only, not build.knative.dev/v1alpha1 ",
			Paths:   []string{"spec.runLatest.configuration.build.apiVersion", "spec.runLatest.configuration.build.kind"},
		},
	}, {
		name: "build",
		spec: ServiceSpec{RunLatest: &RunLatestMode{Configuration: withGoodBuild}},
	}, {
		name: "pinned without revisionName",
		spec: ServiceSpec{Pinned: &PinnedMode{Configuration: validConfig()}},
		want: apis.ErrMissingField("spec.pinned.revisionName"),
	}, {
		name: "pinned to @latest",
		spec: ServiceSpec{Pinned: &PinnedMode{RevisionName: "@latest", Configuration: validConfig()}},
		want: apis.ErrInvalidValue("@latest", "spec.pinned.revisionName", "only release knows @latest; use runLatest"),
	}, {
		name: "pinned without image",
		spec: ServiceSpec{Pinned: &PinnedMode{RevisionName: "r", Configuration: noImage}},
		want: apis.ErrMissingField("spec.pinned.configuration.revisionTemplate.spec.container.image"),
	}, {
		name: "release of one",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a"}, Configuration: validConfig()}},
	}, {
		name: "release of two at 0",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "@latest"}, Configuration: validConfig()}},
	}, {
		name: "release of two at 99",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "b"}, RolloutPercent: 99, Configuration: validConfig()}},
	}, {
		name: "release of none",
		spec: ServiceSpec{Release: &ReleaseMode{Configuration: validConfig()}},
		want: apis.ErrMissingField("spec.release.revisions"),
	}, {
		name: "release of three",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "b", "c"}, Configuration: validConfig()}},
		want: apis.ErrGeneric("expected 1 or 2 revisions, got 3", "spec.release.revisions"),
	}, {
		name: "release with an empty name",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", ""}, Configuration: validConfig()}},
		want: apis.ErrMissingField("spec.release.revisions[1]"),
	}, {
		name: "release at 100",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "b"}, RolloutPercent: 100, Configuration: validConfig()}},
		want: apis.ErrOutOfBoundsValue(100, 0, 99, "spec.release.rolloutPercent"),
	}, {
		name: "release at -1",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "b"}, RolloutPercent: -1, Configuration: validConfig()}},
		want: apis.ErrOutOfBoundsValue(-1, 0, 99, "spec.release.rolloutPercent"),
	}, {
		name: "rollout of one revision",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a"}, RolloutPercent: 10, Configuration: validConfig()}},
		want: apis.ErrGeneric("rolloutPercent needs two revisions: a current and a candidate", "spec.release.rolloutPercent"),
	}, {
		name: "release without image",
		spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a"}, Configuration: noImage}},
		want: apis.ErrMissingField("spec.release.configuration.revisionTemplate.spec.container.image"),
	}, {
		name: "manual",
		spec: ServiceSpec{Manual: &ManualMode{}},
	}, {
		name: "manual with v1 traffic",
		spec: ServiceSpec{Manual: &ManualMode{}},
		ann:  map[string]string{V1TrafficAnnotation: `[{"tag":"a","revisionName":"r","percent":100}]`},
	}, {
		name: "manual with bad v1 traffic",
		spec: ServiceSpec{Manual: &ManualMode{}},
		ann:  map[string]string{V1TrafficAnnotation: `{`},
		want: &apis.FieldError{
			Message: "not a JSON list of v1 traffic targets",
			Paths:   []string{"metadata.annotations[serving.knbox.dev/v1-traffic]"},
			Details: "unexpected end of JSON input",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &Service{Spec: tc.spec}
			s.Annotations = tc.ann
			checkFieldError(t, s.Validate(context.Background()), tc.want)
			if tc.want != nil {
				if _, err := ServiceToV1(s, nil); err == nil {
					t.Error("ServiceToV1 accepted an invalid Service")
				}
			}
		})
	}
}

func TestRevisionValidate(t *testing.T) {
	img := &corev1.Container{Image: "registry.example/hello:v1"}
	tests := []struct {
		name string
		spec RevisionSpec
		want *apis.FieldError
	}{{
		name: "minimal",
		spec: RevisionSpec{Container: img},
	}, {
		name: "no container",
		want: apis.ErrMissingField("spec.container"),
	}, {
		name: "single",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Single"},
	}, {
		name: "single with 1",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Single", ContainerConcurrency: ptr.Int64(1)},
	}, {
		name: "single with 0",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Single", ContainerConcurrency: ptr.Int64(0)},
		want: apis.ErrGeneric("concurrencyModel Single means containerConcurrency 1, not 0",
			"spec.concurrencyModel", "spec.containerConcurrency"),
	}, {
		name: "multi with 1",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Multi", ContainerConcurrency: ptr.Int64(1)},
		want: apis.ErrGeneric("concurrencyModel Multi contradicts containerConcurrency 1",
			"spec.concurrencyModel", "spec.containerConcurrency"),
	}, {
		name: "multi with 10",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Multi", ContainerConcurrency: ptr.Int64(10)},
	}, {
		name: "bad model",
		spec: RevisionSpec{Container: img, ConcurrencyModel: "Many"},
		want: apis.ErrInvalidValue("Many", "spec.concurrencyModel", "must be Single or Multi"),
	}, {
		name: "serving states",
		spec: RevisionSpec{Container: img, ServingState: "Retired"},
	}, {
		name: "bad serving state",
		spec: RevisionSpec{Container: img, ServingState: "Asleep"},
		want: apis.ErrInvalidValue("Asleep", "spec.servingState", "must be Active, Reserve or Retired"),
	}, {
		name: "build name and ref",
		spec: RevisionSpec{Container: img, BuildName: "b", BuildRef: &corev1.ObjectReference{Name: "b"}},
	}, {
		name: "build name and ref differ",
		spec: RevisionSpec{Container: img, BuildName: "a", BuildRef: &corev1.ObjectReference{Name: "b"}},
		want: apis.ErrGeneric("buildName and buildRef name different builds", "spec.buildName", "spec.buildRef"),
	}, {
		name: "buildRef of another kind",
		spec: RevisionSpec{Container: img, BuildRef: &corev1.ObjectReference{APIVersion: "tekton.dev/v1", Kind: "TaskRun", Name: "b"}},
		want: apis.ErrInvalidValue("tekton.dev/v1", "spec.buildRef.apiVersion", "knbox builds with build.knative.dev/v1alpha1").Also(
			apis.ErrInvalidValue("TaskRun", "spec.buildRef.kind", "knbox builds with Build")),
	}, {
		name: "buildRef without name",
		spec: RevisionSpec{Container: img, BuildRef: &corev1.ObjectReference{}},
		want: apis.ErrMissingField("spec.buildRef.name"),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &Revision{Spec: tc.spec}
			checkFieldError(t, r.Validate(context.Background()), tc.want)
			_, err := RevisionToV1(r)
			if (err != nil) != (tc.want != nil) {
				t.Errorf("RevisionToV1 err = %v", err)
			}
		})
	}
}

func TestConfigurationValidate(t *testing.T) {
	withBuild := validConfig()
	withBuild.Build = &runtime.RawExtension{Raw: []byte(`{}`)}
	withSpecOnly := validConfig()
	withSpecOnly.Build = &runtime.RawExtension{Raw: []byte(`{"steps":[{"name":"a","image":"busybox"}],"timeout":"1m"}`)}
	withBoth := validConfig()
	withBoth.Build = withSpecOnly.Build
	withBoth.RevisionTemplate.Spec.BuildRef = &corev1.ObjectReference{Name: "b"}
	withJunk := validConfig()
	withJunk.Build = &runtime.RawExtension{Raw: []byte(`[1]`)}
	badModel := validConfig()
	badModel.RevisionTemplate.Spec.ConcurrencyModel = "Single"
	badModel.RevisionTemplate.Spec.ContainerConcurrency = ptr.Int64(4)

	tests := []struct {
		name string
		spec ConfigurationSpec
		want *apis.FieldError
	}{{
		name: "valid",
		spec: validConfig(),
	}, {
		name: "build without steps",
		spec: withBuild,
		want: apis.ErrMissingField("spec.build.spec.steps"),
	}, {
		name: "build spec alone",
		spec: withSpecOnly,
	}, {
		name: "build and buildRef",
		spec: withBoth,
		want: apis.ErrGeneric("a Configuration's Revisions either get the build or name one, not both",
			"spec.build", "spec.revisionTemplate.spec.buildRef", "spec.revisionTemplate.spec.buildName"),
	}, {
		name: "build not JSON object",
		spec: withJunk,
		want: &apis.FieldError{Message: "not a JSON object", Paths: []string{"spec.build"}},
	}, {
		name: "no container",
		want: apis.ErrMissingField("spec.revisionTemplate.spec.container"),
	}, {
		name: "single contradicted",
		spec: badModel,
		want: apis.ErrGeneric("concurrencyModel Single means containerConcurrency 1, not 4",
			"spec.revisionTemplate.spec.concurrencyModel", "spec.revisionTemplate.spec.containerConcurrency"),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Configuration{Spec: tc.spec}
			checkFieldError(t, c.Validate(context.Background()), tc.want)
			if _, err := ConfigurationToV1(c); (err != nil) != (tc.want != nil) {
				t.Errorf("ConfigurationToV1 err = %v", err)
			}
		})
	}
}

func TestRouteValidate(t *testing.T) {
	r := &Route{Spec: RouteSpec{Traffic: []TrafficTarget{{RevisionName: "r", Percent: ptr.Int64(100)}}}}
	if err := r.Validate(context.Background()); err != nil {
		t.Errorf("Validate = %v", err)
	}
}

func checkFieldError(t *testing.T, got, want *apis.FieldError) {
	t.Helper()
	if got.Error() != want.Error() {
		t.Errorf("Validate =\n  %q\nwant\n  %q", got.Error(), want.Error())
	}
}
