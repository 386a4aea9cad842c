package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

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
