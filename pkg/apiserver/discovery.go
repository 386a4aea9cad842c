package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"runtime"

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
