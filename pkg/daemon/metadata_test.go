package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

func TestMetadataService(t *testing.T) {
	spec := &pod.Spec{ID: "hello-00001-abc", Labels: map[string]string{replicas.LabelNamespace: "team-a", replicas.LabelRevision: "hello-00001"},
		Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "K_SERVICE", Value: "hello"}, {Name: "K_CONFIGURATION", Value: "hello"}}}}}
	srv := httptest.NewServer(metadataHandler(metadataOf(spec), nil))
	defer srv.Close()
	get := func(path, flavor string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if flavor != "" {
			req.Header.Set("Metadata-Flavor", flavor)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/instance", ""); code != http.StatusForbidden {
		t.Errorf("without Metadata-Flavor: %d, want 403", code)
	}
	code, body := get("/v1/instance", "knbox")
	var m instanceMetadata
	if err := json.Unmarshal([]byte(body), &m); code != 200 || err != nil {
		t.Fatalf("GET /v1/instance: %d %v %s", code, err, body)
	}
	if m.Namespace != "team-a" || m.Service != "hello" || m.Configuration != "hello" || m.Revision != "hello-00001" ||
		m.Instance != "hello-00001-abc" || m.Zone != "local" {
		t.Errorf("metadata %+v", m)
	}
	if code, body := get("/v1/instance/service", "Google"); code != 200 || body != "hello" {
		t.Errorf("service: %d %q", code, body)
	}
	if code, _ := get("/v1/instance/secret", "knbox"); code != http.StatusNotFound {
		t.Errorf("unknown field: %d", code)
	}
}

// TestMetadataIdentityToken: the metadata service hands out a token of the
// instance's ServiceAccount for an audience, signed by the API server's
// issuer, at knbox's and Cloud Run's paths; bad requests get 4xx naming
// the reason.
func TestMetadataIdentityToken(t *testing.T) {
	api := apiservertest.Start(t, "")
	kube, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve := func(sa string) *httptest.Server {
		spec := &pod.Spec{ID: "hello-00001-abc", Labels: map[string]string{replicas.LabelNamespace: "default",
			replicas.LabelRevision: "hello-00001", replicas.LabelServiceAccount: sa}}
		srv := httptest.NewServer(metadataHandler(metadataOf(spec), api.Server))
		t.Cleanup(srv.Close)
		return srv
	}
	get := func(srv *httptest.Server, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	srv := serve("ci")
	for _, path := range []string{"/v1/instance/service-accounts/default/identity", "/computeMetadata/v1/instance/service-accounts/default/identity"} {
		code, tok := get(srv, path+"?audience=https%3A%2F%2Fcallee.example&format=full")
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, tok)
		}
		parts := strings.Split(tok, ".")
		if len(parts) != 3 {
			t.Fatalf("%s: not a JWT: %q", path, tok)
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		var claims struct {
			Sub string   `json:"sub"`
			Aud []string `json:"aud"`
			Exp int64    `json:"exp"`
			Iat int64    `json:"iat"`
		}
		if err := json.Unmarshal(payload, &claims); err != nil {
			t.Fatalf("claims %s: %v", payload, err)
		}
		if claims.Sub != "system:serviceaccount:default:ci" || len(claims.Aud) != 1 || claims.Aud[0] != "https://callee.example" ||
			claims.Exp-claims.Iat != identityTokenSeconds {
			t.Errorf("%s: claims %s", path, payload)
		}
	}
	for _, tc := range []struct {
		srv  *httptest.Server
		path string
		code int
		want string
	}{
		{srv, "/v1/instance/service-accounts/default/identity", 400, "audience"},
		{srv, "/v1/instance/service-accounts/default/identity?audience=", 400, "audience"},
		{srv, "/v1/instance/service-accounts/default/identity?audience=a&audience=b", 400, "audience"},
		{serve("gone"), "/v1/instance/service-accounts/default/identity?audience=a", 404, "serviceaccount default/gone"},
		{serve(""), "/v1/instance/service-accounts/default/identity?audience=a", 404, "ServiceAccount label"},
		{srv, "/v1/instance/service-accounts/other/identity?audience=a", 404, ""},
	} {
		if code, body := get(tc.srv, tc.path); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d with %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/instance/service-accounts/default/identity?audience=a", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("without Metadata-Flavor: %d, want 403", resp.StatusCode)
	}
}

// countingIssuer counts the tokens it signs.
type countingIssuer struct {
	mu sync.Mutex
	n  int
}

func (c *countingIssuer) Issue(_ context.Context, _, _ string, aud []string, secs int64, _ *serviceaccount.BoundObject) (string, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return fmt.Sprintf("token-%d-%s", c.n, aud[0]), time.Now().Add(time.Duration(secs) * time.Second), nil
}

// TestIdentityCache: an instance asking again for the same audience gets
// the same token without a new signature; the cache keeps at most
// maxCachedIdentities audiences.
func TestIdentityCache(t *testing.T) {
	next := &countingIssuer{}
	c := &identityCache{next: next}
	ctx := context.Background()
	first, _, _ := c.Issue(ctx, "ns", "sa", []string{"a"}, 3600, nil)
	for range 100 {
		if tok, _, err := c.Issue(ctx, "ns", "sa", []string{"a"}, 3600, nil); err != nil || tok != first {
			t.Fatalf("again: %q %v, want %q", tok, err, first)
		}
	}
	if next.n != 1 {
		t.Errorf("%d signatures for one audience, want 1", next.n)
	}
	for i := range 3 * maxCachedIdentities {
		if _, _, err := c.Issue(ctx, "ns", "sa", []string{fmt.Sprint("aud-", i)}, 3600, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.toks); n > maxCachedIdentities {
		t.Errorf("%d cached audiences, want at most %d", n, maxCachedIdentities)
	}
	// Due for a refresh: signed again.
	c.toks["a"] = cachedIdentity{token: "old", expiry: time.Now().Add(time.Minute), renew: time.Now().Add(-time.Second)}
	if tok, _, _ := c.Issue(ctx, "ns", "sa", []string{"a"}, 3600, nil); tok == "old" {
		t.Errorf("a token due for refresh was handed out again")
	}
}
