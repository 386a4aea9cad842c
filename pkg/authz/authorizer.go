// Package authz decides whether a user may do what an API request asks, with
// the semantics of kube-apiserver's RBAC authorizer: Roles, ClusterRoles and
// their bindings (rbac.authorization.k8s.io/v1), rule matching with
// wildcards and resourceNames, the system:masters group, ClusterRole
// aggregation, the escalation check on writes of roles and bindings, and the
// default policy a cluster starts with.
//
// Requests are described by k8s.io/apiserver's authorizer.Attributes and
// users by its user.Info, so the vocabulary is Kubernetes'. authz reads RBAC
// objects through Source; it must not import the API server, the store or
// any data-plane package: the API server feeds it and enforces its answers.
package authz

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Source reads the RBAC objects that rules come from. A missing role is an
// error (a binding that names it grants nothing, and the error is reported
// as a reason); the lists may be empty.
type Source interface {
	GetRole(namespace, name string) (*rbacv1.Role, error)
	GetClusterRole(name string) (*rbacv1.ClusterRole, error)
	ListRoleBindings(namespace string) ([]*rbacv1.RoleBinding, error)
	ListClusterRoleBindings() ([]*rbacv1.ClusterRoleBinding, error)
}

// Authorizer is kube-apiserver's authorization chain as knbox runs it: the
// system:masters group may do anything, then RBAC decides. It never denies
// explicitly: what no rule allows gets DecisionNoOpinion, which the API
// server turns into 403.
type Authorizer struct {
	src Source
}

// New returns an Authorizer over src.
func New(src Source) *Authorizer { return &Authorizer{src: src} }

// IsMaster reports whether u is in system:masters, which kube-apiserver
// lets do anything without consulting RBAC.
func IsMaster(u user.Info) bool {
	if u == nil {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == user.SystemPrivilegedGroup {
			return true
		}
	}
	return false
}

// Authorize decides one request. On allow, the reason names the binding and
// role that granted it (as kube-apiserver's RBAC authorizer says it); on no
// opinion, the reason lists the bindings that could not be resolved (e.g.
// one naming a missing role), or is empty.
func (a *Authorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "no user on the request", nil
	}
	if IsMaster(u) {
		return authorizer.DecisionAllow, "", nil
	}
	var (
		errs    []error
		granted *grant
	)
	a.visit(u, attrs.GetNamespace(), func(g *grant, rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
			return true
		}
		if RuleAllows(attrs, rule) {
			granted = g
			return false
		}
		return true
	})
	if granted != nil {
		return authorizer.DecisionAllow, "RBAC: allowed by " + granted.String(), nil
	}
	if len(errs) > 0 {
		return authorizer.DecisionNoOpinion, "RBAC: " + utilerrors.NewAggregate(errs).Error(), nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// fullAuthority is what system:masters holds: every verb on every resource
// and every non-resource URL.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{rbacv1.VerbAll}, APIGroups: []string{rbacv1.APIGroupAll}, Resources: []string{rbacv1.ResourceAll}},
	{Verbs: []string{rbacv1.VerbAll}, NonResourceURLs: []string{rbacv1.NonResourceAll}},
}

// PolicyRules returns every rule that applies to u in namespace (cluster-
// wide bindings, plus namespace's RoleBindings when namespace is not ""),
// with the errors of bindings that could not be resolved. The rules are
// complete only when the error is nil.
func (a *Authorizer) PolicyRules(u user.Info, namespace string) ([]rbacv1.PolicyRule, error) {
	if IsMaster(u) {
		return fullAuthority, nil
	}
	var (
		rules []rbacv1.PolicyRule
		errs  []error
	)
	a.visit(u, namespace, func(_ *grant, rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
		} else {
			rules = append(rules, *rule)
		}
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// RulesFor lists what u may do in namespace, for SelfSubjectRulesReview
// (kubectl auth can-i --list). It implements authorizer.RuleResolver.
func (a *Authorizer) RulesFor(u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	rules, err := a.PolicyRules(u, namespace)
	var (
		res    []authorizer.ResourceRuleInfo
		nonRes []authorizer.NonResourceRuleInfo
	)
	for _, r := range rules {
		if len(r.Resources) > 0 {
			res = append(res, &authorizer.DefaultResourceRuleInfo{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			nonRes = append(nonRes, &authorizer.DefaultNonResourceRuleInfo{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
		}
	}
	return res, nonRes, false, err
}

// RoleRefRules returns the rules of the role a binding in namespace refers
// to ("" for a ClusterRoleBinding).
func (a *Authorizer) RoleRefRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		r, err := a.src.GetRole(namespace, ref.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	case "ClusterRole":
		r, err := a.src.GetClusterRole(ref.Name)
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// visit calls fn for every rule that applies to u in namespace, first those
// of ClusterRoleBindings, then those of namespace's RoleBindings, until fn
// returns false. Bindings whose role cannot be read are reported to fn as
// errors (rule nil) and skipped.
func (a *Authorizer) visit(u user.Info, namespace string, fn func(g *grant, rule *rbacv1.PolicyRule, err error) bool) {
	crbs, err := a.src.ListClusterRoleBindings()
	if err != nil {
		if !fn(nil, nil, err) {
			return
		}
	}
	for _, b := range crbs {
		i := appliesTo(u, b.Subjects, "")
		if i < 0 {
			continue
		}
		rules, err := a.RoleRefRules(b.RoleRef, "")
		if err != nil {
			if !fn(nil, nil, err) {
				return
			}
			continue
		}
		g := &grant{binding: b.Name, roleRef: b.RoleRef, subject: b.Subjects[i]}
		for j := range rules {
			if !fn(g, &rules[j], nil) {
				return
			}
		}
	}
	if namespace == "" {
		return
	}
	rbs, err := a.src.ListRoleBindings(namespace)
	if err != nil {
		if !fn(nil, nil, err) {
			return
		}
	}
	for _, b := range rbs {
		i := appliesTo(u, b.Subjects, namespace)
		if i < 0 {
			continue
		}
		rules, err := a.RoleRefRules(b.RoleRef, namespace)
		if err != nil {
			if !fn(nil, nil, err) {
				return
			}
			continue
		}
		g := &grant{binding: b.Name, namespace: namespace, roleRef: b.RoleRef, subject: b.Subjects[i]}
		for j := range rules {
			if !fn(g, &rules[j], nil) {
				return
			}
		}
	}
}

// appliesTo returns the index of the first subject that is u, or -1.
// namespace is the binding's ("" for a ClusterRoleBinding): a
// ServiceAccount subject without a namespace means one in it.
func appliesTo(u user.Info, subjects []rbacv1.Subject, namespace string) int {
	for i := range subjects {
		if subjectIs(u, &subjects[i], namespace) {
			return i
		}
	}
	return -1
}

func subjectIs(u user.Info, s *rbacv1.Subject, namespace string) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return u.GetName() == s.Name
	case rbacv1.GroupKind:
		for _, g := range u.GetGroups() {
			if g == s.Name {
				return true
			}
		}
		return false
	case rbacv1.ServiceAccountKind:
		ns := s.Namespace
		if ns == "" {
			ns = namespace
		}
		if ns == "" {
			return false
		}
		return u.GetName() == ServiceAccountPrefix+ns+":"+s.Name
	}
	return false
}

// ServiceAccountPrefix starts the user name of every ServiceAccount:
// system:serviceaccount:NAMESPACE:NAME.
const ServiceAccountPrefix = "system:serviceaccount:"

// grant says which binding gave a rule, for reasons.
type grant struct {
	binding   string
	namespace string // "" for a ClusterRoleBinding
	roleRef   rbacv1.RoleRef
	subject   rbacv1.Subject
}

// String says it as kube-apiserver does: `RoleBinding "b/ns" of ClusterRole
// "edit" to User "alice"`.
func (g *grant) String() string {
	if g.namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", g.binding, g.roleRef.Kind, g.roleRef.Name, describeSubject(g.subject, ""))
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", g.binding+"/"+g.namespace, g.roleRef.Kind, g.roleRef.Name, describeSubject(g.subject, g.namespace))
}

func describeSubject(s rbacv1.Subject, namespace string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = namespace
		}
		return fmt.Sprintf("%s %q", s.Kind, ns+"/"+s.Name)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

var (
	_ authorizer.Authorizer   = (*Authorizer)(nil)
	_ authorizer.RuleResolver = (*Authorizer)(nil)
)
