package authz

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// Write is a create or update of a Role, ClusterRole, RoleBinding or
// ClusterRoleBinding, for CheckWrite.
type Write struct {
	User user.Info
	// Object is the new object (*rbacv1.Role, ...); Old the stored one on
	// update, nil on create.
	Object, Old runtime.Object
	// Name is the name in the request's path ("" on create), which the
	// escalate verb is checked against, as kube-apiserver does.
	Name string
}

// CheckWrite prevents privilege escalation as kube-apiserver does: a user
// may create or change a role only with rules they hold themselves (where
// the role applies: cluster-wide for a ClusterRole, in its namespace for a
// Role), unless they may "escalate" it; and may bind a role only when they
// hold every rule of it where the binding applies, unless they may "bind"
// it. system:masters may do both. Using an aggregationRule needs full
// authority. A change of only the fields the garbage collector writes
// (ownerReferences, finalizers) is never checked.
//
// The error is a 403 Forbidden (404 NotFound when a binding names a role
// that does not exist and the user may not bind it by name).
func (a *Authorizer) CheckWrite(ctx context.Context, w Write) error {
	if IsMaster(w.User) {
		return nil
	}
	if w.Old != nil && onlyGCFieldsChanged(w.Object, w.Old) {
		return nil
	}
	switch o := w.Object.(type) {
	case *rbacv1.Role:
		return a.checkRole(ctx, w, "roles", o.Namespace, o.Name, o.Rules, false)
	case *rbacv1.ClusterRole:
		return a.checkRole(ctx, w, "clusterroles", "", o.Name, o.Rules, o.AggregationRule != nil)
	case *rbacv1.RoleBinding:
		return a.checkBinding(ctx, w, "rolebindings", o.Namespace, o.Name, o.RoleRef)
	case *rbacv1.ClusterRoleBinding:
		return a.checkBinding(ctx, w, "clusterrolebindings", "", o.Name, o.RoleRef)
	}
	return nil
}

func (a *Authorizer) allowed(ctx context.Context, attrs authorizer.AttributesRecord) bool {
	d, _, err := a.Authorize(ctx, attrs)
	return err == nil && d == authorizer.DecisionAllow
}

func (a *Authorizer) checkRole(ctx context.Context, w Write, resource, namespace, name string, rules []rbacv1.PolicyRule, aggregated bool) error {
	gr := rbacv1.Resource(resource)
	if aggregated {
		if err := a.ConfirmNoEscalation(w.User, "", fullAuthority); err != nil {
			return apierrors.NewForbidden(gr, name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
		}
	}
	if a.allowed(ctx, authorizer.AttributesRecord{User: w.User, Verb: "escalate", APIGroup: rbacv1.GroupName, APIVersion: "*",
		Resource: resource, Namespace: namespace, Name: w.Name, ResourceRequest: true}) {
		return nil
	}
	if err := a.ConfirmNoEscalation(w.User, namespace, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}

func (a *Authorizer) checkBinding(ctx context.Context, w Write, resource, namespace, name string, ref rbacv1.RoleRef) error {
	gr := rbacv1.Resource(resource)
	bind := authorizer.AttributesRecord{User: w.User, Verb: "bind", APIGroup: ref.APIGroup, APIVersion: "*",
		Namespace: namespace, Name: ref.Name, ResourceRequest: true}
	switch ref.Kind {
	case "Role":
		bind.Resource = "roles"
	case "ClusterRole":
		bind.Resource = "clusterroles"
	}
	if bind.Resource != "" && a.allowed(ctx, bind) {
		return nil
	}
	rules, err := a.RoleRefRules(ref, namespace)
	if err != nil {
		return err
	}
	if err := a.ConfirmNoEscalation(w.User, namespace, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}

// ConfirmNoEscalation returns an error naming the rules of rules that u
// does not hold in namespace ("" = cluster-wide), in kube-apiserver's words.
func (a *Authorizer) ConfirmNoEscalation(u user.Info, namespace string, rules []rbacv1.PolicyRule) error {
	owned, resolveErr := a.PolicyRules(u, namespace)
	ok, missing := validation.Covers(owned, rules)
	if ok {
		return nil
	}
	var lines []string
	for _, r := range compact(missing) {
		lines = append(lines, CompactString(r))
	}
	sort.Strings(lines)
	lines = uniq(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", resolveErr)
	}
	return errors.New(msg)
}

// compact merges the verbs of rules (each one group, resource or URL, and
// at most one name, as Covers returns them) that differ only in the verb.
func compact(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type key struct{ group, resource, name, url string }
	idx := map[key]int{}
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if len(r.APIGroups) > 1 || len(r.Resources) > 1 || len(r.ResourceNames) > 1 || len(r.NonResourceURLs) > 1 {
			out = append(out, r)
			continue
		}
		k := key{first(r.APIGroups), first(r.Resources), first(r.ResourceNames), first(r.NonResourceURLs)}
		if i, ok := idx[k]; ok {
			for _, v := range r.Verbs {
				if !has(out[i].Verbs, v, "") {
					out[i].Verbs = append(out[i].Verbs, v)
				}
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, *r.DeepCopy())
	}
	return out
}

func first(xs []string) string {
	if len(xs) == 0 {
		return "\x00" // distinct from a present ""
	}
	return xs[0]
}

func uniq(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// CompactString prints a rule as kube-apiserver's escalation errors do:
// {APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}.
func CompactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}

// onlyGCFieldsChanged reports whether obj differs from old in nothing but
// ownerReferences and finalizers (and the server-kept metadata).
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	a, b := obj.DeepCopyObject(), old.DeepCopyObject()
	for _, o := range []runtime.Object{a, b} {
		m, ok := o.(metav1.Object)
		if !ok {
			return false
		}
		m.SetOwnerReferences(nil)
		m.SetFinalizers(nil)
		m.SetResourceVersion("")
		m.SetManagedFields(nil)
		m.SetGeneration(0)
		o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
