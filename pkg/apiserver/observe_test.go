package apiserver_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// /metrics is a non-resource URL behind authentication and RBAC, as on
// kube-apiserver; every request, refused ones included, is observed with
// labels from bounded sets.
func TestMetricsEndpointAndRequestRecords(t *testing.T) {
	var mu sync.Mutex
	var recs []apiserver.RequestRecord
	e := newAuthEnv(t, func(o *apiserver.Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("some_metric 1\n")) })
		o.Observe = func(r apiserver.RequestRecord) {
			mu.Lock()
			recs = append(recs, r)
			mu.Unlock()
		}
	})
	if code, body := e.do(apiservertest.Token, "GET", "/metrics", ""); code != 200 || string(body) != "some_metric 1\n" {
		t.Errorf("admin GET /metrics: %d %s", code, body)
	}
	if code, body := e.do(carolToken, "GET", "/metrics", ""); code != 403 || !strings.Contains(string(body), `cannot get path \"/metrics\"`) {
		t.Errorf("carol GET /metrics: %d %s", code, body)
	}
	if code, _ := e.do("", "GET", "/metrics", ""); code != 401 {
		t.Errorf("anonymous GET /metrics: %d", code)
	}
	// RBAC grants it: carol joins the monitoring role.
	crb := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"carol-monitoring"},` +
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:monitoring"},` +
		`"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"carol"}]}`
	if code, body := e.do(apiservertest.Token, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", crb); code != 201 {
		t.Fatalf("bind carol: %d %s", code, body)
	}
	ok := false
	for range 100 { // the authorizer's view of RBAC follows the store
		if code, _ := e.do(carolToken, "GET", "/metrics", ""); code == 200 {
			ok = true
			break
		}
		e.do(apiservertest.Token, "GET", "/version", "")
	}
	if !ok {
		t.Error("carol bound to system:monitoring still cannot get /metrics")
	}

	e.do(apiservertest.Token, "GET", "/api/v1/namespaces/team-a/configmaps", "")
	e.do(apiservertest.Token, "GET", "/api/v1/namespaces/team-a/configmaps/nope", "")
	e.do(apiservertest.Token, "GET", "/apis/bogus.example/v1/namespaces/x/things-"+strings.Repeat("x", 100), "")
	e.do(aliceToken, "GET", "/api/v1/namespaces/team-b/secrets", "")
	req, _ := http.NewRequest("FROBNICATE", e.api.URL+"/api/v1/namespaces", nil)
	req.Header.Set("Authorization", "Bearer "+apiservertest.Token)
	if resp, err := e.http.Do(req); err == nil {
		resp.Body.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	has := func(want apiserver.RequestRecord) bool {
		for _, r := range recs {
			r.Duration = 0
			if r == want {
				return true
			}
		}
		return false
	}
	for _, want := range []apiserver.RequestRecord{
		{Verb: "GET", Code: 200},
		{Verb: "GET", Code: 403},
		{Verb: "GET", Code: 401},
		{Verb: "LIST", Version: "v1", Resource: "configmaps", Scope: "namespace", Code: 200},
		{Verb: "GET", Version: "v1", Resource: "configmaps", Scope: "resource", Code: 404},
		{Verb: "LIST", Scope: "namespace", Code: 404}, // an unknown resource is not a label value
		{Verb: "LIST", Version: "v1", Resource: "secrets", Scope: "namespace", Code: 403},
		{Verb: "POST", Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings", Scope: "cluster", Code: 201},
	} {
		if !has(want) {
			t.Errorf("no record %+v in %+v", want, recs)
		}
	}
	for _, r := range recs {
		if strings.Contains(r.Resource, "things") || strings.Contains(r.Group, "bogus") || r.Verb == "FROBNICATE" {
			t.Errorf("unbounded label in %+v", r)
		}
	}
}
