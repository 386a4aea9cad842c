package apiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/openapi3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util/proto"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// TestOpenAPIV2: /openapi/v2 is served as protobuf (what kubectl and
// client-go's discovery ask for) and as JSON, with the schemas of the
// built-in and the Knative kinds.
func TestOpenAPIV2(t *testing.T) {
	e := newEnv(t)
	doc, err := e.kube.Discovery().OpenAPISchema() // protobuf
	if err != nil {
		t.Fatalf("OpenAPISchema: %v", err)
	}
	want := map[string]bool{"dev.knative.serving.v1.Service": false, "io.k8s.api.core.v1.ConfigMap": false, "io.k8s.api.rbac.v1.Role": false}
	for _, p := range doc.GetDefinitions().GetAdditionalProperties() {
		if _, ok := want[p.GetName()]; ok {
			want[p.GetName()] = true
		}
	}
	for n, ok := range want {
		if !ok {
			t.Errorf("definition %s missing from the protobuf document", n)
		}
	}
	// What Argo CD's cluster cache does with it: models, then a parser of
	// every kind's type for structured merge diff.
	models, err := proto.NewOpenAPIData(doc)
	if err != nil {
		t.Fatalf("models: %v", err)
	}
	parser, err := managedfields.NewGVKParser(models, false)
	if err != nil {
		t.Fatalf("GVK parser: %v", err)
	}
	if parser.Type(schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}) == nil {
		t.Error("no parseable type for serving.knative.dev/v1 Service")
	}
	code, body := e.do("GET", "/openapi/v2", "", nil, "Accept", "application/json")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi/v2: %d %s", code, body)
	}
	var sw spec.Swagger
	if err := json.Unmarshal(body, &sw); err != nil {
		t.Fatal(err)
	}
	svc, ok := sw.Definitions["dev.knative.serving.v1.Service"]
	if !ok {
		t.Fatal("no Service definition in the JSON document")
	}
	md := svc.Properties["metadata"]
	if got := md.Ref.String(); got != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
		t.Errorf("Service metadata refers to %q, want ObjectMeta", got)
	}
	if code, _ := e.do("GET", "/openapi/v2", "", nil, "Accept", "text/html"); code != http.StatusNotAcceptable {
		t.Errorf("Accept text/html: %d, want 406", code)
	}
}

// TestOpenAPIV3: the index and each group version's document, with the
// description of a nested Knative field (what kubectl explain prints) and
// the patch types and fieldValidation parameter kubectl inspects.
func TestOpenAPIV3(t *testing.T) {
	e := newEnv(t)
	root := openapi3.NewRoot(e.kube.Discovery().OpenAPIV3())
	gvs, err := root.GroupVersions()
	if err != nil {
		t.Fatal(err)
	}
	if len(gvs) < 4 {
		t.Errorf("group versions %v", gvs)
	}
	paths, err := e.kube.Discovery().OpenAPIV3().Paths()
	if err != nil {
		t.Fatal(err)
	}
	gv, ok := paths["apis/serving.knative.dev/v1"]
	if !ok {
		t.Fatalf("no serving.knative.dev/v1 in %v", paths)
	}
	b, err := gv.Schema("application/json")
	if err != nil {
		t.Fatal(err)
	}
	var doc spec3.OpenAPI
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	svc := doc.Components.Schemas["dev.knative.serving.v1.Service"]
	if svc == nil {
		t.Fatal("no Service schema")
	}
	s := svc.Properties["spec"].Properties["template"].Properties["spec"].Properties["containers"].Items.Schema.Properties["image"]
	if !strings.Contains(s.Description, "Container image name") {
		t.Errorf("containers.image description %q", s.Description)
	}
	item := doc.Paths.Paths["/apis/serving.knative.dev/v1/namespaces/{namespace}/services/{name}"]
	if item == nil || item.Patch == nil {
		t.Fatal("no PATCH operation for services")
	}
	ct := item.Patch.RequestBody.Content
	if _, ok := ct["application/apply-patch+yaml"]; !ok {
		t.Errorf("services PATCH does not declare apply patches: %v", ct)
	}
	if _, ok := ct["application/strategic-merge-patch+json"]; ok {
		t.Error("services PATCH declares strategic merge patches; custom resources take none")
	}
	var fv bool
	for _, p := range item.Patch.Parameters {
		fv = fv || p.Name == "fieldValidation"
	}
	if !fv {
		t.Error("services PATCH has no fieldValidation parameter")
	}
	// The core group has the built-in schemas.
	core, err := root.GVSpec(corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if core.Components.Schemas["io.k8s.api.core.v1.ConfigMap"] == nil {
		t.Error("no ConfigMap schema in api/v1")
	}
	if code, _ := e.do("GET", "/openapi/v3/apis/nothing.example.com/v1", "", nil); code != http.StatusNotFound {
		t.Errorf("unknown group version: %d, want 404", code)
	}
}
