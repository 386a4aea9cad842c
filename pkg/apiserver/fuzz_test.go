package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/store"
)

var fuzzPaths = []string{
	"/apis/serving.knative.dev/v1/namespaces/default/services",
	"/apis/serving.knative.dev/v1/namespaces/default/services/hello",
	"/apis/serving.knative.dev/v1/namespaces/default/services/hello/status",
	"/apis/serving.knative.dev/v1alpha1/namespaces/default/services",
	"/apis/serving.knative.dev/v1alpha1/namespaces/default/services/hello",
	"/apis/serving.knative.dev/v1/namespaces/default/configurations",
	"/apis/serving.knative.dev/v1alpha1/namespaces/default/revisions",
	"/apis/serving.knative.dev/v1/namespaces/default/routes/hello",
	"/apis/node.k8s.io/v1/runtimeclasses",
	"/api/v1/namespaces",
	"/api/v1/namespaces/default/secrets",
	"/api/v1/namespaces/default/configmaps/c",
	"/api/v1/namespaces/default/events",
	"/api/v1/namespaces/default/events/e",
	"/apis/events.k8s.io/v1/namespaces/default/events",
	"/apis/events.k8s.io/v1/namespaces/default/events/e",
}

var fuzzTypes = []string{"application/json", "application/yaml", "application/merge-patch+json",
	"application/json-patch+json", "application/strategic-merge-patch+json", "text/plain"}

var fuzzMethods = []string{"POST", "PUT", "PATCH", "GET", "DELETE"}

// FuzzRequest sends arbitrary bodies to every write path of the API. The
// server must never answer 500, must always answer with a Status on
// failure, and a refused request must not change the store.
func FuzzRequest(f *testing.F) {
	seeds := []string{
		`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello"},"spec":{"template":{"spec":{"containers":[{"image":"img"}]}}}}`,
		`{"apiVersion":"serving.knative.dev/v1alpha1","kind":"Service","metadata":{"name":"hello"},"spec":{"runLatest":{"configuration":{"revisionTemplate":{"spec":{"container":{"image":"img"}}}}}}}`,
		`{"apiVersion":"serving.knative.dev/v1alpha1","kind":"Service","metadata":{"name":"hello"},"spec":{"release":{"revisions":["a","@latest"],"rolloutPercent":10,"configuration":{"revisionTemplate":{"spec":{"container":{"image":"img"}}}}}}}`,
		`{"metadata":{"name":"c"},"data":{"a":"b"}}`,
		`{"metadata":{"name":"gvisor"},"handler":"runsc"}`,
		`{"metadata":{"name":"e"},"involvedObject":{"kind":"Service","name":"hello","namespace":"default"},"reason":"Created","message":"m","type":"Normal","count":2}`,
		`{"metadata":{"name":"e"},"eventTime":"2026-01-01T00:00:00.000000Z","reportingController":"a/b","reportingInstance":"i","action":"Run","reason":"R","regarding":{"name":"x"},"note":"n","type":"Warning","series":{"count":2,"lastObservedTime":"2026-01-01T00:00:00.000000Z"}}`,
		`[{"op":"replace","path":"/metadata/labels","value":{"a":"b"}}]`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"user-container","image":""}]}}}}`,
		"metadata:\n  name: hello\n",
		`{"metadata":{"name":"x","ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"default","uid":"u"}]}}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), uint8(i), uint8(i), []byte(s))
	}
	dir := f.TempDir()
	st, err := store.Open(filepath.Join(dir, "fuzz.db"), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	// Events live long here: the TTL sweep writes in the background, which
	// the check that refused requests change nothing would take for theirs.
	srv, err := apiserver.New(apiserver.Options{Store: st, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: servingConfig(f)}, Limits: apiserver.Limits{EventTTL: 1000 * time.Hour}})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, m, p, ct uint8, body []byte) {
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		req := httptest.NewRequest(method, fuzzPaths[int(p)%len(fuzzPaths)], bytes.NewReader(body))
		req.Header.Set("Content-Type", fuzzTypes[int(ct)%len(fuzzTypes)])
		before := st.Revision()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code := rec.Code
		if code >= 500 {
			t.Fatalf("%s %s (%s): %d %s", method, req.URL.Path, req.Header.Get("Content-Type"), code, rec.Body.String())
		}
		if code >= 400 {
			var s metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Message == "" {
				t.Fatalf("%d without a Status: %s", code, rec.Body.String())
			}
			if code != http.StatusNotFound && st.Revision() != before {
				// A refused write may not store anything. (Deletes
				// that found nothing are 404.)
				t.Fatalf("refused request (%d %s) changed the store", code, s.Message)
			}
		}
	})
}

// FuzzTenantRequest sends arbitrary requests (method, path, query, body) as
// a tenant who may edit namespace "mine" only. Whatever the request, the
// tenant never reads what namespace "theirs" holds (a secret marked
// TOPSECRET, a Service named topsecret), never changes anything outside
// "mine", and never gets a 500.
func FuzzTenantRequest(f *testing.F) {
	for _, s := range []struct{ m, p, q, b string }{
		{"GET", "/api/v1/namespaces/theirs/secrets", "", ""},
		{"GET", "/api/v1/namespaces/mine/secrets", "watch=1", ""},
		{"GET", "/api/v1/watch/secrets", "", ""},
		{"GET", "/apis/serving.knative.dev/v1/namespaces/mine/services", "fieldSelector=metadata.namespace%3Dtheirs", ""},
		{"DELETE", "/api/v1/namespaces/mine/secrets", "labelSelector=a", ""},
		{"POST", "/api/v1/namespaces/mine/serviceaccounts/default/token", "", `{"spec":{}}`},
		{"POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/mine/rolebindings", "", `{"metadata":{"name":"x"},"roleRef":{"kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","name":"alice"}]}`},
		{"PATCH", "/api/v1/namespaces/theirs", "", `{"metadata":{"labels":{"a":"b"}}}`},
		{"GET", "/apis/serving.knative.dev/v1/namespaces/theirs/revisions/r/log", "", ""},
		{"GET", "/api/v1/namespaces//secrets", "", ""},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "", `{"spec":{"namespace":"theirs"}}`},
	} {
		f.Add(s.m, s.p, s.q, []byte(s.b))
	}
	dir := f.TempDir()
	st, err := store.Open(filepath.Join(dir, "fuzz.db"), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv, err := apiserver.New(apiserver.Options{Store: st, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: servingConfig(f)},
		Authenticate: func(h string) (admission.User, bool) {
			switch h {
			case "Bearer admin":
				return admission.User{Name: "admin", Groups: []string{"system:masters"}}, true
			case "Bearer alice":
				return admission.User{Name: "alice"}, true
			}
			return admission.User{}, false
		}})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	admin := func(method, path, body string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer admin")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			f.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
	}
	admin("POST", "/api/v1/namespaces", `{"metadata":{"name":"mine"}}`)
	admin("POST", "/api/v1/namespaces", `{"metadata":{"name":"theirs"}}`)
	admin("POST", "/api/v1/namespaces/theirs/secrets", `{"metadata":{"name":"s"},"stringData":{"k":"TOPSECRET"}}`)
	admin("POST", "/apis/serving.knative.dev/v1/namespaces/theirs/services", `{"metadata":{"name":"topsecret"},"spec":{"template":{"spec":{"containers":[{"image":"img"}]}}}}`)
	admin("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/mine/rolebindings", `{"metadata":{"name":"alice"},"roleRef":{"kind":"ClusterRole","name":"admin"},"subjects":[{"kind":"User","name":"alice"}]}`)
	// The server makes the namespaces' default service accounts on its
	// own; let it finish before comparing.
	for _, ns := range []string{"mine", "theirs"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := st.Get(store.Key{Resource: "serviceaccounts", Namespace: ns, Name: "default"}); err == nil {
				break
			}
			if time.Now().After(deadline) {
				f.Fatalf("no default service account in %s", ns)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	outside := func() map[store.Key]int64 {
		out := map[store.Key]int64{}
		for _, k := range apiserver.DefaultKinds(apiserver.SeedVersions()).All() {
			entries, _, err := st.List(k.GroupResource().String(), "")
			if err != nil {
				f.Fatal(err)
			}
			for _, e := range entries {
				if e.Key.Namespace != "mine" && !(k.Resource == "namespaces" && e.Key.Name == "mine") {
					out[e.Key] = e.Revision
				}
			}
		}
		return out
	}
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		u, err := url.Parse(path)
		if err != nil || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#") || !validMethod(method) {
			return
		}
		u.RawQuery = query
		before := outside()
		reqCtx, done := context.WithTimeout(ctx, 20*time.Millisecond) // bounds watches and log streams
		defer done()
		req := httptest.NewRequest("GET", "/", bytes.NewReader(body)).WithContext(reqCtx)
		req.Method, req.URL, req.RequestURI = method, u, u.RequestURI()
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", method, u, rec.Code, rec.Body)
		}
		if b := rec.Body.String(); strings.Contains(b, "TOPSECRET") || strings.Contains(b, "VE9QU0VDUkVU") || strings.Contains(b, `"topsecret"`) {
			t.Fatalf("%s %s leaked another namespace: %d %.300s", method, u, rec.Code, b)
		}
		if after := outside(); !maps.Equal(before, after) {
			t.Fatalf("%s %s (%d) changed objects outside the tenant's namespace", method, u, rec.Code)
		}
	})
}

func validMethod(m string) bool {
	switch m {
	case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS":
		return true
	}
	return false
}

var applyPaths = []string{
	"/apis/serving.knative.dev/v1/namespaces/default/services/hello",
	"/apis/serving.knative.dev/v1/namespaces/default/services/hello/status",
	"/apis/serving.knative.dev/v1/namespaces/default/routes/hello",
	"/apis/serving.knative.dev/v1alpha1/namespaces/default/services/hello",
	"/api/v1/namespaces/default/configmaps/c",
	"/api/v1/namespaces/default/secrets/c",
	"/apis/rbac.authorization.k8s.io/v1/clusterroles/c",
}

// FuzzApplyPatch sends arbitrary apply configurations (YAML or JSON) as
// server-side apply requests, by several managers with and without force.
// The server never answers 500, answers a Status on failure, and a refused
// apply stores nothing.
func FuzzApplyPatch(f *testing.F) {
	for i, s := range []string{
		"apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - image: img\n",
		`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello","labels":{"a":"b"}},"spec":{"traffic":[{"latestRevision":true,"percent":100}]}}`,
		`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello"},"status":{"observedGeneration":1}}`,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"1\"\n",
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c"},"stringData":{"k":"v"}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"c"},"rules":[{"verbs":["get"],"resources":["x"],"apiGroups":[""]}]}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"x"}]}}`,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  name: d\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":1}}`,
		"[]",
	} {
		f.Add(uint8(i), uint8(i), []byte(s))
	}
	dir := f.TempDir()
	st, err := store.Open(filepath.Join(dir, "fuzz.db"), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv, err := apiserver.New(apiserver.Options{Store: st, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: servingConfig(f)}})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	queries := []string{"fieldManager=a", "fieldManager=b", "fieldManager=b&force=true", "fieldManager=a&fieldValidation=Strict", "fieldManager=a&dryRun=All", ""}
	f.Fuzz(func(t *testing.T, p, q uint8, body []byte) {
		path := applyPaths[int(p)%len(applyPaths)] + "?" + queries[int(q)%len(queries)]
		req := httptest.NewRequest("PATCH", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/apply-patch+yaml")
		before := st.Revision()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("PATCH %s: %d %s", path, rec.Code, rec.Body.String())
		}
		if rec.Code >= 400 {
			var s metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Message == "" {
				t.Fatalf("%d without a Status: %s", rec.Code, rec.Body.String())
			}
			if st.Revision() != before {
				t.Fatalf("refused apply (%d %s) changed the store", rec.Code, s.Message)
			}
		}
	})
}
