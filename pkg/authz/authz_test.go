package authz

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// memSource holds RBAC objects in maps: the in-memory Source the tests use
// (the API server's reads the store).
type memSource struct {
	roles    []*rbacv1.Role
	croles   []*rbacv1.ClusterRole
	rbs      []*rbacv1.RoleBinding
	crbs     []*rbacv1.ClusterRoleBinding
	failList bool
}

func (m *memSource) GetRole(ns, name string) (*rbacv1.Role, error) {
	for _, r := range m.roles {
		if r.Namespace == ns && r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("roles"), name)
}

func (m *memSource) GetClusterRole(name string) (*rbacv1.ClusterRole, error) {
	for _, r := range m.croles {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterroles"), name)
}

func (m *memSource) ListRoleBindings(ns string) ([]*rbacv1.RoleBinding, error) {
	var out []*rbacv1.RoleBinding
	for _, b := range m.rbs {
		if b.Namespace == ns {
			out = append(out, b)
		}
	}
	return out, nil
}

func (m *memSource) ListClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error) {
	if m.failList {
		return nil, apierrors.NewServiceUnavailable("store closed")
	}
	return m.crbs, nil
}

// defaults is a source with the default policy, aggregated.
func defaults(t testing.TB) *memSource {
	t.Helper()
	m := &memSource{}
	for _, r := range ClusterRoles() {
		r := r
		m.croles = append(m.croles, &r)
	}
	for _, b := range ClusterRoleBindings() {
		b := b
		m.crbs = append(m.crbs, &b)
	}
	// Aggregate to a fixed point, as the controller does.
	for pass := 0; pass < 10; pass++ {
		changed := false
		for _, r := range m.croles {
			rules, err := Aggregate(r, m.croles)
			if err != nil {
				t.Fatal(err)
			}
			if !SameRules(rules, r.Rules) {
				r.Rules, changed = rules, true
			}
		}
		if !changed {
			return m
		}
	}
	t.Fatal("aggregation does not converge")
	return nil
}

func roleBinding(ns, name, kind, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}, Subjects: subjects}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func res(u user.Info, verb, group, resource, sub, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub,
		Namespace: ns, Name: name, ResourceRequest: true}
}

func path(u user.Info, verb, p string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Path: p}
}

func TestRuleAllows(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	pods := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	named := rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"s1"}}
	anyLog := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"*"}, Resources: []string{"*/log"}}
	metrics := rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics", "/knbox/v1/*"}}
	for _, c := range []struct {
		name  string
		rule  rbacv1.PolicyRule
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{"exact", pods, res(u, "get", "", "pods", "", "ns", "p"), true},
		{"verb", pods, res(u, "delete", "", "pods", "", "ns", "p"), false},
		{"group", pods, res(u, "get", "apps", "pods", "", "ns", "p"), false},
		{"a resource does not cover its subresources", pods, res(u, "get", "", "pods", "log", "ns", "p"), false},
		{"future subresources are not covered either", pods, res(u, "create", "", "pods", "exec", "ns", "p"), false},
		{"*/log", anyLog, res(u, "get", "serving.knative.dev", "revisions", "log", "ns", "r"), true},
		{"*/log not the resource", anyLog, res(u, "get", "serving.knative.dev", "revisions", "", "ns", "r"), false},
		{"resourceNames get", named, res(u, "get", "", "secrets", "", "ns", "s1"), true},
		{"resourceNames other", named, res(u, "get", "", "secrets", "", "ns", "s2"), false},
		{"resourceNames never list", named, res(u, "list", "", "secrets", "", "ns", ""), false},
		{"resourceNames never watch", named, res(u, "watch", "", "secrets", "", "ns", ""), false},
		{"resourceNames never create", named, res(u, "create", "", "secrets", "", "ns", ""), false},
		{"resourceNames never deletecollection", named, res(u, "deletecollection", "", "secrets", "", "ns", ""), false},
		{"resourceNames list by metadata.name", named, res(u, "list", "", "secrets", "", "ns", "s1"), true},
		{"url exact", metrics, path(u, "get", "/metrics"), true},
		{"url prefix", metrics, path(u, "get", "/knbox/v1/images"), true},
		{"url prefix is not the parent", metrics, path(u, "get", "/knbox/v1"), false},
		{"url verb", metrics, path(u, "post", "/knbox/v1/images/prune"), false},
		{"resource rule is no url rule", pods, path(u, "get", "/metrics"), false},
		{"url rule is no resource rule", metrics, res(u, "get", "", "pods", "", "ns", ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := RuleAllows(c.attrs, &c.rule); got != c.want {
				t.Errorf("RuleAllows = %v, want %v", got, c.want)
			}
		})
	}
}

func TestAuthorizeDefaultPolicy(t *testing.T) {
	src := defaults(t)
	src.rbs = append(src.rbs,
		roleBinding("team-a", "alice-edit", "ClusterRole", "edit", userSubject("alice")),
		roleBinding("team-b", "bob-admin", "ClusterRole", "admin", userSubject("bob")),
		roleBinding("team-a", "viewers", "ClusterRole", "view", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "viewers"}),
		roleBinding("team-a", "ci", "ClusterRole", "edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "ci"}),
		roleBinding("team-a", "dangling", "Role", "missing", userSubject("carol")),
	)
	a := New(src)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}}
	viewer := &user.DefaultInfo{Name: "victor", Groups: []string{"viewers", user.AllAuthenticated}}
	ci := &user.DefaultInfo{Name: "system:serviceaccount:team-a:ci", Groups: []string{"system:serviceaccounts", user.AllAuthenticated}}
	otherCI := &user.DefaultInfo{Name: "system:serviceaccount:team-b:ci", Groups: []string{"system:serviceaccounts", user.AllAuthenticated}}
	carol := &user.DefaultInfo{Name: "carol", Groups: []string{user.AllAuthenticated}}
	anon := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	knbox := &user.DefaultInfo{Name: "system:knbox:controller", Groups: []string{InternalGroup, user.AllAuthenticated}}

	const kn = "serving.knative.dev"
	for _, c := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{"edit creates ksvc", res(alice, "create", kn, "services", "", "team-a", ""), true},
		{"edit deletes ksvc", res(alice, "delete", kn, "services", "", "team-a", "x"), true},
		{"edit reads logs", res(alice, "get", kn, "revisions", "log", "team-a", "r"), true},
		{"edit reads secrets", res(alice, "get", "", "secrets", "", "team-a", "s"), true},
		{"edit watches configmaps", res(alice, "watch", "", "configmaps", "", "team-a", ""), true},
		{"edit requests tokens", res(alice, "create", "", "serviceaccounts", "token", "team-a", "default"), true},
		{"edit cannot read roles", res(alice, "get", rbacv1.GroupName, "roles", "", "team-a", "r"), false},
		{"edit reads nothing in team-b", res(alice, "get", "", "secrets", "", "team-b", "s"), false},
		{"edit cannot watch team-b", res(alice, "watch", kn, "services", "", "team-b", ""), false},
		{"edit cannot read team-b logs", res(alice, "get", kn, "revisions", "log", "team-b", "r"), false},
		{"edit cannot list across namespaces", res(alice, "list", kn, "services", "", "", ""), false},
		{"edit cannot delete namespaces", res(alice, "delete", "", "namespaces", "", "team-a", "team-a"), false},
		{"edit cannot create runtimeclasses", res(alice, "create", "node.k8s.io", "runtimeclasses", "", "", ""), false},
		{"no pods/exec for edit in team-b", res(alice, "create", "", "pods", "exec", "team-b", "p"), false},
		{"pods/exec for edit in team-a", res(alice, "create", "", "pods", "exec", "team-a", "p"), true},
		{"no image endpoints", path(alice, "post", "/knbox/v1/images/prune"), false},
		{"no metrics", path(alice, "get", "/metrics"), false},
		{"discovery", path(alice, "get", "/apis/serving.knative.dev/v1"), true},
		{"version", path(alice, "get", "/version"), true},
		{"openapi", path(alice, "get", "/openapi/v3/apis/serving.knative.dev/v1"), true},
		{"self access review", res(alice, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""), true},
		{"self review", res(alice, "create", "authentication.k8s.io", "selfsubjectreviews", "", "", ""), true},
		{"no subject access review", res(alice, "create", "authorization.k8s.io", "subjectaccessreviews", "", "", ""), false},
		{"admin manages rolebindings", res(bob, "create", rbacv1.GroupName, "rolebindings", "", "team-b", ""), true},
		{"admin not in team-a", res(bob, "list", "", "configmaps", "", "team-a", ""), false},
		{"admin cannot create clusterroles", res(bob, "create", rbacv1.GroupName, "clusterroles", "", "", ""), false},
		{"view reads ksvc", res(viewer, "list", kn, "services", "", "team-a", ""), true},
		{"view cannot read secrets", res(viewer, "get", "", "secrets", "", "team-a", "s"), false},
		{"view cannot write", res(viewer, "create", kn, "services", "", "team-a", ""), false},
		{"service account subject without namespace", res(ci, "update", kn, "services", "", "team-a", "x"), true},
		{"same name in another namespace", res(otherCI, "update", kn, "services", "", "team-a", "x"), false},
		{"binding to a missing role grants nothing", res(carol, "get", "", "configmaps", "", "team-a", "c"), false},
		{"anonymous healthz", path(anon, "get", "/healthz"), true},
		{"anonymous discovery", path(anon, "get", "/apis"), false},
		{"masters", res(admin, "delete", "", "namespaces", "", "", "x"), true},
		{"knbox components", res(knbox, "update", kn, "revisions", "status", "team-b", "r"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, reason, err := a.Authorize(context.Background(), c.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got := d == authorizer.DecisionAllow; got != c.want {
				t.Errorf("allowed = %v (%s), want %v", got, reason, c.want)
			}
			if d == authorizer.DecisionDeny {
				t.Error("RBAC never denies explicitly")
			}
		})
	}

	// Reasons name the binding, or the binding that could not be resolved.
	_, reason, _ := a.Authorize(context.Background(), res(alice, "get", kn, "services", "", "team-a", "x"))
	if want := `RBAC: allowed by RoleBinding "alice-edit/team-a" of ClusterRole "edit" to User "alice"`; reason != want {
		t.Errorf("reason %q, want %q", reason, want)
	}
	_, reason, _ = a.Authorize(context.Background(), res(carol, "get", "", "configmaps", "", "team-a", "c"))
	if !strings.Contains(reason, `"missing" not found`) {
		t.Errorf("reason %q does not name the missing role", reason)
	}
}

func TestForbiddenMessage(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	for _, c := range []struct {
		attrs authorizer.AttributesRecord
		want  string
	}{
		{res(u, "list", "", "secrets", "", "team-b", ""), `User "alice" cannot list resource "secrets" in API group "" in the namespace "team-b"`},
		{res(u, "get", "serving.knative.dev", "revisions", "log", "team-b", "r"), `User "alice" cannot get resource "revisions/log" in API group "serving.knative.dev" in the namespace "team-b"`},
		{res(u, "create", "node.k8s.io", "runtimeclasses", "", "", ""), `User "alice" cannot create resource "runtimeclasses" in API group "node.k8s.io" at the cluster scope`},
		{path(u, "post", "/knbox/v1/images/prune"), `User "alice" cannot post path "/knbox/v1/images/prune"`},
	} {
		if got := ForbiddenMessage(c.attrs); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

func TestRulesFor(t *testing.T) {
	src := defaults(t)
	src.rbs = append(src.rbs, roleBinding("team-a", "alice-view", "ClusterRole", "view", userSubject("alice")))
	a := New(src)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	res, nonRes, incomplete, err := a.RulesFor(alice, "team-a")
	if err != nil || incomplete {
		t.Fatal(err, incomplete)
	}
	var sawKnative, sawDiscovery bool
	for _, r := range res {
		if has(r.GetAPIGroups(), "serving.knative.dev", "") && has(r.GetResources(), "*", "") {
			sawKnative = true
		}
	}
	for _, r := range nonRes {
		if has(r.GetNonResourceURLs(), "/apis/*", "") {
			sawDiscovery = true
		}
	}
	if !sawKnative || !sawDiscovery {
		t.Errorf("rules of a viewer in team-a lack Knative's view rule (%v) or discovery (%v)", sawKnative, sawDiscovery)
	}
	res, _, _, _ = a.RulesFor(alice, "team-b")
	for _, r := range res {
		if has(r.GetAPIGroups(), "serving.knative.dev", "") {
			t.Errorf("alice has %v in team-b", r)
		}
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	res, nonRes, _, _ = a.RulesFor(admin, "")
	if len(res) != 1 || !has(res[0].GetResources(), "*", "") || len(nonRes) != 1 {
		t.Errorf("system:masters rules: %v %v", res, nonRes)
	}
	src.failList = true
	if _, _, _, err := a.RulesFor(alice, "team-a"); err == nil {
		t.Error("a failing source: no error")
	}
}

func TestAggregation(t *testing.T) {
	src := defaults(t)
	view, _ := src.GetClusterRole("view")
	edit, _ := src.GetClusterRole("edit")
	admin, _ := src.GetClusterRole("admin")
	ok, missing := coversRules(edit.Rules, view.Rules)
	if !ok {
		t.Errorf("edit does not hold view's rules: %v", missing)
	}
	if ok, missing := coversRules(admin.Rules, edit.Rules); !ok {
		t.Errorf("admin does not hold edit's rules: %v", missing)
	}
	// A new role labelled for view extends view, edit and admin.
	extra := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "widgets-view", Labels: map[string]string{aggregateToView: "true"}},
		Rules: []rbacv1.PolicyRule{rule(read, "example.com", "widgets")}}
	all := append(src.croles, extra)
	rules, err := Aggregate(view, all)
	if err != nil {
		t.Fatal(err)
	}
	if !containsRule(rules, extra.Rules[0]) {
		t.Error("view did not aggregate widgets-view")
	}
	// Each rule once, in the order of the roles' names.
	dup := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "a-dup", Labels: map[string]string{aggregateToView: "true"}}, Rules: extra.Rules}
	rules2, _ := Aggregate(view, append(all, dup))
	if len(rules2) != len(rules) || !SameRules(rules2[:1], dup.Rules) {
		t.Errorf("duplicate rule aggregated twice or out of order: %d vs %d rules", len(rules2), len(rules))
	}
	bad := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, AggregationRule: &rbacv1.AggregationRule{
		ClusterRoleSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}}}}}
	if _, err := Aggregate(bad, all); err == nil {
		t.Error("a bad selector: no error")
	}
}

func coversRules(owner, servant []rbacv1.PolicyRule) (bool, []rbacv1.PolicyRule) {
	src := &memSource{croles: []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: owner}},
		crbs: []*rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "r"},
			Subjects: []rbacv1.Subject{userSubject("u")}}}}
	err := New(src).ConfirmNoEscalation(&user.DefaultInfo{Name: "u"}, "", servant)
	if err != nil {
		return false, []rbacv1.PolicyRule{{Verbs: []string{err.Error()}}}
	}
	return true, nil
}

func TestCheckWrite(t *testing.T) {
	src := defaults(t)
	src.rbs = append(src.rbs,
		roleBinding("team-a", "alice-admin", "ClusterRole", "admin", userSubject("alice")),
		roleBinding("team-a", "dave-edit", "ClusterRole", "edit", userSubject("dave")),
	)
	src.croles = append(src.croles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "binder"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"bind"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"cluster-admin"}}}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalator"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"escalate", "create"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}}}})
	src.rbs = append(src.rbs,
		roleBinding("team-a", "erin-binder", "ClusterRole", "binder", userSubject("erin")),
		roleBinding("team-a", "erin-escalator", "ClusterRole", "escalator", userSubject("erin")))
	a := New(src)
	ctx := context.Background()
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	dave := &user.DefaultInfo{Name: "dave", Groups: []string{user.AllAuthenticated}}
	erin := &user.DefaultInfo{Name: "erin", Groups: []string{user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}

	secretsRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "secrets"},
		Rules: []rbacv1.PolicyRule{rule(read, "", "secrets")}}
	nsRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ns"},
		Rules: []rbacv1.PolicyRule{rule([]string{"delete"}, "", "namespaces")}}
	crole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader"}, Rules: []rbacv1.PolicyRule{rule(read, "", "secrets")}}
	aggRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbacv1.AggregationRule{}}
	for _, c := range []struct {
		name string
		w    Write
		want string // "" = allowed; else a substring of the error
	}{
		{"admin makes a role it holds", Write{User: alice, Object: secretsRole}, ""},
		{"admin cannot grant namespace deletion", Write{User: alice, Object: nsRole}, `is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["namespaces"], Verbs:["delete"]}`},
		{"admin cannot make cluster roles", Write{User: alice, Object: crole}, "not currently held"},
		{"edit binds view", Write{User: dave, Object: roleBinding("team-a", "v", "ClusterRole", "view", userSubject("x"))}, ""},
		{"edit cannot bind admin", Write{User: dave, Object: roleBinding("team-a", "a", "ClusterRole", "admin", userSubject("x"))}, "not currently held"},
		{"admin binds admin", Write{User: alice, Object: roleBinding("team-a", "a", "ClusterRole", "admin", userSubject("x"))}, ""},
		{"admin cannot bind cluster-admin", Write{User: alice, Object: roleBinding("team-a", "ca", "ClusterRole", "cluster-admin", userSubject("alice"))}, "not currently held"},
		{"admin cannot bind in another namespace", Write{User: alice, Object: roleBinding("team-b", "v", "ClusterRole", "view", userSubject("alice"))}, "not currently held"},
		{"binding a missing role is not found", Write{User: alice, Object: roleBinding("team-a", "m", "ClusterRole", "nope", userSubject("x"))}, "not found"},
		{"bind verb by name", Write{User: erin, Object: roleBinding("team-a", "ca", "ClusterRole", "cluster-admin", userSubject("erin"))}, ""},
		{"bind verb names one role", Write{User: erin, Object: roleBinding("team-a", "ad", "ClusterRole", "admin", userSubject("erin"))}, "not currently held"},
		{"escalate verb", Write{User: erin, Object: nsRole}, ""},
		{"aggregation needs full authority", Write{User: alice, Object: aggRole}, "must have cluster-admin privileges to use the aggregationRule"},
		{"masters", Write{User: admin, Object: aggRole}, ""},
		{"only GC fields change", Write{User: dave, Object: withFinalizer(nsRole), Old: nsRole}, ""},
		{"labels are not GC fields", Write{User: dave, Object: withLabel(nsRole), Old: nsRole}, "not currently held"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := a.CheckWrite(ctx, c.w)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Errorf("allowed, want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q does not contain %q", err, c.want)
			case c.want != "" && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err):
				t.Errorf("error %v is neither 403 nor 404", err)
			}
		})
	}
}

func withFinalizer(r *rbacv1.Role) *rbacv1.Role {
	c := r.DeepCopy()
	c.Finalizers = append(c.Finalizers, "example.com/f")
	return c
}

func withLabel(r *rbacv1.Role) *rbacv1.Role {
	c := r.DeepCopy()
	c.Labels = map[string]string{"x": "y"}
	return c
}

// TestBuildRoles: edit covers Builds and their source upload and logs;
// view reads them and their logs only.
func TestBuildRoles(t *testing.T) {
	src := defaults(t)
	src.rbs = append(src.rbs,
		roleBinding("team-a", "alice-edit", "ClusterRole", "edit", userSubject("alice")),
		roleBinding("team-a", "bob-view", "ClusterRole", "view", userSubject("bob")))
	a := New(src)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}}
	const g = "build.knative.dev"
	for _, c := range []struct {
		attrs authorizer.AttributesRecord
		want  bool
	}{
		{res(alice, "create", g, "builds", "", "team-a", "b"), true},
		{res(alice, "delete", g, "builds", "", "team-a", "b"), true},
		{res(alice, "update", g, "builds", "source", "team-a", "b"), true},
		{res(alice, "get", g, "builds", "log", "team-a", "b"), true},
		{res(alice, "create", g, "builds", "", "team-b", "b"), false},
		{res(bob, "get", g, "builds", "", "team-a", "b"), true},
		{res(bob, "list", g, "builds", "", "team-a", ""), true},
		{res(bob, "get", g, "builds", "log", "team-a", "b"), true},
		{res(bob, "create", g, "builds", "", "team-a", "b"), false},
		{res(bob, "update", g, "builds", "source", "team-a", "b"), false},
	} {
		d, _, err := a.Authorize(context.Background(), c.attrs)
		if err != nil || (d == authorizer.DecisionAllow) != c.want {
			t.Errorf("%s %s %s/%s: %v %v, want allowed %v", c.attrs.User.GetName(), c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, d, err, c.want)
		}
	}
}
