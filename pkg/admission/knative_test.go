package admission

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"
)

// TestServiceAccountNameKnativeText: a malformed serviceAccountName is
// refused with Knative's own validation text in the Status message, as
// Knative's conformance test TestServiceAccountValidation reads it
// ("foo@bar.baz: spec.template.spec.serviceAccountName\n" and the DNS-1123
// details), not Kubernetes' rewording ("Invalid value: ..."), with the
// field in the causes; the same for a ServiceAccount that does not exist.
func TestServiceAccountNameKnativeText(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team-a", nil, nil))
	e.a.ServiceAccountExists = func(_ context.Context, ns, name string) (bool, error) { return name == "default", nil }
	details := strings.Join(validation.IsDNS1123Subdomain("foo@bar.baz"), "\n")
	objects := func(sa string) []struct {
		obj    runtime.Object
		gr     schema.GroupResource
		prefix string
	} {
		svc := service("team-a", "svc", nil)
		svc.Spec.Template.Spec.ServiceAccountName = sa
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cfg"}}
		cfg.Spec.Template = *svc.Spec.Template.DeepCopy()
		rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "rev"}, Spec: *svc.Spec.Template.Spec.DeepCopy()}
		return []struct {
			obj    runtime.Object
			gr     schema.GroupResource
			prefix string
		}{
			{svc, ksvcGR, "spec.template.spec."},
			{cfg, servingv1.Resource("configurations"), "spec.template.spec."},
			{rev, servingv1.Resource("revisions"), "spec."},
		}
	}
	for _, tc := range []struct {
		name, sa string
		want     func(prefix string) string
	}{
		{"malformed", "foo@bar.baz", func(p string) string {
			return "validation failed: invalid value: foo@bar.baz: " + p + "serviceAccountName\n" + details
		}},
		{"missing", "robot", func(p string) string {
			return `validation failed: invalid value: robot: ` + p + `serviceAccountName` + "\n" + `ServiceAccount "robot" not found in namespace "team-a"`
		}},
	} {
		for _, o := range objects(tc.sa) {
			t.Run(tc.name+"/"+o.gr.Resource, func(t *testing.T) {
				_, _, err := e.admit(t, Create, o.obj, nil, o.gr)
				if !apierrors.IsInvalid(err) {
					t.Fatalf("err = %v, want 422 Invalid", err)
				}
				msg := err.(apierrors.APIStatus).Status().Message
				if want := tc.want(o.prefix); !strings.Contains(msg, want) {
					t.Errorf("message %q\nlacks Knative's text %q", msg, want)
				}
				if strings.Contains(msg, "Invalid value: ") {
					t.Errorf("message %q carries Kubernetes' rewording of Knative's text", msg)
				}
				d := err.(apierrors.APIStatus).Status().Details
				if d == nil || len(d.Causes) == 0 || d.Causes[0].Field != o.prefix+"serviceAccountName" {
					t.Errorf("causes %+v, want the field %sserviceAccountName", d, o.prefix)
				}
			})
		}
	}
	// The default ServiceAccount exists: admitted.
	for _, o := range objects("default") {
		if _, _, err := e.admit(t, Create, o.obj, nil, o.gr); err != nil {
			t.Errorf("%s with serviceAccountName default: %v", o.gr.Resource, err)
		}
	}
}

// TestVisibilityLabel: the visibility label of a Service or Route takes
// cluster-local only; another value is refused at its field, naming the
// value that works.
func TestVisibilityLabel(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team-a", nil, nil))
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"cluster-local", true}, {"Cluster-Local", false}, {"public", false}, {"", false}} {
		svc := service("team-a", "svc", nil)
		svc.Labels = map[string]string{"networking.knative.dev/visibility": tc.value}
		rt := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "rt", Labels: svc.Labels},
			Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{{ConfigurationName: "cfg", Percent: ptr.Int64(100)}}}}
		for _, o := range []struct {
			obj runtime.Object
			gr  schema.GroupResource
		}{{svc, ksvcGR}, {rt, servingv1.Resource("routes")}} {
			_, _, err := e.admit(t, Create, o.obj, nil, o.gr)
			if tc.ok {
				if err != nil {
					t.Errorf("%s %q: %v", o.gr.Resource, tc.value, err)
				}
				continue
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%s %q: err = %v, want 422 Invalid", o.gr.Resource, tc.value, err)
			}
			d := err.(apierrors.APIStatus).Status().Details
			if d == nil || len(d.Causes) == 0 || !strings.Contains(d.Causes[0].Field, "networking.knative.dev/visibility") ||
				!strings.Contains(err.Error(), "cluster-local") {
				t.Errorf("%s %q: %v %+v, want the label's field and the value that works", o.gr.Resource, tc.value, err, d)
			}
		}
	}
}

// TestMappingUnderClusterDomain: a DomainMapping of a name under the
// configured cluster domain is refused at metadata.name; other names pass.
func TestMappingUnderClusterDomain(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team-a", nil, nil))
	e.a.ClusterDomain = "corp.internal"
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"shop.example.com", true}, {"x.team-a.svc.corp.internal", false}, {"corp.internal", false}, {"a.Corp.Internal", false}, {"notcorp.internal", true}} {
		dm := &servingv1beta1.DomainMapping{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: tc.name},
			Spec: servingv1beta1.DomainMappingSpec{Ref: duckv1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "s"}}}
		_, _, err := e.admit(t, Create, dm, nil, servingv1beta1.Resource("domainmappings"))
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v", tc.name, err)
			}
			continue
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cluster local domain") || !strings.Contains(err.Error(), "metadata.name") {
			t.Errorf("%q: %v, want 422 naming metadata.name and the cluster domain", tc.name, err)
		}
	}
}

// TestMappingUnderDefaultClusterDomain: a name under cluster.local is
// refused once, by Knative's validation, not twice.
func TestMappingUnderDefaultClusterDomain(t *testing.T) {
	e := newTenantEnv(t, newNamespace("team-a", nil, nil))
	e.a.ClusterDomain = "cluster.local"
	dm := &servingv1beta1.DomainMapping{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "x.team-a.svc.cluster.local"},
		Spec: servingv1beta1.DomainMappingSpec{Ref: duckv1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "s"}}}
	_, _, err := e.admit(t, Create, dm, nil, servingv1beta1.Resource("domainmappings"))
	if !apierrors.IsInvalid(err) || strings.Count(err.Error(), "cluster local domain") != 1 {
		t.Errorf("%v, want one 422 naming the cluster local domain", err)
	}
}
