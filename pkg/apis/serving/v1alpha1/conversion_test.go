package v1alpha1

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/ptr"
	"knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// The golden files: testdata/golden/NAME.v1alpha1.yaml is converted to v1
// and compared with NAME.v1.yaml; NAME.base.yaml, if present, is the stored
// v1 Service (the base of ServiceToV1). testdata/v1/NAME.v1.yaml is a v1
// Service read as v1alpha1 (compared with NAME.v1alpha1.yaml) and written
// back.

func TestGoldenToV1(t *testing.T) {
	inputs, err := filepath.Glob("testdata/golden/*.v1alpha1.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".v1alpha1.yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obj := readV1alpha1(t, in)
			var base *servingv1.Service
			if basePath := filepath.Join("testdata/golden", name+".base.yaml"); exists(basePath) {
				base = &servingv1.Service{}
				readYAML(t, basePath, base)
			}

			v1, err := toV1(obj, base)
			if err != nil {
				t.Fatalf("ToV1: %v", err)
			}
			golden(t, filepath.Join("testdata/golden", name+".v1.yaml"), v1)

			back, err := fromV1(v1)
			if err != nil {
				t.Fatalf("FromV1: %v", err)
			}
			if got, want := canonicalJSON(t, back), canonicalJSON(t, obj); got != want {
				t.Errorf("round trip changed the object:\ngot  %s\nwant %s", got, want)
			}

			// What the apiserver stores: the v1 output, defaulted and
			// validated by Knative's own code.
			stored := knativeAdmit(t, v1)
			// The stored object reads back as the same v1alpha1 spec.
			again, err := fromV1(stored)
			if err != nil {
				t.Fatalf("FromV1 of the stored object: %v", err)
			}
			if s, ok := again.(*Service); ok {
				if got, want := serviceMode(&s.Spec), serviceMode(&obj.(*Service).Spec); got != want {
					t.Errorf("stored object reads back as %s, want %s", got, want)
				}
			}
		})
	}
}

func TestGoldenFromV1(t *testing.T) {
	inputs, err := filepath.Glob("testdata/v1/*.v1.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no v1 inputs: %v", err)
	}
	// These read as manual with their traffic in an annotation, and must
	// come back byte for byte.
	exact := map[string]bool{"service-tags": true, "service-two-containers": true}
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".v1.yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := &servingv1.Service{}
			readYAML(t, path, in)
			alpha, err := ServiceFromV1(in)
			if err != nil {
				t.Fatalf("ServiceFromV1: %v", err)
			}
			golden(t, filepath.Join("testdata/v1", name+".v1alpha1.yaml"), alpha)
			if alpha.Annotations[ModeAnnotation] != "" {
				t.Errorf("v1alpha1 object shows %s", ModeAnnotation)
			}

			back, err := ServiceToV1(alpha, in)
			if err != nil {
				t.Fatalf("ServiceToV1: %v", err)
			}
			if exact[name] {
				if got, want := canonicalJSON(t, back), canonicalJSON(t, in); got != want {
					t.Errorf("round trip changed the object:\ngot  %s\nwant %s", got, want)
				}
				return
			}
			// Otherwise: the same metadata and spec once stored, that is
			// once defaulted, except for the mode annotation and stale
			// knbox annotations. (Status is not all in v1alpha1.)
			got, want := knativeAdmit(t, back).(*servingv1.Service), knativeAdmit(t, in).(*servingv1.Service)
			got.Status, want.Status = servingv1.ServiceStatus{}, servingv1.ServiceStatus{}
			got.Spec, want.Spec = *canonicalV1ServiceSpec(&got.Spec), *canonicalV1ServiceSpec(&want.Spec)
			want.Annotations = setAnnotation(want.Annotations, ModeAnnotation, got.Annotations[ModeAnnotation])
			if g, w := canonicalJSON(t, got), canonicalJSON(t, want); g != w {
				t.Errorf("round trip changed the stored object:\ngot  %s\nwant %s", g, w)
			}
		})
	}
}

// TestManualKeepsBase checks that manual takes the whole spec from base and
// that only the annotation changes.
func TestManualKeepsBase(t *testing.T) {
	base := &servingv1.Service{}
	readYAML(t, "testdata/v1/service-tags.v1.yaml", base)
	in := &Service{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: ServiceSpec{Manual: &ManualMode{}}}
	out, err := ServiceToV1(in, base)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := canonicalJSON(t, out.Spec), canonicalJSON(t, base.Spec); got != want {
		t.Errorf("spec = %s, want base's %s", got, want)
	}
	if out.Annotations[ModeAnnotation] != ModeManual {
		t.Errorf("annotations = %v, want %s: %s", out.Annotations, ModeAnnotation, ModeManual)
	}
	// base is not shared with the result.
	out.Spec.Traffic[0].Tag = "changed"
	if base.Spec.Traffic[0].Tag == "changed" {
		t.Error("ServiceToV1 aliases base")
	}

	if _, err := ServiceToV1(in, nil); err == nil || !strings.Contains(err.Error(), "spec.manual") {
		t.Errorf("manual without base: err = %v, want one about spec.manual", err)
	}
}

// TestLeavingManual checks that writing a mode over a manual Service
// replaces the manual annotation.
func TestLeavingManual(t *testing.T) {
	in := readV1alpha1(t, "testdata/golden/service-runlatest.v1alpha1.yaml").(*Service)
	in.Annotations = setAnnotation(in.Annotations, ModeAnnotation, ModeManual)
	out, err := ServiceToV1(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Annotations[ModeAnnotation]; got != ModeRunLatest {
		t.Errorf("mode annotation = %q, want %q", got, ModeRunLatest)
	}
}

func TestRevisionFromV1Errors(t *testing.T) {
	tests := []struct {
		name string
		spec servingv1.RevisionSpec
		want string
	}{{
		name: "two containers",
		spec: servingv1.RevisionSpec{PodSpec: podSpec(func(ps *corev1.PodSpec) {
			ps.Containers = append(ps.Containers, ps.Containers[0])
		})},
		want: "spec.containers: 2 containers cannot be expressed",
	}, {
		name: "init containers and node selector",
		spec: servingv1.RevisionSpec{PodSpec: podSpec(func(ps *corev1.PodSpec) {
			ps.InitContainers = ps.Containers
			ps.NodeSelector = map[string]string{"disk": "ssd"}
		})},
		want: "spec.initContainers, nodeSelector: cannot be expressed",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RevisionFromV1(&servingv1.Revision{Spec: tc.spec})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			_, err = ConfigurationFromV1(&servingv1.Configuration{
				Spec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{Spec: tc.spec}},
			})
			want := strings.Replace(tc.want, "spec.", "spec.template.spec.", 1)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ConfigurationFromV1: err = %v, want it to contain %q", err, want)
			}
		})
	}
}

func TestRouteFromV1LatestRevision(t *testing.T) {
	bad := &servingv1.Route{Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{{
		RevisionName: "r-1", LatestRevision: ptr.Bool(true), Percent: ptr.Int64(100),
	}}}}
	if _, err := RouteFromV1(bad); err == nil || !strings.Contains(err.Error(), "spec.traffic[0].latestRevision") {
		t.Errorf("err = %v, want one about spec.traffic[0].latestRevision", err)
	}
	good := &servingv1.Route{Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{{
		ConfigurationName: "c", LatestRevision: ptr.Bool(true), Percent: ptr.Int64(100),
	}}}}
	if _, err := RouteFromV1(good); err != nil {
		t.Errorf("err = %v for a defaulted target", err)
	}
}

func TestConcurrencyModel(t *testing.T) {
	tests := []struct {
		name      string
		model     ConcurrencyModel
		cc        *int64
		wantV1    *int64
		wantAlpha *int64 // containerConcurrency read back
	}{
		{name: "single unset", model: ConcurrencyModelSingle, wantV1: ptr.Int64(1)},
		{name: "single 1", model: ConcurrencyModelSingle, cc: ptr.Int64(1), wantV1: ptr.Int64(1)},
		{name: "multi unset", model: ConcurrencyModelMulti},
		{name: "multi 0", model: ConcurrencyModelMulti, cc: ptr.Int64(0), wantV1: ptr.Int64(0), wantAlpha: ptr.Int64(0)},
		{name: "multi 8", model: ConcurrencyModelMulti, cc: ptr.Int64(8), wantV1: ptr.Int64(8), wantAlpha: ptr.Int64(8)},
		{name: "none 1", cc: ptr.Int64(1), wantV1: ptr.Int64(1), wantAlpha: ptr.Int64(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &Revision{Spec: RevisionSpec{
				Container:            &corev1.Container{Image: "i"},
				ConcurrencyModel:     tc.model,
				ContainerConcurrency: tc.cc,
			}}
			v1, err := RevisionToV1(in)
			if err != nil {
				t.Fatal(err)
			}
			if !equalPtr(v1.Spec.ContainerConcurrency, tc.wantV1) {
				t.Errorf("v1 containerConcurrency = %v, want %v", str(v1.Spec.ContainerConcurrency), str(tc.wantV1))
			}
			if got := v1.Annotations[ConcurrencyModelAnnotation]; got != string(tc.model) {
				t.Errorf("annotation = %q, want %q", got, tc.model)
			}
			back, err := RevisionFromV1(v1)
			if err != nil {
				t.Fatal(err)
			}
			if back.Spec.ConcurrencyModel != tc.model || !equalPtr(back.Spec.ContainerConcurrency, tc.wantAlpha) {
				t.Errorf("read back %q %v, want %q %v", back.Spec.ConcurrencyModel, str(back.Spec.ContainerConcurrency), tc.model, str(tc.wantAlpha))
			}
			if len(back.Annotations) != 0 {
				t.Errorf("read back annotations %v", back.Annotations)
			}
		})
	}
}

// knativeAdmit does to a v1 object what the apiserver does before storing
// it: Knative's SetDefaults and Validate, in a create, with knbox's
// features (runtimeClassName and securityContext on). It returns the
// defaulted copy.
func knativeAdmit(t *testing.T, obj any) any {
	t.Helper()
	type admittable interface {
		apis.Defaultable
		apis.Validatable
	}
	ctx := knativeContext()
	var o admittable
	switch v := obj.(type) {
	case *servingv1.Service:
		o = v.DeepCopy()
	case *servingv1.Configuration:
		o = v.DeepCopy()
	case *servingv1.Revision:
		o = v.DeepCopy()
	case *servingv1.Route:
		o = v.DeepCopy()
	default:
		t.Fatalf("unexpected %T", obj)
	}
	o.SetDefaults(ctx)
	if err := o.Validate(ctx).Filter(apis.ErrorLevel); err != nil {
		t.Errorf("Knative's validation of the v1 object: %v", err)
	}
	return o
}

func knativeContext() context.Context {
	cfg := config.FromContextOrDefaults(context.Background())
	cfg.Features.PodSpecRuntimeClassName = config.Enabled
	cfg.Features.PodSpecSecurityContext = config.Enabled
	return apis.WithinCreate(config.ToContext(context.Background(), cfg))
}

func readV1alpha1(t *testing.T, path string) any {
	t.Helper()
	var tm metav1.TypeMeta
	readYAML(t, path, &tm)
	var obj any
	switch tm.Kind {
	case "Service":
		obj = &Service{}
	case "Configuration":
		obj = &Configuration{}
	case "Revision":
		obj = &Revision{}
	case "Route":
		obj = &Route{}
	default:
		t.Fatalf("%s: unknown kind %q", path, tm.Kind)
	}
	readYAML(t, path, obj)
	return obj
}

func toV1(obj any, base *servingv1.Service) (any, error) {
	switch o := obj.(type) {
	case *Service:
		return ServiceToV1(o, base)
	case *Configuration:
		return ConfigurationToV1(o)
	case *Revision:
		return RevisionToV1(o)
	case *Route:
		return RouteToV1(o)
	}
	panic("unexpected type")
}

func fromV1(obj any) (any, error) {
	switch o := obj.(type) {
	case *servingv1.Service:
		return ServiceFromV1(o)
	case *servingv1.Configuration:
		return ConfigurationFromV1(o)
	case *servingv1.Revision:
		return RevisionFromV1(o)
	case *servingv1.Route:
		return RouteFromV1(o)
	}
	panic("unexpected type")
}

func serviceMode(s *ServiceSpec) string {
	switch {
	case s.RunLatest != nil:
		return ModeRunLatest
	case s.Pinned != nil:
		return ModePinned
	case s.Release != nil:
		return ModeRelease
	case s.Manual != nil:
		return ModeManual
	}
	return ""
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		if _, ok := into.(*metav1.TypeMeta); ok {
			err = yaml.Unmarshal(data, into)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// golden compares obj with the YAML file at path, or rewrites the file
// with -update.
func golden(t *testing.T, path string, obj any) {
	t.Helper()
	if *update {
		data, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if got, want := canonicalJSON(t, obj), canonicalRaw(t, js); got != want {
		t.Errorf("%s differs (run with -update to accept):\ngot  %s\nwant %s", path, got, want)
	}
}

// canonicalJSON is obj's JSON with sorted keys.
func canonicalJSON(t testing.TB, obj any) string {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return canonicalRaw(t, data)
}

func canonicalRaw(t testing.TB, data []byte) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// podSpec is a one-container PodSpec changed by edit.
func podSpec(edit func(*corev1.PodSpec)) corev1.PodSpec {
	ps := corev1.PodSpec{Containers: []corev1.Container{{Image: "registry.example/hello:v1"}}}
	edit(&ps)
	return ps
}

func equalPtr(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func str(p *int64) string {
	if p == nil {
		return "<nil>"
	}
	return strconv.FormatInt(*p, 10)
}
