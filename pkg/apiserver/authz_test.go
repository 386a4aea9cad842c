package apiserver_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// authEnv is a server with an administrator and two tenants: alice, who
// may edit team-a, and bob, admin of team-b.
type authEnv struct {
	t     *testing.T
	api   *apiservertest.Env
	admin *kubernetes.Clientset
	http  *http.Client
}

const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
	carolToken = "carol-token" // bound to nothing
)

func newAuthEnv(t *testing.T, adjust func(*apiserver.Options)) *authEnv {
	t.Helper()
	api := apiservertest.StartWith(t, apiservertest.Options{
		Users: map[string]admission.User{
			aliceToken: {Name: "alice", UID: "a", Groups: []string{"developers"}},
			bobToken:   {Name: "bob", UID: "b"},
			carolToken: {Name: "carol", UID: "c"},
		},
		Server: adjust,
	})
	e := &authEnv{t: t, api: api}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(api.CAPEM)
	e.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	e.admin = e.kube(apiservertest.Token)
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.bind("team-a", "alice-edit", "edit", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"})
	e.bind("team-b", "bob-admin", "admin", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "bob"})
	return e
}

func (e *authEnv) kube(token string) *kubernetes.Clientset {
	e.t.Helper()
	c, err := kubernetes.NewForConfig(e.api.ConfigFor(token))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *authEnv) serving(token string) *servingclient.Clientset {
	e.t.Helper()
	c, err := servingclient.NewForConfig(e.api.ConfigFor(token))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *authEnv) bind(ns, name, clusterRole string, subjects ...rbacv1.Subject) {
	e.t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: clusterRole}, Subjects: subjects}
	if _, err := e.admin.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// do sends a raw request as token ("" for none).
func (e *authEnv) do(token, method, path, body string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.api.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	switch method {
	case http.MethodPatch:
		req.Header.Set("Content-Type", "application/merge-patch+json")
	case http.MethodPost, http.MethodPut:
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

const ksvcBody = `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"s"},"spec":{"template":{"spec":{"containers":[{"image":"img"}]}}}}`

// TestEveryRequestIsAuthorized drives raw requests of every verb, kind,
// subresource and URL as the tenants and checks who gets what.
func TestEveryRequestIsAuthorized(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := e.serving(apiservertest.Token).ServingV1().Services(ns).Create(ctx, ksvcIn("", "s"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "v"}}
		if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const kn = "/apis/serving.knative.dev/v1/namespaces/"
	for _, c := range []struct {
		token, method, path, body string
		code                      int
	}{
		// alice in her namespace
		{aliceToken, "GET", kn + "team-a/services", "", 200},
		{aliceToken, "GET", kn + "team-a/services?watch=true&timeoutSeconds=1", "", 200},
		{aliceToken, "GET", kn + "team-a/services/s", "", 200},
		{aliceToken, "PATCH", kn + "team-a/services/s", `{"metadata":{"labels":{"a":"b"}}}`, 200},
		{aliceToken, "POST", kn + "team-a/services", strings.Replace(ksvcBody, `"s"`, `"s2"`, 1), 201},
		{aliceToken, "DELETE", kn + "team-a/services/s2", "", 200},
		{aliceToken, "GET", "/api/v1/namespaces/team-a/secrets/s", "", 200},
		{aliceToken, "GET", "/api/v1/namespaces/team-a", "", 200},
		// ... and nowhere else: reads, writes, watches, logs, status
		{aliceToken, "GET", kn + "team-b/services", "", 403},
		{aliceToken, "GET", kn + "team-b/services/s", "", 403},
		{aliceToken, "GET", kn + "team-b/services?watch=true", "", 403},
		{aliceToken, "GET", "/apis/serving.knative.dev/v1/watch/namespaces/team-b/services", "", 403},
		{aliceToken, "GET", "/apis/serving.knative.dev/v1/watch/namespaces/team-b/services/s", "", 403},
		{aliceToken, "GET", kn + "team-b/services?fieldSelector=metadata.name%3Ds", "", 403},
		{aliceToken, "POST", kn + "team-b/services", ksvcBody, 403},
		{aliceToken, "PUT", kn + "team-b/services/s", ksvcBody, 403},
		{aliceToken, "PATCH", kn + "team-b/services/s", `{}`, 403},
		{aliceToken, "DELETE", kn + "team-b/services/s", "", 403},
		{aliceToken, "DELETE", kn + "team-b/services", "", 403},
		{aliceToken, "PUT", kn + "team-b/services/s/status", ksvcBody, 403},
		{aliceToken, "GET", kn + "team-b/revisions/r/log", "", 403},
		{aliceToken, "GET", "/api/v1/namespaces/team-b/secrets/s", "", 403},
		{aliceToken, "GET", "/api/v1/namespaces/team-b/secrets", "", 403},
		{aliceToken, "GET", "/api/v1/secrets", "", 403},
		{aliceToken, "GET", "/apis/serving.knative.dev/v1/services", "", 403},
		{aliceToken, "GET", "/api/v1/namespaces/team-b", "", 403},
		{aliceToken, "DELETE", "/api/v1/namespaces/team-b", "", 403},
		{aliceToken, "DELETE", "/api/v1/namespaces/team-a", "", 403},
		// subresources nobody serves yet go through the authorizer first
		{aliceToken, "POST", "/api/v1/namespaces/team-b/pods/p/exec", "", 403},
		{aliceToken, "GET", "/api/v1/namespaces/team-b/pods/p/log", "", 403},
		{aliceToken, "POST", "/api/v1/namespaces/team-b/pods/p/portforward", "", 403},
		{aliceToken, "POST", "/api/v1/namespaces/team-a/pods/p/exec", "", 404},
		// cluster-scoped kinds and knbox's endpoints
		{aliceToken, "POST", "/apis/node.k8s.io/v1/runtimeclasses", `{"metadata":{"name":"x"},"handler":"runc"}`, 403},
		{aliceToken, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "", 403},
		{aliceToken, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{}`, 403},
		{aliceToken, "GET", "/knbox/v1/images", "", 403},
		{aliceToken, "POST", "/knbox/v1/images/prune", "", 403},
		{aliceToken, "GET", "/metrics", "", 403},
		// what every authenticated user may do
		{aliceToken, "GET", "/apis", "", 200},
		{aliceToken, "GET", "/api/v1", "", 200},
		{aliceToken, "GET", "/apis/serving.knative.dev/v1", "", 200},
		{aliceToken, "GET", "/version", "", 200},
		{aliceToken, "GET", "/openapi/v3", "", 200},
		{carolToken, "GET", "/apis", "", 200},
		{carolToken, "GET", kn + "team-a/services", "", 403},
		// bob, admin of team-b
		{bobToken, "GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/rolebindings", "", 200},
		{bobToken, "GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings", "", 403},
		{bobToken, "DELETE", "/api/v1/namespaces/team-b", "", 403},
		// no or bad credentials
		{"", "GET", "/healthz", "", 200},
		{"", "GET", "/readyz", "", 200},
		{"", "GET", "/version", "", 200},
		{"", "GET", "/apis", "", 401},
		{"", "GET", kn + "team-a/services", "", 401},
		{"nope", "GET", "/healthz", "", 401},
		{"nope", "GET", kn + "team-a/services", "", 401},
		// paths that could read differently to the authorizer and the handler
		{aliceToken, "GET", kn + "team-a/../team-b/services", "", 400},
		{aliceToken, "GET", kn + "team-a/services?watch=yes", "", 400},
	} {
		t.Run(c.method+" "+c.path+" as "+c.token, func(t *testing.T) {
			code, body := e.do(c.token, c.method, c.path, c.body)
			if code != c.code {
				t.Fatalf("%d, want %d: %.300s", code, c.code, body)
			}
			if code == 403 {
				var st metav1.Status
				if err := json.Unmarshal(body, &st); err != nil || st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, "cannot") {
					t.Errorf("403 is not kube-apiserver's Forbidden: %s", body)
				}
			}
		})
	}

	// kube-apiserver's message, word for word.
	_, err := e.kube(aliceToken).CoreV1().Secrets("team-b").List(ctx, metav1.ListOptions{})
	if want := `secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "team-b"`; err == nil || err.Error() != want {
		t.Errorf("error %v\nwant  %s", err, want)
	}
	// The watch alice may open sees her namespace only.
	w, err := e.serving(aliceToken).ServingV1().Services("team-a").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := e.serving(apiservertest.Token).ServingV1().Services("team-b").Create(ctx, ksvcIn("", "other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.serving(apiservertest.Token).ServingV1().Services("team-a").Create(ctx, ksvcIn("", "mine"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			m, err := metaOf(ev.Object)
			if err != nil {
				t.Fatal(err)
			}
			if m.GetNamespace() != "team-a" {
				t.Fatalf("alice's watch saw %s/%s", m.GetNamespace(), m.GetName())
			}
			done = m.GetName() == "mine"
		case <-deadline:
			t.Fatal("alice's watch did not see her own service")
		}
	}
}

func metaOf(o interface{}) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, apierrors.NewBadRequest("not an object")
	}
	return m, nil
}

// TestResourceNames: a role with resourceNames allows those objects only,
// never a list or watch of all, but a list or watch limited to the name.
func TestResourceNames(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	for _, n := range []string{"s1", "s2"} {
		if _, err := e.admin.CoreV1().Secrets("team-b").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "one-secret"}, Rules: []rbacv1.PolicyRule{
		{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"s1"}}}}
	if _, err := e.admin.RbacV1().Roles("team-b").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol"}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "one-secret"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "carol"}}}
	if _, err := e.admin.RbacV1().RoleBindings("team-b").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const p = "/api/v1/namespaces/team-b/secrets"
	for _, c := range []struct {
		path string
		code int
	}{
		{p + "/s1", 200},
		{p + "/s2", 403},
		{p, 403},
		{p + "?watch=true", 403},
		{p + "?fieldSelector=metadata.name%3Ds1", 200},
		{p + "?fieldSelector=metadata.name%3Ds2", 403},
		{p + "?fieldSelector=metadata.name%3Ds1,metadata.name%3Ds2", 200},
		{p + "?fieldSelector=metadata.name%3Ds1&watch=true&timeoutSeconds=1", 200},
	} {
		code, body := e.do(carolToken, "GET", c.path, "")
		if code != c.code {
			t.Errorf("GET %s: %d, want %d: %.200s", c.path, code, c.code, body)
			continue
		}
		if code == 200 && strings.Contains(string(body), `"s2"`) {
			t.Errorf("GET %s leaked s2: %s", c.path, body)
		}
	}
}

func TestEscalationIsRefused(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	bob := e.kube(bobToken)
	bind := func(name, kind, role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}
	}
	// bob may hand out what he holds in team-b.
	if _, err := bob.RbacV1().RoleBindings("team-b").Create(ctx, bind("carol-edit", "ClusterRole", "edit"), metav1.CreateOptions{}); err != nil {
		t.Errorf("admin binds edit: %v", err)
	}
	// Not more.
	_, err := bob.RbacV1().RoleBindings("team-b").Create(ctx, bind("bob-root", "ClusterRole", "cluster-admin"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is attempting to grant RBAC permissions not currently held") {
		t.Errorf("binding cluster-admin: %v", err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ns-killer"}, Rules: []rbacv1.PolicyRule{
		{Verbs: []string{"delete"}, APIGroups: []string{""}, Resources: []string{"namespaces"}}}}
	if _, err := bob.RbacV1().Roles("team-b").Create(ctx, role, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("role beyond his rights: %v", err)
	}
	// A role he holds, then an update that grows it.
	role.Rules[0] = rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}
	created, err := bob.RbacV1().Roles("team-b").Create(ctx, role, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Rules = append(created.Rules, rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}})
	if _, err := bob.RbacV1().Roles("team-b").Update(ctx, created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("growing a role: %v", err)
	}
	// A binding to a role that does not exist: 404 for bob, who could not
	// hold it; created for the administrator, and it grants nothing.
	if _, err := bob.RbacV1().RoleBindings("team-b").Create(ctx, bind("dangling", "Role", "missing"), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("binding a missing role as bob: %v", err)
	}
	if _, err := e.admin.RbacV1().RoleBindings("team-a").Create(ctx, bind("dangling", "Role", "missing"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding a missing role as admin: %v", err)
	}
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "carol",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Resource: "configmaps"}}}
	got, err := e.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allowed || !strings.Contains(got.Status.Reason, `"missing" not found`) {
		t.Errorf("a dangling binding: %+v", got.Status)
	}
	// Changing a binding's role is refused, as on a cluster.
	rb, _ := e.admin.RbacV1().RoleBindings("team-a").Get(ctx, "dangling", metav1.GetOptions{})
	rb.RoleRef.Name = "other"
	if _, err := e.admin.RbacV1().RoleBindings("team-a").Update(ctx, rb, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot change roleRef") {
		t.Errorf("changing roleRef: %v", err)
	}
}

func TestMalformedRBACObjects(t *testing.T) {
	e := newAuthEnv(t, nil)
	const rbac = "/apis/rbac.authorization.k8s.io/v1/"
	for _, c := range []struct {
		name, path, body, want string
	}{
		{"role without verbs", rbac + "namespaces/team-a/roles", `{"metadata":{"name":"r"},"rules":[{"apiGroups":[""],"resources":["pods"]}]}`, "rules[0].verbs"},
		{"role without resources", rbac + "namespaces/team-a/roles", `{"metadata":{"name":"r"},"rules":[{"verbs":["get"],"apiGroups":[""]}]}`, "rules[0].resources"},
		{"namespaced non-resource URL", rbac + "namespaces/team-a/roles", `{"metadata":{"name":"r"},"rules":[{"verbs":["get"],"nonResourceURLs":["/metrics"]}]}`, "namespaced rules cannot apply to non-resource URLs"},
		{"mixed rule", rbac + "clusterroles", `{"metadata":{"name":"r"},"rules":[{"verbs":["get"],"resources":["pods"],"nonResourceURLs":["/metrics"]}]}`, "both regular resources and non-resource URLs"},
		{"empty aggregation", rbac + "clusterroles", `{"metadata":{"name":"r"},"aggregationRule":{}}`, "aggregationRule.clusterRoleSelectors"},
		{"bad selector", rbac + "clusterroles", `{"metadata":{"name":"r"},"aggregationRule":{"clusterRoleSelectors":[{"matchExpressions":[{"key":"a","operator":"Nope"}]}]}}`, "clusterRoleSelectors[0]"},
		{"binding to a Role cluster-wide", rbac + "clusterrolebindings", `{"metadata":{"name":"b"},"roleRef":{"kind":"Role","name":"r"}}`, "roleRef.kind"},
		{"binding without role", rbac + "namespaces/team-a/rolebindings", `{"metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole"}}`, "roleRef.name"},
		{"binding of another group", rbac + "namespaces/team-a/rolebindings", `{"metadata":{"name":"b"},"roleRef":{"apiGroup":"example.com","kind":"ClusterRole","name":"view"}}`, "roleRef.apiGroup"},
		{"unknown subject kind", rbac + "namespaces/team-a/rolebindings", `{"metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"Robot","name":"r2"}]}`, "subjects[0].kind"},
		{"service account without namespace", rbac + "clusterrolebindings", `{"metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"ci"}]}`, "subjects[0].namespace"},
		{"bad service account name", rbac + "namespaces/team-a/rolebindings", `{"metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"Not/OK"}]}`, "subjects[0].name"},
		{"bad role name", rbac + "namespaces/team-a/roles", `{"metadata":{"name":"a/b"},"rules":[]}`, "metadata.name"},
		{"bad service account", "/api/v1/namespaces/team-a/serviceaccounts", `{"metadata":{"name":"Not_OK"}}`, "metadata.name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(apiservertest.Token, "POST", c.path, c.body)
			if code != 422 || !strings.Contains(string(body), c.want) {
				t.Errorf("%d %s, want 422 naming %s", code, body, c.want)
			}
		})
	}
	// Unknown verbs are kept and match nothing, as on a cluster.
	code, body := e.do(apiservertest.Token, "POST", rbac+"namespaces/team-a/roles", `{"metadata":{"name":"odd"},"rules":[{"verbs":["frobnicate"],"apiGroups":[""],"resources":["pods"]}]}`)
	if code != 201 {
		t.Errorf("unknown verb: %d %s", code, body)
	}
	// Subjects' API groups are defaulted.
	code, body = e.do(apiservertest.Token, "POST", rbac+"namespaces/team-a/rolebindings", `{"metadata":{"name":"d"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"carol"}]}`)
	if code != 201 || !strings.Contains(string(body), `{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"carol"}`) {
		t.Errorf("defaulting: %d %s", code, body)
	}
}

func TestReviews(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	alice := e.kube(aliceToken)
	ssar := func(ns, verb, group, resource, sub string) bool {
		t.Helper()
		r, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	if !ssar("team-a", "create", "serving.knative.dev", "services", "") || ssar("team-b", "create", "serving.knative.dev", "services", "") ||
		!ssar("team-a", "get", "serving.knative.dev", "revisions", "log") || ssar("", "list", "", "namespaces", "") {
		t.Error("SelfSubjectAccessReview answers wrong")
	}
	if _, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("empty review: %v", err)
	}
	rules, err := alice.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "team-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rules.Status.ResourceRules {
		found = found || (contains(r.APIGroups, "serving.knative.dev") && contains(r.Verbs, "create"))
	}
	if !found || len(rules.Status.NonResourceRules) == 0 {
		t.Errorf("rules of alice in team-a: %+v", rules.Status)
	}
	who, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := who.Status.UserInfo; u.Username != "alice" || u.UID != "a" || strings.Join(u.Groups, ",") != "developers,system:authenticated" {
		t.Errorf("whoami: %+v", u)
	}
	// SubjectAccessReview is for those who may create it.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "bob",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "delete", Resource: "secrets"}}}
	if _, err := alice.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice asks about bob: %v", err)
	}
	got, err := e.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil || !got.Status.Allowed || !strings.Contains(got.Status.Reason, `RoleBinding "bob-admin/team-b" of ClusterRole "admin" to User "bob"`) {
		t.Errorf("admin asks about bob: %v %+v", err, got)
	}
	local := &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b"}, Spec: sar.Spec}
	if got, err := e.kube(bobToken).AuthorizationV1().LocalSubjectAccessReviews("team-b").Create(ctx, local, metav1.CreateOptions{}); err != nil || !got.Status.Allowed {
		t.Errorf("bob's local review: %v %+v", err, got)
	}
	local.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Resource: "secrets"}
	if _, err := e.kube(bobToken).AuthorizationV1().LocalSubjectAccessReviews("team-b").Create(ctx, local, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a local review about another namespace: %v", err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestServiceAccountTokens(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := serviceaccount.NewSigner(key, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newAuthEnv(t, func(o *apiserver.Options) { o.ServiceAccountTokens = signer })
	ctx := context.Background()
	// Every namespace gets a ServiceAccount "default", again after it is
	// deleted.
	eventually(t, 10*time.Second, "default service accounts", func() bool {
		_, err := e.admin.CoreV1().ServiceAccounts("team-a").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	if err := e.admin.CoreV1().ServiceAccounts("team-a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "default recreated", func() bool {
		_, err := e.admin.CoreV1().ServiceAccounts("team-a").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	alice := e.kube(aliceToken)
	if _, err := alice.CoreV1().ServiceAccounts("team-a").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	request := func(ns, name string, spec authenticationv1.TokenRequestSpec) (string, error) {
		tr, err := alice.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return tr.Status.Token, nil
	}
	token, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := request("team-b", "default", authenticationv1.TokenRequestSpec{}); !apierrors.IsForbidden(err) {
		t.Errorf("a token for another namespace's account: %v", err)
	}
	if _, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(60))}); !apierrors.IsInvalid(err) {
		t.Errorf("a token for a minute: %v", err)
	}
	many := make([]string, 2000)
	for i := range many {
		many[i] = fmt.Sprintf("audience-%d", i)
	}
	if _, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{Audiences: many}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.audiences") {
		t.Errorf("a token for 2000 audiences: %v", err)
	}
	if _, err := request("team-a", "nobody", authenticationv1.TokenRequestSpec{}); !apierrors.IsNotFound(err) {
		t.Errorf("a token for a missing account: %v", err)
	}
	if _, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n"}}); !apierrors.IsBadRequest(err) {
		t.Errorf("a token bound to a node: %v", err)
	}
	long, err := alice.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(10 * 365 * 24 * 3600))}}, metav1.CreateOptions{})
	if err != nil || time.Until(long.Status.ExpirationTimestamp.Time) > serviceaccount.DefaultMaxTokenExpiration+time.Minute {
		t.Errorf("a ten-year token is not capped: %v %v", err, long.Status.ExpirationTimestamp)
	}

	// The token is the service account, authorized by RBAC.
	ci := e.kube(token)
	who, err := ci.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := who.Status.UserInfo; u.Username != "system:serviceaccount:team-a:ci" || !contains(u.Groups, "system:serviceaccounts:team-a") {
		t.Errorf("whoami: %+v", u)
	}
	if _, err := ci.CoreV1().ConfigMaps("team-a").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("unbound service account lists configmaps: %v", err)
	}
	e.bind("team-a", "ci-view", "view", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "ci"})
	if _, err := ci.CoreV1().ConfigMaps("team-a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("bound service account: %v", err)
	}
	if _, err := ci.CoreV1().ConfigMaps("team-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account in another namespace: %v", err)
	}

	// Refused: for another audience, signed by another key, bound to a
	// secret that is gone, after the account is deleted (even if one of
	// the same name comes back).
	vault, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := serviceaccount.NewSigner(otherKey, "", nil)
	sa, _ := e.admin.CoreV1().ServiceAccounts("team-a").Get(ctx, "ci", metav1.GetOptions{})
	valid := serviceaccount.Claims{Namespace: "team-a", ServiceAccount: "ci", ServiceAccountUID: string(sa.UID),
		Audiences: other.APIAudiences(), Expiry: time.Now().Add(time.Hour)}
	forged, err := other.Sign(valid)
	if err != nil {
		t.Fatal(err)
	}
	// Signed with the server's own key: valid now, and expired an hour ago.
	fresh, err := signer.Sign(valid)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(fresh, "GET", "/apis", ""); code != 200 {
		t.Fatalf("a token signed with the server's key: %d %s", code, body)
	}
	old := valid
	old.IssuedAt, old.Expiry = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	expired, err := signer.Sign(old)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := alice.CoreV1().Secrets("team-a").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bound"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := request("team-a", "ci", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
		Kind: "Secret", APIVersion: "v1", Name: "bound", UID: sec.UID}})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(bound, "GET", "/api/v1/namespaces/team-a/configmaps", ""); code != 200 {
		t.Errorf("secret-bound token: %d %s", code, body)
	}
	if err := alice.CoreV1().Secrets("team-a").Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"another audience": vault, "another key": forged, "bound secret gone": bound, "expired": expired} {
		if code, _ := e.do(tok, "GET", "/apis", ""); code != 401 {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	if err := e.admin.CoreV1().ServiceAccounts("team-a").Delete(ctx, "ci", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CoreV1().ServiceAccounts("team-a").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.do(token, "GET", "/apis", ""); code != 401 {
		t.Errorf("token of a deleted service account: %d, want 401", code)
	}

	// The runtime's seam issues the same tokens.
	tok, exp, err := e.api.Server.Issue(ctx, "team-a", "default", []string{"api"}, 0, nil)
	if err != nil || time.Until(exp) < 50*time.Minute {
		t.Fatalf("Issue: %v %v", err, exp)
	}
	if _, _, err := e.api.Server.Issue(ctx, "team-a", "missing", nil, 0, nil); !apierrors.IsNotFound(err) {
		t.Errorf("Issue for a missing account: %v", err)
	}
	if _, _, err := e.api.Server.Issue(ctx, "team-a", "default", nil, 0, &serviceaccount.BoundObject{Kind: "Pod", Name: "p"}); err == nil {
		t.Error("Issue bound to a Pod without a way to check pods")
	}
	if code, _ := e.do(tok, "GET", "/apis", ""); code != 401 {
		t.Errorf("token for audience api used on the API: %d", code)
	}
}

func TestServiceAccountNameMustExist(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	svc := ksvcIn("", "s")
	svc.Spec.Template.Spec.ServiceAccountName = "ci"
	_, err := e.serving(apiservertest.Token).ServingV1().Services("team-a").Create(ctx, svc, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `ServiceAccount "ci" not found in namespace "team-a"`) {
		t.Fatalf("missing service account: %v", err)
	}
	if _, err := e.admin.CoreV1().ServiceAccounts("team-a").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.serving(apiservertest.Token).ServingV1().Services("team-a").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("existing service account: %v", err)
	}
	// What Knative's conformance test TestServiceAccountValidation
	// asserts: the error carries Knative's own text.
	svc = ksvcIn("", "bad")
	svc.Spec.Template.Spec.ServiceAccountName = "foo@bar.baz"
	_, err = e.serving(apiservertest.Token).ServingV1().Services("team-a").Create(ctx, svc, metav1.CreateOptions{})
	want := "foo@bar.baz: spec.template.spec.serviceAccountName\n" + "a lowercase RFC 1123 subdomain must consist of"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	var st apierrors.APIStatus
	if ok := errorsAs(err, &st); !ok || st.Status().Details == nil || len(st.Status().Details.Causes) == 0 ||
		st.Status().Details.Causes[0].Field != "spec.template.spec.serviceAccountName" {
		t.Errorf("causes lost: %+v", st)
	}
}

// TestProjectedTokenVolume: the volume of Knative's conformance test
// TestProjectedServiceAccountToken is accepted; a lifetime the TokenRequest
// API would refuse is refused at once.
func TestProjectedTokenVolume(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	svc := func(name string, secs *int64) *servingv1.Service {
		s := ksvcIn("", name)
		s.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "projectedv", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources:     []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "api", Path: "token", ExpirationSeconds: secs}}},
			DefaultMode: ptr.To(int32(0o444))}}}}
		s.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "projectedv", MountPath: "/data/token", SubPath: "token", ReadOnly: true}}
		return s
	}
	cl := e.serving(apiservertest.Token).ServingV1().Services("team-a")
	if _, err := cl.Create(ctx, svc("ok", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("projected token volume: %v", err)
	}
	_, err := cl.Create(ctx, svc("short", ptr.To(int64(60))), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds") {
		t.Errorf("a one-minute projected token: %v", err)
	}
}

func errorsAs(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	*st = s
	return ok
}

func TestAggregationAndDefaultPolicy(t *testing.T) {
	dir := t.TempDir()
	api := apiservertest.StartWith(t, apiservertest.Options{Dir: dir, Users: map[string]admission.User{aliceToken: {Name: "alice"}}})
	admin, _ := kubernetes.NewForConfig(api.Config)
	ctx := context.Background()
	e := &authEnv{t: t, api: api, admin: admin}
	e.bind("default", "alice-view", "view", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"})
	alice := e.kube(aliceToken)
	can := func() bool {
		r, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "default", Verb: "list", Group: "example.com", Resource: "widgets"}}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed
	}
	if can() {
		t.Fatal("view covers widgets before aggregation")
	}
	widgets := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "widgets-view", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, widgets, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "view to aggregate widgets-view", can)
	// ... and admin, through edit.
	eventually(t, 10*time.Second, "admin to aggregate widgets-view", func() bool {
		r, err := admin.RbacV1().ClusterRoles().Get(ctx, "admin", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, rule := range r.Rules {
			if contains(rule.Resources, "widgets") {
				return true
			}
		}
		return false
	})

	// A default role changed with autoupdate "false" stays changed; a
	// deleted default binding comes back at the next start.
	edit, _ := admin.RbacV1().ClusterRoles().Get(ctx, "system:aggregate-to-edit", metav1.GetOptions{})
	edit.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	edit.Rules = edit.Rules[:1]
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, edit, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "system:discovery", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.New(apiserver.Options{Store: api.Store, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: apiservertest.ServingConfig(t)}})
	if err != nil {
		t.Fatal(err)
	}
	restart, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := srv.Start(restart); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, "system:discovery", metav1.GetOptions{}); err != nil {
		t.Errorf("default binding not restored: %v", err)
	}
	if got, _ := admin.RbacV1().ClusterRoles().Get(ctx, "system:aggregate-to-edit", metav1.GetOptions{}); len(got.Rules) != 1 {
		t.Errorf("a role with autoupdate false was reconciled: %d rules", len(got.Rules))
	}
}

// TestProtobufBodies: client-go's typed clients may send built-in kinds as
// protobuf (kubectl create rolebinding does); custom resources have none.
func TestProtobufBodies(t *testing.T) {
	e := newAuthEnv(t, nil)
	cfg := rest.CopyConfig(e.api.Config)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	pb, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pb"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}
	got, err := pb.RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{})
	if err != nil || got.RoleRef.Name != "view" || len(got.Subjects) != 1 {
		t.Fatalf("protobuf create: %v %+v", err, got)
	}
	code, body := e.doRaw(apiservertest.Token, "POST", svcPath, "application/vnd.kubernetes.protobuf", []byte("k8s\x00garbage"))
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("protobuf Knative service: %d %s", code, body)
	}
}

func (e *authEnv) doRaw(token, method, path, ctype string, body []byte) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.api.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", ctype)
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// ksvcIn is a Service without a namespace of its own (the client's is used).
func ksvcIn(ns, name string) *servingv1.Service {
	s := ksvc(name, "img")
	s.Namespace = ns
	return s
}
