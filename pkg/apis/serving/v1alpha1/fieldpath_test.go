package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
)

func TestFieldPathFromV1(t *testing.T) {
	runLatest := &Service{Spec: ServiceSpec{RunLatest: &RunLatestMode{}}}
	pinned := &Service{Spec: ServiceSpec{Pinned: &PinnedMode{RevisionName: "r"}}}
	release1 := &Service{Spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a"}}}}
	release2 := &Service{Spec: ServiceSpec{Release: &ReleaseMode{Revisions: []string{"a", "b"}, RolloutPercent: 5}}}
	manual := &Service{Spec: ServiceSpec{Manual: &ManualMode{}}}

	tests := []struct {
		obj        runtime.Object
		path, want string
	}{
		{runLatest, "spec.template.spec.containers[0].image", "spec.runLatest.configuration.revisionTemplate.spec.container.image"},
		{runLatest, "spec.template.spec.containers[0]", "spec.runLatest.configuration.revisionTemplate.spec.container"},
		{runLatest, "spec.template.spec.containers", "spec.runLatest.configuration.revisionTemplate.spec.container"},
		{runLatest, "spec.template.spec.containers[1].image", "spec.template.spec.containers[1].image"},
		{runLatest, "spec.template.spec.containerConcurrency", "spec.runLatest.configuration.revisionTemplate.spec.containerConcurrency"},
		{runLatest, "spec.template.metadata.annotations.autoscaling.knative.dev/max-scale", "spec.runLatest.configuration.revisionTemplate.metadata.annotations.autoscaling.knative.dev/max-scale"},
		{runLatest, "spec.template.metadata.name", "spec.runLatest.configuration.revisionTemplate.metadata.name"},
		{runLatest, "spec.template", "spec.runLatest.configuration.revisionTemplate"},
		{runLatest, "spec.templates", "spec.templates"},
		{runLatest, "spec.traffic", "spec.runLatest"},
		{runLatest, "spec.traffic[0].percent", "spec.runLatest"},
		{runLatest, "metadata.name", "metadata.name"},
		{runLatest, "status.traffic[0].tag", "status.traffic[0].name"},
		{pinned, "spec.traffic[0].revisionName", "spec.pinned.revisionName"},
		{pinned, "spec.traffic[0].latestRevision", "spec.pinned"},
		{pinned, "spec.template.spec.containers[0].ports", "spec.pinned.configuration.revisionTemplate.spec.container.ports"},
		{release1, "spec.traffic[0].revisionName", "spec.release.revisions[0]"},
		{release1, "spec.traffic[1].revisionName", "spec.release"},
		{release1, "spec.traffic[0].percent", "spec.release"},
		{release2, "spec.traffic[1].revisionName", "spec.release.revisions[1]"},
		{release2, "spec.traffic[1].percent", "spec.release.rolloutPercent"},
		{release2, "spec.traffic[2].tag", "spec.release"},
		{release2, "spec.traffic", "spec.release"},
		{release2, "spec.template.spec.volumes[0].name", "spec.release.configuration.revisionTemplate.spec.volumes[0].name"},
		{manual, "spec.traffic[0].tag", "spec.traffic[0].name"},
		{manual, "spec.template.spec.containers[0].image", "spec.template.spec.containers[0].image"},
		{&Configuration{}, "spec.template.spec.containers[0].image", "spec.revisionTemplate.spec.container.image"},
		{&Configuration{}, "spec.template.metadata.labels", "spec.revisionTemplate.metadata.labels"},
		{&Configuration{}, "metadata.labels", "metadata.labels"},
		{&Revision{}, "spec.containers[0].readinessProbe.exec", "spec.container.readinessProbe.exec"},
		{&Revision{}, "spec.containers", "spec.container"},
		{&Revision{}, "spec.timeoutSeconds", "spec.timeoutSeconds"},
		{&Route{}, "spec.traffic[1].tag", "spec.traffic[1].name"},
		{&Route{}, "spec.traffic[1].revisionName", "spec.traffic[1].revisionName"},
		{&Route{}, "status.traffic[0].tag", "status.traffic[0].name"},
		{&Route{}, "spec.traffic[1].tags", "spec.traffic[1].tags"},
		{&ServiceList{}, "spec.template", "spec.template"},
		{nil, "spec.template", "spec.template"},
	}
	for _, tc := range tests {
		if got := FieldPathFromV1(tc.obj, tc.path); got != tc.want {
			t.Errorf("FieldPathFromV1(%T, %q) = %q, want %q", tc.obj, tc.path, got, tc.want)
		}
	}
}

// TestFieldPathOfKnativeErrors runs Knative's v1 validation on converted
// objects and checks that every path it reports is rewritten as intended.
func TestFieldPathOfKnativeErrors(t *testing.T) {
	s := &Service{Spec: ServiceSpec{Release: &ReleaseMode{
		Revisions:      []string{"-bad-", "b"},
		RolloutPercent: 10,
		Configuration: ConfigurationSpec{RevisionTemplate: RevisionTemplateSpec{Spec: RevisionSpec{
			Container: &corev1.Container{Image: "registry.example/hello:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8012}}},
		}}},
	}}}
	s.Name = "s"
	v1, err := ServiceToV1(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := knativeContext()
	v1.SetDefaults(ctx)
	fe := v1.Validate(ctx).Filter(apis.ErrorLevel)
	if fe == nil {
		t.Fatal("Knative accepted the Service")
	}
	got := map[string]bool{}
	for _, e := range fe.WrappedErrors() {
		for _, p := range e.Paths {
			got[FieldPathFromV1(s, p)] = true
		}
	}
	for _, want := range []string{
		"spec.release.revisions[0]",
		"spec.release.configuration.revisionTemplate.spec.container.ports.containerPort",
	} {
		if !got[want] {
			t.Errorf("paths %v lack %q", got, want)
		}
	}
}
