package authz

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/auth/rbac/validation"
)

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// FuzzRuleAllows checks RuleAllows against k8s.io/component-helpers'
// Covers on any request attributes and any rule: a rule allows a request
// exactly when it covers the one-verb, one-resource rule the request
// stands for. (Resources and subresources are path segments, so they hold
// no "/"; a rule's resourceNames say nothing about non-resource URLs.)
func FuzzRuleAllows(f *testing.F) {
	f.Add(true, "get", "", "pods", "log", "p", "", "get,list", "", "pods/log,*/exec", "", "")
	f.Add(true, "list", "serving.knative.dev", "services", "", "", "", "*", "serving.knative.dev", "*", "a,b", "")
	f.Add(false, "get", "", "", "", "", "/knbox/v1/images", "get", "", "", "", "/knbox/*,/metrics")
	f.Add(true, "watch", "*", "*", "", "x", "", "watch", "*", "*", "x", "")
	f.Fuzz(func(t *testing.T, resource bool, verb, group, res, sub, name, path, verbs, groups, resources, names, urls string) {
		if strings.Contains(res, "/") || strings.Contains(sub, "/") {
			return
		}
		rule := rbacv1.PolicyRule{Verbs: split(verbs), APIGroups: split(groups), Resources: split(resources),
			ResourceNames: split(names), NonResourceURLs: split(urls)}
		attrs := authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: res, Subresource: sub, Name: name,
			Path: path, ResourceRequest: resource}
		var asked rbacv1.PolicyRule
		if resource {
			r := res
			if sub != "" {
				r += "/" + sub
			}
			asked = rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{group}, Resources: []string{r}}
			if name != "" {
				asked.ResourceNames = []string{name}
			}
		} else {
			if len(rule.ResourceNames) > 0 {
				return
			}
			asked = rbacv1.PolicyRule{Verbs: []string{verb}, NonResourceURLs: []string{path}}
		}
		covers, _ := validation.Covers([]rbacv1.PolicyRule{rule}, []rbacv1.PolicyRule{asked})
		if got := RuleAllows(attrs, &rule); got != covers {
			t.Fatalf("RuleAllows(%+v, %+v) = %v, Covers says %v", attrs, rule, got, covers)
		}
		_ = ForbiddenMessage(attrs)
	})
}

// FuzzAuthorize runs the whole authorizer on arbitrary roles, bindings and
// requests: it must not fail, never deny explicitly, agree with the rules
// RulesFor lists, and refuse every write of a role or binding that grants
// what the writer does not hold.
func FuzzAuthorize(f *testing.F) {
	f.Add("alice", "team-a", "get", "", "secrets", "", "s", "get,list", "", "secrets", "", "User", "alice", "Role", "", "")
	f.Add("system:serviceaccount:team-a:ci", "team-a", "create", "serving.knative.dev", "services", "", "", "*", "*", "*", "", "ServiceAccount", "ci", "ClusterRole", "", "/x")
	f.Add("bob", "", "get", "", "", "", "", "get", "", "", "", "Group", "system:authenticated", "ClusterRole", "/metrics", "/metrics")
	f.Fuzz(func(t *testing.T, name, ns, verb, group, resource, sub, objName, verbs, groups, resources, names, subjectKind, subjectName, roleKind, urls, path string) {
		if strings.Contains(resource, "/") || strings.Contains(sub, "/") {
			return
		}
		rule := rbacv1.PolicyRule{Verbs: split(verbs), APIGroups: split(groups), Resources: split(resources),
			ResourceNames: split(names), NonResourceURLs: split(urls)}
		subj := rbacv1.Subject{Kind: subjectKind, Name: subjectName}
		src := &memSource{
			roles:  []*rbacv1.Role{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"}, Rules: []rbacv1.PolicyRule{rule}}},
			croles: []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Rules: []rbacv1.PolicyRule{rule}}},
			rbs:    []*rbacv1.RoleBinding{roleBinding(ns, "b", roleKind, "r", subj)},
			crbs: []*rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"},
				RoleRef: rbacv1.RoleRef{Kind: roleKind, Name: "r"}, Subjects: []rbacv1.Subject{subj}}},
		}
		a := New(src)
		u := &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}
		for _, resReq := range []bool{true, false} {
			attrs := authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub,
				Namespace: ns, Name: objName, Path: path, ResourceRequest: resReq}
			d, _, err := a.Authorize(context.Background(), attrs)
			if err != nil || d == authorizer.DecisionDeny {
				t.Fatalf("Authorize: %v %v", d, err)
			}
			rules, _ := a.PolicyRules(u, ns)
			listed := false
			for i := range rules {
				listed = listed || RuleAllows(attrs, &rules[i])
			}
			if listed != (d == authorizer.DecisionAllow) {
				t.Fatalf("Authorize says %v, the listed rules say %v", d, listed)
			}
		}
		_, _, _, _ = a.RulesFor(u, ns)
		// A user who holds nothing may not grant rule.
		nobody := &user.DefaultInfo{Name: "\x00nobody"}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new"}, Rules: []rbacv1.PolicyRule{rule}}
		err := a.CheckWrite(context.Background(), Write{User: nobody, Object: role})
		if ok, _ := validation.Covers(nil, role.Rules); !ok && err == nil && subjectName != nobody.Name {
			t.Fatalf("a user without rights created %+v", role)
		}
	})
}
