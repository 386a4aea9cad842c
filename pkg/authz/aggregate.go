package authz

import (
	"fmt"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Aggregate returns the rules that role, a ClusterRole with an
// aggregationRule, gets from all: the rules of every other ClusterRole that
// one of its selectors matches, in the order of the roles' names, each rule
// once. That is what kube-controller-manager's ClusterRole aggregation
// controller writes into such a role's rules.
func Aggregate(role *rbacv1.ClusterRole, all []*rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	if role.AggregationRule == nil {
		return role.Rules, nil
	}
	sorted := make([]*rbacv1.ClusterRole, len(all))
	copy(sorted, all)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	rules := []rbacv1.PolicyRule{}
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("clusterrole %s: aggregationRule.clusterRoleSelectors[%d]: %w", role.Name, i, err)
		}
		for _, other := range sorted {
			if other.Name == role.Name || !sel.Matches(labels.Set(other.Labels)) {
				continue
			}
			for _, r := range other.Rules {
				if !containsRule(rules, r) {
					rules = append(rules, *r.DeepCopy())
				}
			}
		}
	}
	return rules, nil
}

func containsRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, x := range rules {
		if apiequality.Semantic.DeepEqual(x, r) {
			return true
		}
	}
	return false
}

// SameRules reports whether a and b are the same rules in the same order
// (nil and empty alike).
func SameRules(a, b []rbacv1.PolicyRule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !apiequality.Semantic.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}
