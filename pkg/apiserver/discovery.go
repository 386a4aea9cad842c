package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"runtime"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiversion "k8s.io/apimachinery/pkg/version"

	"github.com/knbox/knbox/pkg/version"
)

func (s *Server) serveVersion(w http.ResponseWriter, _ *http.Request) {
	writeObject(w, http.StatusOK, output{}, apiversion.Info{
		Major: version.KubeMajor, Minor: version.KubeMinor, GitVersion: version.GitVersion(),
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}

// The discovery documents are the legacy (unaggregated) ones; clients that
// prefer aggregated discovery fall back to them when the response is plain
// application/json.
func (s *Server) serveAPIVersions(w http.ResponseWriter, r *http.Request) {
	v := &metav1.APIVersions{Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}}
	v.Kind, v.APIVersion = "APIVersions", ""
	writeObject(w, http.StatusOK, output{}, v)
}

func (s *Server) apiGroup(name string, versions []string) metav1.APIGroup {
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

func (s *Server) serveAPIGroups(w http.ResponseWriter, _ *http.Request) {
	names, versions := s.kinds.groups()
	l := &metav1.APIGroupList{}
	l.Kind, l.APIVersion = "APIGroupList", "v1"
	for _, n := range names {
		if n == "" {
			continue
		}
		l.Groups = append(l.Groups, s.apiGroup(n, versions[n]))
	}
	writeObject(w, http.StatusOK, output{}, l)
}

func (s *Server) serveAPIGroup(w http.ResponseWriter, _ *http.Request, group string) {
	_, versions := s.kinds.groups()
	vs, ok := versions[group]
	if !ok || group == "" {
		writeError(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
		return
	}
	g := s.apiGroup(group, vs)
	g.Kind, g.APIVersion = "APIGroup", "v1"
	writeObject(w, http.StatusOK, output{}, g)
}

var verbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func (s *Server) serveResourceList(w http.ResponseWriter, _ *http.Request, group, ver string) {
	gv := schema.GroupVersion{Group: group, Version: ver}
	l := &metav1.APIResourceList{GroupVersion: gv.String()}
	l.Kind, l.APIVersion = "APIResourceList", "v1"
	for _, k := range s.kinds.All() {
		if k.Group != group || !k.Serves(ver) {
			continue
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: k.Resource, SingularName: k.Singular, Namespaced: k.Namespaced, Kind: k.Kind,
			Verbs: kindVerbs(k), ShortNames: k.ShortNames, Categories: k.Categories,
			StorageVersionHash: storageVersionHash(k),
		})
		if k.HasStatus {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name: k.Resource + "/status", Namespaced: k.Namespaced, Kind: k.Kind, Verbs: metav1.Verbs{"get", "patch", "update"},
			})
		}
		l.APIResources = append(l.APIResources, authSubresources(k)...)
		if k.Kind == "Revision" && k.Group == "serving.knative.dev" && s.opts.Logs != nil {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name: k.Resource + "/log", Namespaced: true, Kind: k.Kind, Verbs: metav1.Verbs{"get"},
			})
		}
	}
	if len(l.APIResources) == 0 {
		writeError(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
		return
	}
	writeObject(w, http.StatusOK, output{}, l)
}

func storageVersionHash(k *Kind) string {
	h := sha256.Sum256([]byte(k.Group + "/" + k.Version + "/" + k.Kind))
	return hex.EncodeToString(h[:8])
}

// serveOpenAPIV3 publishes a minimal OpenAPI v3 description per group
// version: one path per kind whose PATCH operation declares the
// fieldValidation query parameter and the patch types knbox accepts. That is
// what kubectl reads to decide that the server validates fields itself (so
// `kubectl apply` needs no --validate=false) and which patch type to send.
// Schemas are not published (kubectl explain has nothing to show).
func (s *Server) serveOpenAPIV3(w http.ResponseWriter, _ *http.Request, path string) {
	s.openapiOnce.Do(s.buildOpenAPI)
	if path == "" {
		type entry struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		}
		idx := struct {
			Paths map[string]entry `json:"paths"`
		}{Paths: map[string]entry{}}
		for p, doc := range s.openapi {
			h := sha256.Sum256(doc)
			idx.Paths[p] = entry{ServerRelativeURL: "/openapi/v3/" + p + "?hash=" + hex.EncodeToString(h[:])}
		}
		writeObject(w, http.StatusOK, output{}, idx)
		return
	}
	doc, ok := s.openapi[path]
	if !ok {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Resource: "openapi"}, path))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

func (s *Server) buildOpenAPI() {
	type param struct {
		Name   string            `json:"name"`
		In     string            `json:"in"`
		Schema map[string]string `json:"schema"`
	}
	type op struct {
		GVK         map[string]string                 `json:"x-kubernetes-group-version-kind"`
		Parameters  []param                           `json:"parameters"`
		RequestBody map[string]map[string]interface{} `json:"requestBody"`
		Responses   map[string]interface{}            `json:"responses"`
	}
	docs := map[string]map[string]map[string]op{}
	names, versions := s.kinds.groups()
	sort.Strings(names)
	for _, k := range s.kinds.All() {
		if k.Virtual {
			continue // only created
		}
		for _, v := range k.Versions() {
			prefix := "apis/" + k.Group + "/" + v
			if k.Group == "" {
				prefix = "api/" + v
			}
			content := map[string]interface{}{
				"application/json-patch+json":  map[string]interface{}{},
				"application/merge-patch+json": map[string]interface{}{},
			}
			if k.Group == "" || k.Group == "node.k8s.io" {
				// Built-in kinds: kubectl computes strategic merge
				// patches for them from its own types.
				content = map[string]interface{}{"application/json-patch+json": map[string]interface{}{}, "application/merge-patch+json": map[string]interface{}{}}
			}
			p := "/" + prefix + "/" + k.Resource + "/{name}"
			if k.Namespaced {
				p = "/" + prefix + "/namespaces/{namespace}/" + k.Resource + "/{name}"
			}
			if docs[prefix] == nil {
				docs[prefix] = map[string]map[string]op{}
			}
			docs[prefix][p] = map[string]op{"patch": {
				GVK:         map[string]string{"group": k.Group, "version": v, "kind": k.Kind},
				Parameters:  []param{{Name: "fieldValidation", In: "query", Schema: map[string]string{"type": "string"}}, {Name: "dryRun", In: "query", Schema: map[string]string{"type": "string"}}},
				RequestBody: map[string]map[string]interface{}{"content": content},
				Responses:   map[string]interface{}{"200": map[string]string{"description": "OK"}},
			}}
		}
	}
	_ = versions
	s.openapi = map[string][]byte{}
	for prefix, paths := range docs {
		b, _ := json.Marshal(map[string]interface{}{
			"openapi": "3.0.0",
			"info":    map[string]string{"title": "knbox", "version": version.GitVersion()},
			"paths":   paths,
		})
		s.openapi[prefix] = b
	}
}
