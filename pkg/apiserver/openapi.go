package apiserver

import (
	"bytes"
	"crypto/sha512"
	_ "embed" // the generated OpenAPI definitions
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"github.com/munnerz/goautoneg"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/knbox/knbox/pkg/version"
)

// The definitions come from the modules knbox builds with, not from a
// hand-written schema: see internal/openapigen.
//
//go:generate go run ./internal/openapigen -o openapi_definitions.json
//go:embed openapi_definitions.json
var definitionsJSON []byte

// models are the parsed definitions and the type converter server-side apply
// uses; the same for every Server, built once.
type models struct {
	defs  map[string]*spec.Schema            // by definition name, refs to #/definitions/
	byGVK map[schema.GroupVersionKind]string // definition name of each kind
	types managedfields.TypeConverter
}

var loadModels = sync.OnceValues(func() (*models, error) {
	m := &models{byGVK: map[schema.GroupVersionKind]string{}}
	if err := json.Unmarshal(definitionsJSON, &m.defs); err != nil {
		return nil, fmt.Errorf("decode OpenAPI definitions: %w", err)
	}
	for name, d := range m.defs {
		for _, gvk := range extensionGVKs(d) {
			m.byGVK[gvk] = name
		}
	}
	tc, err := managedfields.NewTypeConverter(m.defs, false)
	if err != nil {
		return nil, fmt.Errorf("build the type converter: %w", err)
	}
	m.types = tc
	return m, nil
})

// extensionGVKs reads a definition's x-kubernetes-group-version-kind.
func extensionGVKs(s *spec.Schema) []schema.GroupVersionKind {
	v, ok := s.Extensions["x-kubernetes-group-version-kind"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var gvks []schema.GroupVersionKind
	if err := json.Unmarshal(b, &gvks); err != nil {
		return nil
	}
	return gvks
}

// refsOf lists the definitions a schema refers to (v2 references).
func refsOf(s *spec.Schema) []string {
	b, _ := json.Marshal(s)
	var out []string
	for _, part := range strings.Split(string(b), `"$ref":"#/definitions/`)[1:] {
		name, _, _ := strings.Cut(part, `"`)
		out = append(out, name)
	}
	return out
}

// closure returns the named definitions and every definition they reach.
func (m *models) closure(names []string) map[string]*spec.Schema {
	out := map[string]*spec.Schema{}
	var walk func(string)
	walk = func(n string) {
		if _, ok := out[n]; ok {
			return
		}
		d, ok := m.defs[n]
		if !ok {
			return
		}
		out[n] = d
		for _, r := range refsOf(d) {
			walk(r)
		}
	}
	for _, n := range names {
		walk(n)
	}
	return out
}

// openAPI holds the documents of one Server (its kinds decide the paths).
type openAPI struct {
	v2JSON, v2Proto []byte
	v2ETag          string
	modified        time.Time
	v3              *handler3.OpenAPIService
	v3Mux           *http.ServeMux
	v3Paths         map[string]bool // group-version paths with a document
}

// prefixMux adapts http.ServeMux to kube-openapi's PathHandlerByGroupVersion.
type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) { m.Handle(path, h) }

// patchTypes are the patch media types a kind's PATCH accepts: custom
// resources (Knative's kinds) take no strategic merge patch on a cluster.
func patchTypes(k *Kind) []string {
	ts := []string{"application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"}
	if builtinKind(k) {
		ts = append(ts, "application/strategic-merge-patch+json")
	}
	return ts
}

// builtinKind: the kind is a Kubernetes built-in (not a custom resource on
// a cluster).
func builtinKind(k *Kind) bool {
	return !strings.HasSuffix(k.Group, ".knative.dev")
}

// buildOpenAPI builds the v2 document and the v3 documents per group
// version. Paths carry the operations kubectl inspects (PATCH with its
// fieldValidation parameter and patch types); definitions carry the schemas.
func (s *Server) buildOpenAPI() (*openAPI, error) {
	m, err := loadModels()
	if err != nil {
		return nil, err
	}
	type gvPaths struct {
		paths map[string]interface{}
		roots []string
	}
	byGV := map[string]*gvPaths{}
	allPaths := map[string]interface{}{}
	var allRoots []string
	for _, k := range s.kinds.All() {
		for _, v := range k.Versions() {
			prefix := "apis/" + k.Group + "/" + v
			if k.Group == "" {
				prefix = "api/" + v
			}
			gvk := schema.GroupVersionKind{Group: k.Group, Version: v, Kind: k.Kind}
			def, hasDef := m.byGVK[gvk]
			gv := byGV[prefix]
			if gv == nil {
				gv = &gvPaths{paths: map[string]interface{}{}}
				byGV[prefix] = gv
			}
			ext := map[string]string{"group": k.Group, "version": v, "kind": k.Kind}
			body := map[string]interface{}{}
			resp := map[string]interface{}{"description": "OK"}
			if hasDef {
				body = map[string]interface{}{"schema": map[string]string{"$ref": "#/definitions/" + def}}
				resp["schema"] = map[string]string{"$ref": "#/definitions/" + def}
				gv.roots = append(gv.roots, def)
				allRoots = append(allRoots, def)
				if l, ok := m.byGVK[gvk.GroupVersion().WithKind(k.Kind+"List")]; ok {
					gv.roots = append(gv.roots, l)
					allRoots = append(allRoots, l)
				}
			}
			params := []interface{}{
				map[string]interface{}{"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true},
				map[string]interface{}{"name": "dryRun", "in": "query", "type": "string", "uniqueItems": true},
				map[string]interface{}{"name": "fieldManager", "in": "query", "type": "string", "uniqueItems": true},
			}
			coll := "/" + prefix + "/" + k.Resource
			if k.Namespaced {
				coll = "/" + prefix + "/namespaces/{namespace}/" + k.Resource
			}
			op := func(id string, consumes []string, withBody bool, extra ...interface{}) map[string]interface{} {
				o := map[string]interface{}{
					"operationId":                     id + k.Kind + strings.ReplaceAll(v, ".", ""),
					"x-kubernetes-group-version-kind": ext,
					"parameters":                      append(append([]interface{}{}, extra...), params...),
					"responses":                       map[string]interface{}{"200": resp},
					"produces":                        []string{"application/json", "application/yaml"},
				}
				if consumes != nil {
					o["consumes"] = consumes
				}
				if withBody {
					o["parameters"] = append(o["parameters"].([]interface{}), map[string]interface{}{"name": "body", "in": "body", "required": true, "schema": body["schema"]})
				}
				return o
			}
			if k.Virtual {
				gv.paths[coll] = map[string]interface{}{"post": op("create", []string{"*/*"}, hasDef)}
				continue
			}
			gv.paths[coll] = map[string]interface{}{"post": op("create", []string{"*/*"}, hasDef)}
			gv.paths[coll+"/{name}"] = map[string]interface{}{
				"get":   op("read", nil, false),
				"put":   op("replace", []string{"*/*"}, hasDef),
				"patch": op("patch", patchTypes(k), false, map[string]interface{}{"name": "force", "in": "query", "type": "boolean", "uniqueItems": true}),
			}
			if k.HasStatus {
				gv.paths[coll+"/{name}/status"] = map[string]interface{}{
					"get":   op("readStatus", nil, false),
					"put":   op("replaceStatus", []string{"*/*"}, hasDef),
					"patch": op("patchStatus", patchTypes(k), false),
				}
			}
		}
	}
	for _, gv := range byGV {
		for p, item := range gv.paths {
			allPaths[p] = item
		}
	}
	title := "knbox"
	// v2: one document.
	v2 := map[string]interface{}{
		"swagger":     "2.0",
		"info":        map[string]string{"title": title, "version": version.GitVersion()},
		"paths":       allPaths,
		"definitions": m.closure(allRoots),
	}
	o := &openAPI{modified: time.Now(), v3: handler3.NewOpenAPIService(), v3Mux: http.NewServeMux(), v3Paths: map[string]bool{}}
	if o.v2JSON, err = json.Marshal(v2); err != nil {
		return nil, err
	}
	if o.v2JSON, err = toV2Schemas(o.v2JSON); err != nil {
		return nil, err
	}
	doc, err := openapiv2.ParseDocument(o.v2JSON)
	if err != nil {
		return nil, fmt.Errorf("parse the OpenAPI v2 document: %w", err)
	}
	if o.v2Proto, err = proto.Marshal(doc); err != nil {
		return nil, err
	}
	o.v2ETag = etag(o.v2JSON)
	// v3: one document per group version, schemas under components.
	prefixes := make([]string, 0, len(byGV))
	for p := range byGV {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		gv := byGV[p]
		paths := map[string]interface{}{}
		for path, item := range gv.paths {
			paths[path] = toV3PathItem(item.(map[string]interface{}))
		}
		b, err := json.Marshal(map[string]interface{}{
			"openapi":    "3.0.0",
			"info":       map[string]string{"title": title, "version": version.GitVersion()},
			"paths":      paths,
			"components": map[string]interface{}{"schemas": m.closure(gv.roots)},
		})
		if err != nil {
			return nil, err
		}
		b = bytes.ReplaceAll(b, []byte(`"#/definitions/`), []byte(`"#/components/schemas/`))
		var d spec3.OpenAPI
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("parse the OpenAPI v3 document %s: %w", p, err)
		}
		o.v3.UpdateGroupVersion(p, &d)
		o.v3Paths[p] = true
	}
	if err := o.v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{o.v3Mux}); err != nil {
		return nil, err
	}
	return o, nil
}

// toV2Schemas removes from a v2 document what OpenAPI v2 cannot say and
// CRD schemas (v3) use, as kube-apiserver does when it publishes a custom
// resource's schema in v2: anyOf, oneOf, not and nullable (int-or-string
// fields keep their x-kubernetes-int-or-string marker).
func toV2Schemas(doc []byte) ([]byte, error) {
	var d map[string]interface{}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	defs, _ := d["definitions"].(map[string]interface{})
	for _, s := range defs {
		stripV3(s)
	}
	return json.Marshal(d)
}

func stripV3(v interface{}) {
	s, ok := v.(map[string]interface{})
	if !ok {
		return
	}
	for _, k := range []string{"anyOf", "oneOf", "not", "nullable"} {
		delete(s, k)
	}
	if props, ok := s["properties"].(map[string]interface{}); ok {
		for _, p := range props {
			stripV3(p)
		}
	}
	stripV3(s["items"])
	stripV3(s["additionalProperties"])
	if all, ok := s["allOf"].([]interface{}); ok {
		for _, a := range all {
			stripV3(a)
		}
	}
}

// toV3PathItem turns a v2 path item (body parameters, consumes) into v3
// (requestBody with content per media type).
func toV3PathItem(item map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for method, v := range item {
		op := v.(map[string]interface{})
		n := map[string]interface{}{
			"operationId":                     op["operationId"],
			"x-kubernetes-group-version-kind": op["x-kubernetes-group-version-kind"],
		}
		var params []interface{}
		var bodySchema interface{}
		for _, p := range op["parameters"].([]interface{}) {
			pm := p.(map[string]interface{})
			if pm["in"] == "body" {
				bodySchema = pm["schema"]
				continue
			}
			params = append(params, map[string]interface{}{"name": pm["name"], "in": pm["in"], "schema": map[string]interface{}{"type": pm["type"], "uniqueItems": true}})
		}
		n["parameters"] = params
		if consumes, ok := op["consumes"].([]string); ok {
			content := map[string]interface{}{}
			for _, c := range consumes {
				mt := map[string]interface{}{}
				if bodySchema != nil {
					mt["schema"] = bodySchema
				}
				content[c] = mt
			}
			n["requestBody"] = map[string]interface{}{"content": content, "required": true}
		}
		resp := op["responses"].(map[string]interface{})["200"].(map[string]interface{})
		r3 := map[string]interface{}{"description": resp["description"]}
		if sch, ok := resp["schema"]; ok {
			r3["content"] = map[string]interface{}{"application/json": map[string]interface{}{"schema": sch}}
		}
		n["responses"] = map[string]interface{}{"200": r3}
		out[method] = n
	}
	return out
}

func etag(b []byte) string {
	return strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(b)))
}

// openAPIDocs builds the documents once per Server.
func (s *Server) openAPIDocs() (*openAPI, error) {
	s.openapiOnce.Do(func() { s.openapi, s.openapiErr = s.buildOpenAPI() })
	return s.openapi, s.openapiErr
}

// The media types of the OpenAPI v2 protobuf form kubectl asks for.
const (
	protoV2        = "com.github.proto-openapi.spec.v2@v1.0+protobuf"
	protoV2Dotted  = "com.github.proto-openapi.spec.v2.v1.0+protobuf"
	openAPIv2Proto = "application/" + protoV2Dotted // what kube-apiserver answers
)

// serveOpenAPIV2 serves /openapi/v2 as JSON or protobuf, as Accept asks.
func (s *Server) serveOpenAPIV2(w http.ResponseWriter, r *http.Request) {
	o, err := s.openAPIDocs()
	if err != nil {
		writeError(w, err)
		return
	}
	accept := r.Header.Get("Accept")
	if accept == "" {
		accept = "*/*"
	}
	w.Header().Add("Vary", "Accept")
	for _, c := range goautoneg.ParseAccept(accept) {
		var body []byte
		var ct string
		switch {
		case c.Type == "application" && (c.SubType == protoV2 || c.SubType == protoV2Dotted):
			body, ct = o.v2Proto, openAPIv2Proto
		case (c.Type == "application" || c.Type == "*") && (c.SubType == "json" || c.SubType == "*"):
			body, ct = o.v2JSON, "application/json"
		default:
			continue
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Etag", o.v2ETag)
		http.ServeContent(w, r, "", o.modified, bytes.NewReader(body))
		return
	}
	writeError(w, errNotAcceptable(accept))
}

// serveOpenAPIV3 serves the v3 index (/openapi/v3) and the document of each
// group version (/openapi/v3/apis/GROUP/VERSION, /openapi/v3/api/v1), as
// JSON or protobuf, with kube-openapi's handler.
func (s *Server) serveOpenAPIV3(w http.ResponseWriter, r *http.Request) {
	o, err := s.openAPIDocs()
	if err != nil {
		writeError(w, err)
		return
	}
	if gv := strings.Trim(strings.TrimPrefix(r.URL.Path, "/openapi/v3"), "/"); gv != "" && !o.v3Paths[gv] {
		writeError(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
		return
	}
	o.v3Mux.ServeHTTP(w, r)
}
