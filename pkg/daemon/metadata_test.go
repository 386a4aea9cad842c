package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
)

func TestMetadataService(t *testing.T) {
	spec := &pod.Spec{ID: "hello-00001-abc", Labels: map[string]string{replicas.LabelNamespace: "team-a", replicas.LabelRevision: "hello-00001"},
		Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "K_SERVICE", Value: "hello"}, {Name: "K_CONFIGURATION", Value: "hello"}}}}}
	srv := httptest.NewServer(metadataHandler(metadataOf(spec)))
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
