package authz

import (
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// RuleAllows reports whether rule allows the request, as RBAC matches:
//
//   - verbs, apiGroups and resources match exactly or by "*";
//   - a resource "pods/log" is asked for as resource "pods", subresource
//     "log": a rule matches it with "pods/log", "*/log" or "*", never with
//     "pods" alone;
//   - a rule with resourceNames matches only requests that name one of
//     them, so never list, watch, create or deletecollection without a name
//     (a list or watch with fieldSelector=metadata.name=X names X);
//   - a non-resource request (a URL path such as /metrics) matches a rule's
//     nonResourceURLs exactly, or by prefix when the rule's URL ends in "*".
//
// It agrees with k8s.io/component-helpers' Covers (the escalation check),
// which FuzzRuleAllows checks.
func RuleAllows(a authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if !has(rule.Verbs, a.GetVerb(), rbacv1.VerbAll) {
		return false
	}
	if !a.IsResourceRequest() {
		return urlMatches(rule.NonResourceURLs, a.GetPath())
	}
	return has(rule.APIGroups, a.GetAPIGroup(), rbacv1.APIGroupAll) &&
		resourceMatches(rule.Resources, a.GetResource(), a.GetSubresource()) &&
		(len(rule.ResourceNames) == 0 || (a.GetName() != "" && has(rule.ResourceNames, a.GetName(), "")))
}

// has reports whether set holds want or the wildcard all ("" for none).
func has(set []string, want, all string) bool {
	for _, s := range set {
		if s == want || (all != "" && s == all) {
			return true
		}
	}
	return false
}

func resourceMatches(rules []string, resource, subresource string) bool {
	combined := resource
	if subresource != "" {
		combined = resource + "/" + subresource
	}
	for _, r := range rules {
		switch {
		case r == rbacv1.ResourceAll, r == combined:
			return true
		case subresource != "" && len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource):
			return true
		}
	}
	return false
}

func urlMatches(rules []string, path string) bool {
	for _, r := range rules {
		switch {
		case r == rbacv1.NonResourceAll, r == path:
			return true
		case strings.HasSuffix(r, "*") && strings.HasPrefix(path, strings.TrimRight(r, "*")):
			return true
		}
	}
	return false
}

// ForbiddenMessage says why a request was refused, in kube-apiserver's
// words: `User "alice" cannot list resource "secrets" in API group "" in
// the namespace "team-b"`, `... at the cluster scope`, or `User "alice"
// cannot get path "/metrics"`.
func ForbiddenMessage(a authorizer.Attributes) string {
	name := ""
	if u := a.GetUser(); u != nil {
		name = u.GetName()
	}
	if !a.IsResourceRequest() {
		return fmt.Sprintf("User %q cannot %s path %q", name, a.GetVerb(), a.GetPath())
	}
	resource := a.GetResource()
	if sub := a.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	if ns := a.GetNamespace(); ns != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, a.GetVerb(), resource, a.GetAPIGroup(), ns)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, a.GetVerb(), resource, a.GetAPIGroup())
}
