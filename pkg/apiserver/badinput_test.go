package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const svcPath = "/apis/serving.knative.dev/v1/namespaces/default/services"

// TestBadInputIsRefusedAndNothingStored sends what a confused or hostile
// client might, and checks each gets a clear 4xx Status (never a 500) and
// that nothing is stored.
func TestBadInputIsRefusedAndNothingStored(t *testing.T) {
	e := newEnv(t)
	valid := `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"ok"},"spec":{"template":{"spec":{"containers":[{"image":"img"}]}}}}`
	huge := `{"metadata":{"name":"big","annotations":{"a":"` + strings.Repeat("x", 4<<20) + `"}}}`
	cases := []struct {
		name, method, path, ctype, body string
		code                            int
		msg                             string
	}{
		{"malformed json", "POST", svcPath, "application/json", `{"metadata":`, 400, "not a JSON object"},
		{"json array", "POST", svcPath, "application/json", `[1,2]`, 400, ""},
		{"wrong type of field", "POST", svcPath, "application/json", `{"metadata":{"name":5}}`, 400, "cannot be handled"},
		{"malformed yaml", "POST", svcPath, "application/yaml", "metadata: [\n", 400, "not valid YAML"},
		{"duplicate yaml keys", "POST", svcPath, "application/yaml", "metadata:\n  name: a\n  name: b\n", 400, ""},
		{"wrong kind", "POST", svcPath, "application/json", strings.Replace(valid, `"Service"`, `"Route"`, 1), 400, "does not match the expected kind"},
		{"wrong apiVersion", "POST", svcPath, "application/json", strings.Replace(valid, "serving.knative.dev/v1", "apps/v1", 1), 400, "does not match the expected API version"},
		{"unknown field, strict", "POST", svcPath + "?fieldValidation=Strict", "application/json", strings.Replace(valid, `"spec":{`, `"spec":{"bogus":1,`, 1), 400, `unknown field "spec.bogus"`},
		{"two containers with ports", "POST", svcPath, "application/json", strings.Replace(valid, `[{"image":"img"}]`, `[{"name":"a","image":"img","ports":[{"containerPort":8080}]},{"name":"b","image":"img","ports":[{"containerPort":9090}]}]`, 1), 422, "more than one container port is set"},
		{"two containers without a port", "POST", svcPath, "application/json", strings.Replace(valid, `[{"image":"img"}]`, `[{"name":"a","image":"img"},{"name":"b","image":"img"}]`, 1), 422, "validation failed: missing field(s): spec.template.spec.containers[*].ports"},
		{"invalid name", "POST", svcPath, "application/json", strings.Replace(valid, `"ok"`, `"Not_OK"`, 1), 422, "metadata.name"},
		{"other namespace in body", "POST", svcPath, "application/json", strings.Replace(valid, `"name":"ok"`, `"name":"ok","namespace":"other"`, 1), 400, "does not match the namespace"},
		{"huge body", "POST", svcPath, "application/json", huge, 413, "limit is"},
		{"unsupported media type", "POST", svcPath, "text/plain", valid, 415, "unknown format"},
		{"protobuf only", "POST", svcPath, "application/vnd.kubernetes.protobuf", valid, 415, ""},
		{"bad label selector", "GET", svcPath + "?labelSelector=a%3D%3D%3Db", "", "", 400, ""},
		{"bad fieldValidation", "POST", svcPath + "?fieldValidation=Maybe", "application/json", valid, 400, "fieldValidation"},
		{"bad dryRun", "POST", svcPath + "?dryRun=Some", "application/json", valid, 400, "dryRun"},
		{"unknown resource", "GET", "/apis/serving.knative.dev/v1/namespaces/default/widgets", "", "", 404, ""},
		{"unknown version", "GET", "/apis/serving.knative.dev/v9/namespaces/default/services", "", "", 404, ""},
		{"unknown subresource", "GET", svcPath + "/x/scale", "", "", 404, ""},
		{"post to a name", "POST", svcPath + "/x", "application/json", valid, 405, ""},
		{"put without resourceVersion", "PUT", svcPath + "/ok", "application/json", valid, 404, ""},
		{"patch of missing", "PATCH", svcPath + "/missing", "application/merge-patch+json", `{}`, 404, ""},
		{"bad watch rv", "GET", svcPath + "?watch=true&resourceVersion=abc", "", "", 400, "resourceVersion"},
		{"bad propagation", "DELETE", svcPath + "/x?propagationPolicy=Sideways", "", "", 422, ""},
		{"not acceptable", "GET", svcPath, "", "", 406, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := []string{}
			if c.name == "not acceptable" {
				hdr = []string{"Accept", "application/vnd.kubernetes.protobuf"}
			}
			code, body := e.do(c.method, c.path, c.ctype, []byte(c.body), hdr...)
			if code != c.code {
				t.Fatalf("code %d, want %d: %.300s", code, c.code, body)
			}
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || int(st.Code) != code {
				t.Fatalf("not a Status: %v %.300s", err, body)
			}
			if !strings.Contains(st.Message, c.msg) {
				t.Errorf("message %q lacks %q", st.Message, c.msg)
			}
		})
	}
	list, err := e.serving.ServingV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("refused requests stored %d services", len(list.Items))
	}
	// The huge body did not poison anything: a valid request still works.
	if code, body := e.do("POST", svcPath, "application/json", []byte(valid)); code != http.StatusCreated {
		t.Errorf("valid create after refusals: %d %s", code, body)
	}
}

func TestFieldValidationWarnAndIgnore(t *testing.T) {
	e := newEnv(t)
	body := `{"metadata":{"name":"%s"},"bogus":true,"spec":{"template":{"spec":{"containers":[{"image":"img"}]}}}}`
	// Without fieldValidation: dropped with a warning, as a CRD endpoint does.
	dreq, _ := http.NewRequest("POST", e.url+svcPath, strings.NewReader(strings.Replace(body, "%s", "dflt", 1)))
	dreq.Header.Set("Authorization", "Bearer "+testToken)
	dreq.Header.Set("Content-Type", "application/json")
	dresp, err := e.http.Do(dreq)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(dresp.Body)
	dresp.Body.Close()
	if dresp.StatusCode != 201 || strings.Contains(string(b), "bogus") || !strings.Contains(strings.Join(dresp.Header.Values("Warning"), " "), `unknown field \"bogus\"`) {
		t.Errorf("default: %d %s, warnings %v", dresp.StatusCode, b, dresp.Header.Values("Warning"))
	}
	code, b := e.do("POST", svcPath+"?fieldValidation=Ignore", "application/json", []byte(strings.Replace(body, "%s", "ign", 1)))
	if code != 201 {
		t.Errorf("Ignore: %d %s", code, b)
	}
	req, _ := http.NewRequest("POST", e.url+svcPath+"?fieldValidation=Warn", strings.NewReader(strings.Replace(body, "%s", "warn", 1)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || !strings.Contains(strings.Join(resp.Header.Values("Warning"), " "), "bogus") {
		t.Errorf("Warn: %d warnings %v", resp.StatusCode, resp.Header.Values("Warning"))
	}
}

func TestDryRunStoresNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("dry", "img"), metav1.CreateOptions{DryRun: []string{"All"}})
	if err != nil || s.Spec.Template.Spec.TimeoutSeconds == nil {
		t.Fatalf("dry run create: %v (defaults applied: %v)", err, s)
	}
	if _, err := e.serving.ServingV1().Services("default").Get(ctx, "dry", metav1.GetOptions{}); err == nil {
		t.Error("dry run stored the object")
	}
}
