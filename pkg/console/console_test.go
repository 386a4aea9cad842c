package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

const viewerToken = "viewer-token-0123"

var bounds = []float64{5, 10, 20, 40, 80}

// fixture is a real API server with a Service, its Revisions and their
// logs, and a console in front of it.
type fixture struct {
	t      *testing.T
	env    *apiservertest.Env
	con    *Console
	url    string
	totals []Totals
}

func start(t *testing.T, o Options) *fixture {
	t.Helper()
	env := apiservertest.StartWith(t, apiservertest.Options{
		Users: map[string]admission.User{viewerToken: {Name: "viewer", Groups: []string{"team"}}},
		Server: func(so *apiserver.Options) {
			so.Logs = func(_ context.Context, w io.Writer, ns, rev string, _ apiserver.LogOptions) error {
				for i := range 3 {
					fmt.Fprintf(w, "%s/%s line %d <b>\n", ns, rev, i)
				}
				return nil
			}
		},
	})
	ctx := context.Background()
	sc := servingclient.NewForConfigOrDie(env.Config)
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: servingv1.ServiceSpec{ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
			Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: "example.com/hello@sha256:" + strings.Repeat("a", 64)}}}}}}}}
	svc, err := sc.ServingV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hello-00001", "hello-00002"} {
		rev := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{"serving.knative.dev/service": "hello"}},
			Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: "example.com/hello@sha256:" + strings.Repeat("a", 64)}}}}}
		if _, err := sc.ServingV1().Revisions("default").Create(ctx, rev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := apis.ParseURL("http://hello.default.localhost:8080")
	tu, _ := apis.ParseURL("http://canary-hello.default.localhost:8080")
	svc.Status = servingv1.ServiceStatus{
		Status: duckv1.Status{Conditions: duckv1.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionTrue}}},
		RouteStatusFields: servingv1.RouteStatusFields{URL: u, Traffic: []servingv1.TrafficTarget{
			{RevisionName: "hello-00001", Percent: ptr.Int64(70), LatestRevision: ptr.Bool(false)},
			{RevisionName: "hello-00002", Percent: ptr.Int64(30), Tag: "canary", URL: tu, LatestRevision: ptr.Bool(true)},
		}},
	}
	if _, err := sc.ServingV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, env: env}
	o.API = env.Server.Handler()
	o.Totals = func() ([]Totals, error) { return f.totals, nil }
	o.LatencyBounds = bounds
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	f.con, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(Mount(f.con, o.API))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

// client is a browser: a cookie jar, redirects followed, the test
// server's certificate trusted.
func (f *fixture) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: httptestTLS(f)}}
	return c
}

func (f *fixture) get(c *http.Client, path string, hdr ...string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) login(c *http.Client, token string) (int, string, *http.Response) {
	f.t.Helper()
	resp, err := c.PostForm(f.url+"/console/login", url.Values{"token": {token}})
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

func mustContain(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("page lacks %q:\n%s", w, body)
		}
	}
}

func TestConsole(t *testing.T) {
	f := start(t, Options{})
	c := f.client()

	// Signed out: every page sends to the sign-in form.
	code, body := f.get(c, "/console/")
	if code != 200 || !strings.Contains(body, `id="login"`) {
		t.Fatalf("signed out: %d %s", code, body)
	}
	for _, tt := range []struct {
		token string
		code  int
		want  string
	}{
		{"", 400, "token: required"},
		{"has space", 400, "token: may hold only printable ASCII"},
		{strings.Repeat("x", maxTokenBytes+1), 400, "token: longer than"},
		{"wrong-token", 401, "token: the API refused it"},
	} {
		code, body, _ := f.login(c, tt.token)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("login %.20q: %d, want %d with %q:\n%s", tt.token, code, tt.code, tt.want, body)
		}
	}

	// Signed in: the cookie is HttpOnly, Secure, SameSite=Strict.
	code, body, resp := f.login(c, apiservertest.Token)
	if code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	var set string
	for r := resp; r != nil; r = r.Request.Response {
		if v := r.Header.Get("Set-Cookie"); v != "" {
			set = v
		}
	}
	for _, attr := range []string{"HttpOnly", "Secure", "SameSite=Strict", "Path=/console/"} {
		if !strings.Contains(set, attr) {
			t.Errorf("session cookie %q lacks %s", set, attr)
		}
	}
	mustContain(t, body, `id="services"`, `data-name="hello"`, "http://hello.default.localhost:8080", "Ready", `id="user">admin<`, `<option value="default" selected>`)

	// The Service: traffic with percent and tags, its revisions, graphs.
	f.totals = []Totals{{Namespace: "default", Revision: "hello-00001", Requests: 0, Latency: []uint64{0, 0, 0, 0, 0, 0}, Instances: 1}}
	t0 := time.Now()
	f.con.samples.sample(t0)
	f.totals = []Totals{{Namespace: "default", Revision: "hello-00001", Requests: 20, Latency: []uint64{2, 10, 18, 20, 20, 20}, Instances: 2}}
	f.con.samples.sample(t0.Add(2 * time.Second))
	code, body = f.get(c, "/console/namespaces/default/services/hello")
	if code != 200 {
		t.Fatalf("service page: %d %s", code, body)
	}
	mustContain(t, body, `id="traffic"`, "70%", "30%", `<span class="tag">canary</span>`, "http://canary-hello.default.localhost:8080",
		`class="card revision" data-name="hello-00001"`, `data-name="hello-00002"`,
		`data-series="rate" data-points="2" data-max="10"`, `data-series="instances" data-points="2" data-max="2"`, "10 req/s")
	mustContain(t, body, `id="events"`, "No events.")
	if strings.Index(body, `data-name="hello-00002"`) > strings.Index(body, `data-name="hello-00001"`) && strings.Contains(body, `data-name="hello-00001"`) {
		// Both created within a second: newest by name first.
		t.Log("revisions in order")
	}

	// The log tail, escaped.
	code, body = f.get(c, "/console/namespaces/default/revisions/hello-00001/log")
	if code != 200 {
		t.Fatalf("log: %d %s", code, body)
	}
	mustContain(t, body, "default/hello-00001 line 2 &lt;b&gt;")

	// Hostile paths and queries: 400 or 404 naming what is wrong.
	for path, want := range map[string]string{
		"/console/?namespace=No_Such":                    "namespace: &#34;No_Such&#34;",
		"/console/namespaces/BAD/services/hello":         "namespace &#34;BAD&#34;",
		"/console/namespaces/default/services/a..b":      "name &#34;a..b&#34;",
		"/console/namespaces/default/secrets/x":          "no page",
		"/console/namespaces/default/services/nope":      "not found",
		"/console/namespaces/default/revisions/nope/log": "not found",
		"/console/static/../console.go":                  "",
	} {
		code, body := f.get(c, path)
		if code < 400 || code > 499 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 4xx with %q:\n%.400s", path, code, want, body)
		}
	}
	code, _ = f.get(c, "/console/static/style.css")
	if code != 200 {
		t.Errorf("style.css: %d", code)
	}

	// Sign out: the session is gone.
	req, _ := http.NewRequest(http.MethodPost, f.url+"/console/logout", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, body := f.get(c, "/console/"); code != 200 || !strings.Contains(body, `id="login"`) {
		t.Errorf("after sign-out: %d", code)
	}
}

// TestRBAC: a user RBAC grants nothing sees 403 with the API's reason and
// no graphs; the kubeconfig's token works as an Authorization header.
func TestRBAC(t *testing.T) {
	f := start(t, Options{})
	c := f.client()
	if code, body, _ := f.login(c, viewerToken); code != 403 || !strings.Contains(body, `User &#34;viewer&#34; cannot list resource &#34;services&#34;`) ||
		!strings.Contains(body, `id="namespace"`) || strings.Contains(body, "hello") {
		t.Errorf("viewer: %d\n%s", code, body)
	}
	plain := f.client()
	code, body := f.get(plain, "/console/namespaces/default/services/hello", "Authorization", "Bearer "+apiservertest.Token)
	if code != 200 || !strings.Contains(body, `id="service-name">hello<`) {
		t.Errorf("with the Authorization header: %d\n%.400s", code, body)
	}
	if code, _ := f.get(plain, "/console/", "Authorization", "Bearer nope"); code != 200 {
		// A refused header token sends to the sign-in form.
		t.Errorf("refused header token: %d", code)
	}
	if got := f.con.canReadMetrics(context.Background(), viewerToken); got {
		t.Error("viewer may read /metrics")
	}
	if got := f.con.canReadMetrics(context.Background(), apiservertest.Token); !got {
		t.Error("admin may not read /metrics")
	}
}

// TestMaxSessions: sign-ins beyond the bound are refused with 503.
func TestMaxSessions(t *testing.T) {
	f := start(t, Options{MaxSessions: 1})
	if code, _, _ := f.login(f.client(), apiservertest.Token); code != 200 {
		t.Fatalf("first sign-in: %d", code)
	}
	if code, body, _ := f.login(f.client(), apiservertest.Token); code != 503 || !strings.Contains(body, "maxSessions") {
		t.Fatalf("second sign-in: %d\n%s", code, body)
	}
}

// TestLoginCSRF: a sign-in posted from another site's page is refused.
func TestLoginCSRF(t *testing.T) {
	f := start(t, Options{})
	req, _ := http.NewRequest(http.MethodPost, f.url+"/console/login", strings.NewReader(url.Values{"token": {apiservertest.Token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "another site") || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("cross-site sign-in: %d %s", resp.StatusCode, b)
	}
	// The console's own page: Origin is the console's (the Referrer-Policy
	// keeps browsers from sending "null").
	req, _ = http.NewRequest(http.MethodPost, f.url+"/console/login", strings.NewReader(url.Values{"token": {apiservertest.Token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.url)
	c := f.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Set-Cookie") == "" || resp.Header.Get("Referrer-Policy") != "same-origin" {
		t.Fatalf("same-origin sign-in: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestEvents: the Service's page lists the Events of the Service, its
// Revisions and their instances, newest first, from the API.
func TestEvents(t *testing.T) {
	f := start(t, Options{})
	now := time.Now()
	kube := kubernetes.NewForConfigOrDie(f.env.Config)
	for _, e := range []struct {
		kind, name, reason, typ string
		ago                     time.Duration
	}{
		{"Service", "hello", "Created", "Normal", 3 * time.Minute},
		{"Pod", "hello-00001-deployment-abcde", "Started", "Warning", time.Minute},
		{"Service", "other", "Elsewhere", "Normal", time.Second},
	} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "ev-", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: e.kind, Name: e.name, Namespace: "default"}, Reason: e.reason, Type: e.typ,
			Message: e.reason + " <i>", FirstTimestamp: metav1.NewTime(now.Add(-e.ago)), LastTimestamp: metav1.NewTime(now.Add(-e.ago)), Count: 1,
			Source: corev1.EventSource{Component: "test"}}
		if _, err := kube.CoreV1().Events("default").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	code, body := f.get(f.client(), "/console/namespaces/default/services/hello", "Authorization", "Bearer "+apiservertest.Token)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	mustContain(t, body, `id="events"`, "pod/hello-00001-deployment-abcde", "Started &lt;i&gt;", "service/hello")
	if strings.Contains(body, "Elsewhere") || strings.Index(body, "Started") > strings.Index(body, "Created") {
		t.Errorf("events of other objects, or not newest first:\n%s", body)
	}
}
