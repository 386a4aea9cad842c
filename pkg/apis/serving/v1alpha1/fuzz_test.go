package v1alpha1

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

// addSeeds adds the JSON of the YAML files matching pattern to f's corpus.
func addSeeds(f *testing.F, pattern string) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds for %s: %v", pattern, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		f.Add(js)
	}
}

// fuzzBase is the stored Service that a manual Service keeps.
var fuzzBase = &servingv1.Service{Spec: servingv1.ServiceSpec{
	ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
		Spec: servingv1.RevisionSpec{PodSpec: podSpec(func(*corev1.PodSpec) {})},
	}},
	RouteSpec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{latestTarget("", 100)}},
}}

// FuzzServiceRoundTrip: a v1alpha1 Service that is valid and converts to
// v1 converts back to itself (up to what the package documentation says is
// normalized), and nothing panics.
func FuzzServiceRoundTrip(f *testing.F) {
	addSeeds(f, "testdata/golden/service-*.v1alpha1.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &Service{}
		if err := json.Unmarshal(data, in); err != nil {
			return
		}
		checkServiceRoundTrip(t, in)
	})
}

// FuzzServiceFields is FuzzServiceRoundTrip on Services built from fuzzed
// fields, which reaches the interesting shapes far more often than bytes.
func FuzzServiceFields(f *testing.F) {
	f.Add(uint8(0), "a", "b", 0, int64(0), false, "", "", "", "")
	f.Add(uint8(1), "r-1", "", 0, int64(1), true, "Single", "Active", "k", "v")
	f.Add(uint8(2), "a", "@latest", 30, int64(4), true, "Multi", "Retired", "", "")
	f.Add(uint8(2), "@latest", "", 0, int64(0), false, "", "", "", "")
	f.Add(uint8(3), "", "", 0, int64(0), false, "", "", V1TrafficAnnotation, `[{"tag":"x","revisionName":"y","percent":100}]`)
	f.Add(uint8(3), "", "", 0, int64(0), false, "", "", V1TrafficAnnotation, `[{"latestRevision":true,"percent":100}]`)
	f.Fuzz(func(t *testing.T, mode uint8, rev1, rev2 string, percent int, cc int64, ccSet bool, model, state, annKey, annVal string) {
		cs := ConfigurationSpec{RevisionTemplate: RevisionTemplateSpec{Spec: RevisionSpec{
			Container:        &corev1.Container{Image: "registry.example/hello:v1"},
			ConcurrencyModel: ConcurrencyModel(model),
			ServingState:     ServingState(state),
		}}}
		if ccSet {
			cs.RevisionTemplate.Spec.ContainerConcurrency = ptr.Int64(cc)
		}
		in := &Service{}
		if annKey != "" {
			in.Annotations = map[string]string{annKey: annVal}
			cs.RevisionTemplate.Annotations = map[string]string{annKey: annVal}
		}
		switch mode % 4 {
		case 0:
			in.Spec.RunLatest = &RunLatestMode{Configuration: cs}
		case 1:
			in.Spec.Pinned = &PinnedMode{RevisionName: rev1, Configuration: cs}
		case 2:
			revs := []string{rev1}
			if rev2 != "" {
				revs = append(revs, rev2)
			}
			in.Spec.Release = &ReleaseMode{Revisions: revs, RolloutPercent: percent, Configuration: cs}
		case 3:
			in.Spec.Manual = &ManualMode{}
		}
		checkServiceRoundTrip(t, in)
	})
}

func checkServiceRoundTrip(t *testing.T, in *Service) {
	if in.Validate(context.Background()) != nil {
		return
	}
	v1, err := ServiceToV1(in, fuzzBase)
	if err != nil {
		return
	}
	back, err := ServiceFromV1(v1)
	if err != nil {
		t.Fatalf("ServiceFromV1 of ServiceToV1's output: %v", err)
	}

	if _, ok := in.Annotations[V1TrafficAnnotation]; ok && in.Spec.Manual != nil {
		// The v1 object is a plain v1 Service, which may read as any
		// mode; what must hold is that it is stable.
		again, err := ServiceToV1(back, v1)
		if err != nil {
			t.Fatalf("ServiceToV1 of ServiceFromV1's output: %v", err)
		}
		got, want := &again.Spec, &v1.Spec
		if back.Spec.Manual == nil {
			got, want = canonicalV1ServiceSpec(got), canonicalV1ServiceSpec(want)
		}
		if got, want := canonicalJSON(t, got), canonicalJSON(t, want); got != want {
			t.Fatalf("v1 spec changed:\ngot  %s\nwant %s", got, want)
		}
		return
	}

	want := normalizedForRoundTrip(in)
	if got, want := canonicalJSON(t, back.ObjectMeta), canonicalJSON(t, want.ObjectMeta); got != want {
		t.Fatalf("metadata changed:\ngot  %s\nwant %s", got, want)
	}
	if got, want := canonicalJSON(t, back.Spec), canonicalJSON(t, want.Spec); got != want {
		t.Fatalf("spec changed:\ngot  %s\nwant %s", got, want)
	}
	// Status is not all in v1 (domain is url's host, ...): one round trip
	// makes it canonical, and a second one keeps it.
	v1b, err := ServiceToV1(back, fuzzBase)
	if err != nil {
		t.Fatalf("ServiceToV1 of ServiceFromV1's output: %v", err)
	}
	back2, err := ServiceFromV1(v1b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := canonicalJSON(t, back2.Status), canonicalJSON(t, back.Status); got != want {
		t.Fatalf("status not stable:\ngot  %s\nwant %s", got, want)
	}
}

// normalizedForRoundTrip is what a valid v1alpha1 Service reads back as:
// the knbox annotations a client wrote are ignored, and Single with
// containerConcurrency 1 reads as Single.
func normalizedForRoundTrip(in *Service) *Service {
	out := in.DeepCopy()
	out.Annotations, _ = takeAnnotation(out.Annotations, ModeAnnotation)
	out.Annotations, _ = takeAnnotation(out.Annotations, V1TrafficAnnotation)
	var cs *ConfigurationSpec
	switch {
	case out.Spec.RunLatest != nil:
		cs = &out.Spec.RunLatest.Configuration
	case out.Spec.Pinned != nil:
		cs = &out.Spec.Pinned.Configuration
	case out.Spec.Release != nil:
		cs = &out.Spec.Release.Configuration
	default:
		return out
	}
	tmpl := &cs.RevisionTemplate
	tmpl.Annotations, _ = takeAnnotation(tmpl.Annotations, ConcurrencyModelAnnotation)
	tmpl.Annotations, _ = takeAnnotation(tmpl.Annotations, ServingStateAnnotation)
	if tmpl.Spec.ConcurrencyModel == ConcurrencyModelSingle {
		tmpl.Spec.ContainerConcurrency = nil
	}
	return out
}

// FuzzFromV1: any v1 Service reads as v1alpha1 without panicking, and
// written back (with the stored object as base) gives the same spec, up to
// v1's defaulting of traffic and knbox annotations that no longer held.
func FuzzFromV1(f *testing.F) {
	addSeeds(f, "testdata/golden/service-*.v1.yaml")
	addSeeds(f, "testdata/v1/service-*.v1.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &servingv1.Service{}
		if err := json.Unmarshal(data, in); err != nil {
			return
		}
		checkFromV1(t, in)
	})
}

// FuzzFromV1Traffic is FuzzFromV1 on Services with up to three fuzzed
// traffic targets, where the mode inference has its corners.
func FuzzFromV1Traffic(f *testing.F) {
	f.Add(uint8(1), "", "", false, false, true, int64(100), "", "", false, false, false, int64(0), "", "", false, false, false, int64(0), "", "", false)
	f.Add(uint8(3), "current", "a", true, false, false, int64(70), "candidate", "", true, true, true, int64(30), "latest", "", true, true, true, int64(0), "Single", "Active", true)
	f.Add(uint8(2), "current", "a", true, false, true, int64(100), "latest", "", true, true, true, int64(0), "", "", false, false, false, int64(0), "Multi", "", false)
	f.Fuzz(func(t *testing.T, n uint8,
		tag0, rev0 string, lrSet0, lr0, pSet0 bool, p0 int64,
		tag1, rev1 string, lrSet1, lr1, pSet1 bool, p1 int64,
		tag2, rev2 string, lrSet2, lr2, pSet2 bool, p2 int64,
		model, state string, cc1 bool) {
		target := func(tag, rev string, lrSet, lr, pSet bool, p int64) servingv1.TrafficTarget {
			tt := servingv1.TrafficTarget{Tag: tag, RevisionName: rev}
			if lrSet {
				tt.LatestRevision = ptr.Bool(lr)
			}
			if pSet {
				tt.Percent = ptr.Int64(p)
			}
			return tt
		}
		all := []servingv1.TrafficTarget{
			target(tag0, rev0, lrSet0, lr0, pSet0, p0),
			target(tag1, rev1, lrSet1, lr1, pSet1, p1),
			target(tag2, rev2, lrSet2, lr2, pSet2, p2),
		}
		in := fuzzBase.DeepCopy()
		in.Spec.Traffic = all[:int(n)%4]
		tmpl := &in.Spec.Template
		tmpl.Annotations = map[string]string{}
		if model != "" {
			tmpl.Annotations[ConcurrencyModelAnnotation] = model
		}
		if state != "" {
			tmpl.Annotations[ServingStateAnnotation] = state
		}
		if cc1 {
			tmpl.Spec.ContainerConcurrency = ptr.Int64(1)
		}
		checkFromV1(t, in)
	})
}

func checkFromV1(t *testing.T, in *servingv1.Service) {
	alpha, err := ServiceFromV1(in)
	if err != nil {
		return
	}
	if _, ok := alpha.Annotations[ModeAnnotation]; ok {
		t.Fatalf("v1alpha1 object shows %s", ModeAnnotation)
	}
	out, err := ServiceToV1(alpha, in)
	if err != nil {
		t.Fatalf("ServiceToV1 of ServiceFromV1's output: %v", err)
	}
	got, want := &out.Spec, &in.Spec
	if alpha.Spec.Manual == nil {
		got, want = canonicalV1ServiceSpec(got), canonicalV1ServiceSpec(want)
	}
	if g, w := canonicalJSON(t, got), canonicalJSON(t, want); g != w {
		t.Fatalf("spec changed (read as %s):\ngot  %s\nwant %s", serviceMode(&alpha.Spec), g, w)
	}
	// Metadata is kept, but for the mode annotation.
	gotMeta, wantMeta := out.ObjectMeta.DeepCopy(), in.ObjectMeta.DeepCopy()
	gotMeta.Annotations, _ = takeAnnotation(gotMeta.Annotations, ModeAnnotation)
	wantMeta.Annotations, _ = takeAnnotation(wantMeta.Annotations, ModeAnnotation)
	wantMeta.Annotations, _ = takeAnnotation(wantMeta.Annotations, V1TrafficAnnotation)
	if g, w := canonicalJSON(t, gotMeta), canonicalJSON(t, wantMeta); g != w {
		t.Fatalf("metadata changed:\ngot  %s\nwant %s", g, w)
	}
}
