package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for kind, obj := range map[string]runtime.Object{
		"Service": &Service{}, "ServiceList": &ServiceList{},
		"Configuration": &Configuration{}, "ConfigurationList": &ConfigurationList{},
		"Revision": &Revision{}, "RevisionList": &RevisionList{},
		"Route": &Route{}, "RouteList": &RouteList{},
	} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if len(gvks) != 1 || gvks[0] != SchemeGroupVersion.WithKind(kind) {
			t.Errorf("%T is %v, want %v", obj, gvks, SchemeGroupVersion.WithKind(kind))
		}
	}
	if got := Resource("services").String(); got != "services.serving.knative.dev" {
		t.Errorf("Resource = %s", got)
	}
	if got := Kind("Route").String(); got != "Route.serving.knative.dev" {
		t.Errorf("Kind = %s", got)
	}
}
