package cli

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// testResolver mirrors what knbox's discovery serves.
func testResolver() *Resolver {
	knative := []string{"all", "knative", "serving"}
	serving := func(version string) *metav1.APIResourceList {
		return &metav1.APIResourceList{GroupVersion: "serving.knative.dev/" + version, APIResources: []metav1.APIResource{
			{Name: "services", SingularName: "service", Kind: "Service", Namespaced: true, ShortNames: []string{"kservice", "ksvc"}, Categories: knative},
			{Name: "services/status", Kind: "Service", Namespaced: true},
			{Name: "configurations", SingularName: "configuration", Kind: "Configuration", Namespaced: true, ShortNames: []string{"config", "cfg"}, Categories: knative},
			{Name: "revisions", SingularName: "revision", Kind: "Revision", Namespaced: true, ShortNames: []string{"rev"}, Categories: knative},
			{Name: "routes", SingularName: "route", Kind: "Route", Namespaced: true, ShortNames: []string{"rt"}, Categories: knative},
		}}
	}
	groups := []*metav1.APIGroup{
		{Name: "node.k8s.io", PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "node.k8s.io/v1", Version: "v1"}},
		{Name: "serving.knative.dev", PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "serving.knative.dev/v1", Version: "v1"}},
	}
	lists := []*metav1.APIResourceList{
		serving("v1alpha1"), // a non-preferred version listed first must not win
		{GroupVersion: "node.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "runtimeclasses", SingularName: "runtimeclass", Kind: "RuntimeClass"},
		}},
		serving("v1"),
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", SingularName: "namespace", Kind: "Namespace", ShortNames: []string{"ns"}},
			{Name: "namespaces/status", Kind: "Namespace"},
			{Name: "secrets", SingularName: "secret", Kind: "Secret", Namespaced: true},
			{Name: "configmaps", SingularName: "configmap", Kind: "ConfigMap", Namespaced: true, ShortNames: []string{"cm"}},
		}},
	}
	return NewResolver(groups, lists)
}

func TestResolve(t *testing.T) {
	t.Parallel()
	r := testResolver()
	tests := []struct{ in, want string }{
		{"ksvc", "serving.knative.dev/v1/services"},
		{"KSVC", "serving.knative.dev/v1/services"},
		{"kservice", "serving.knative.dev/v1/services"},
		{"service", "serving.knative.dev/v1/services"},
		{"services", "serving.knative.dev/v1/services"},
		{"Service", "serving.knative.dev/v1/services"},
		{"services.serving.knative.dev", "serving.knative.dev/v1/services"},
		{"service.serving.knative.dev", "serving.knative.dev/v1/services"},
		{"ksvc.serving.knative.dev", "serving.knative.dev/v1/services"},
		{"services.v1alpha1.serving.knative.dev", "serving.knative.dev/v1alpha1/services"},
		{"rev", "serving.knative.dev/v1/revisions"},
		{"revisions", "serving.knative.dev/v1/revisions"},
		{"rt", "serving.knative.dev/v1/routes"},
		{"cfg", "serving.knative.dev/v1/configurations"},
		{"config", "serving.knative.dev/v1/configurations"},
		{"ns", "/v1/namespaces"},
		{"namespace", "/v1/namespaces"},
		{"cm", "/v1/configmaps"},
		{"ConfigMap", "/v1/configmaps"},
		{"secrets", "/v1/secrets"},
		{"runtimeclass", "node.k8s.io/v1/runtimeclasses"},
		{"RuntimeClasses.node.k8s.io", "node.k8s.io/v1/runtimeclasses"},
	}
	for _, tt := range tests {
		m, err := r.Resolve(tt.in)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.in, err)
			continue
		}
		if got := m.Group + "/" + m.Version + "/" + m.Resource; got != tt.want {
			t.Errorf("Resolve(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestResolveUnknownSuggests(t *testing.T) {
	t.Parallel()
	r := testResolver()
	tests := []struct{ in, want string }{
		{"ksvcs", `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`},
		{"revison", `the server doesn't have a resource type "revison"; did you mean "revision"?`},
		{"svc", `the server doesn't have a resource type "svc"; did you mean "ksvc"?`},
		{"Rts", `the server doesn't have a resource type "Rts"; did you mean "rt"?`},
		{"runtime", `the server doesn't have a resource type "runtime"; did you mean "runtimeclass"?`},
		{"pods", `the server doesn't have a resource type "pods"`},
		{"deployments.apps", `the server doesn't have a resource type "deployments.apps"`},
		{"x", `the server doesn't have a resource type "x"`},
	}
	for _, tt := range tests {
		_, err := r.Resolve(tt.in)
		var ue *UnknownResourceError
		if !errors.As(err, &ue) {
			t.Errorf("Resolve(%q) err = %v, want an UnknownResourceError", tt.in, err)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("Resolve(%q) err = %q, want %q", tt.in, err, tt.want)
		}
	}
}

func TestResolveAll(t *testing.T) {
	t.Parallel()
	r := testResolver()
	tests := []struct{ in, want string }{
		{"all", "services configurations revisions routes"},
		{"ksvc,rev", "services revisions"},
		{"ksvc,services,all", "services configurations revisions routes"},
		{"cm, ns", "configmaps namespaces"},
		{"knative", "services configurations revisions routes"},
	}
	for _, tt := range tests {
		ms, err := r.ResolveAll(tt.in)
		if err != nil {
			t.Errorf("ResolveAll(%q): %v", tt.in, err)
			continue
		}
		var got []string
		for _, m := range ms {
			if m.Version != r.preferred[m.Group] {
				t.Errorf("ResolveAll(%q): %s in version %s, not the preferred one", tt.in, m.Resource, m.Version)
			}
			got = append(got, m.Resource)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("ResolveAll(%q) = %v, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := r.ResolveAll("ksvc,ksvcs"); err == nil || !strings.Contains(err.Error(), `did you mean "ksvc"`) {
		t.Errorf("ResolveAll with an unknown name: err = %v", err)
	}
}

func TestForKind(t *testing.T) {
	t.Parallel()
	r := testResolver()
	m, err := r.ForKind(schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1alpha1", Kind: "Service"})
	if err != nil || m.Version != "v1alpha1" || m.Resource != "services" || !m.Namespaced {
		t.Errorf("ForKind(v1alpha1 Service) = %+v, %v", m, err)
	}
	m, err = r.ForKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err != nil || m.Namespaced || m.KindGroup() != "namespace" || m.Ref("a") != "namespace/a" {
		t.Errorf("ForKind(Namespace) = %+v, %v", m, err)
	}
	_, err = r.ForKind(schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v2", Kind: "Service"})
	if err == nil || !strings.Contains(err.Error(), `no matches for kind "Service" in version "serving.knative.dev/v2"`) {
		t.Errorf("ForKind(v2 Service) err = %v", err)
	}
	_, err = r.ForKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	if err == nil || err.Error() != `no matches for kind "Deployment" in version "apps/v1"` {
		t.Errorf("ForKind(Deployment) err = %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"ksvcs", "ksvc", 1}, {"kitten", "sitting", 3}, {"rev", "rte", 2}} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
