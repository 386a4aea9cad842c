package authz

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Labels and annotations of the default policy, as on a cluster.
const (
	// AutoUpdateAnnotation set to "false" on a default role or binding
	// keeps knbox from restoring it at start.
	AutoUpdateAnnotation = rbacv1.AutoUpdateAnnotationKey
	bootstrappingLabel   = "kubernetes.io/bootstrapping"
	aggregateToAdmin     = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit      = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView      = "rbac.authorization.k8s.io/aggregate-to-view"
)

// Groups and users knbox's default bindings name.
const (
	// MonitoringGroup may read /metrics and the health endpoints.
	MonitoringGroup = "system:monitoring"
	// InternalGroup is the group of knbox's own components (controllers,
	// instance manager), bound to cluster-admin by the ClusterRoleBinding
	// InternalBinding: they go through RBAC like every client.
	InternalGroup   = "system:knbox"
	InternalBinding = "system:knbox"
)

// The embedded registry's authorization vocabulary: pulling a repository
// <namespace>/<name> is "get", pushing "create", deleting "delete" on
// RegistryResource of RegistryGroup in the namespace, named <name>.
const (
	RegistryGroup    = "registry.knbox.dev"
	RegistryResource = "repositories"
)

var (
	read  = []string{"get", "list", "watch"}
	write = []string{"create", "delete", "deletecollection", "patch", "update"}
	all   = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

func rule(verbs []string, group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{group}, Resources: resources}
}

func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

func defaultRole(name string, labels map[string]string, agg string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
	l := map[string]string{bootstrappingLabel: "rbac-defaults"}
	for k, v := range labels {
		l[k] = v
	}
	r := rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Rules:      rules,
	}
	if agg != "" {
		r.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{agg: "true"}}}}
	}
	return r
}

// ClusterRoles is the default policy: Kubernetes' user-facing roles
// (cluster-admin, and admin, edit and view aggregated from the
// system:aggregate-to-* roles with their rules for the core group), the
// roles every authenticated user is bound to (system:discovery,
// system:basic-user, system:public-info-viewer), system:monitoring, and
// Knative Serving's aggregated namespaced roles. Rules for API groups knbox
// does not serve (apps, batch, ...) are left out; rules for core resources
// knbox does not serve yet (pods/log, pods/exec, ...) are kept, so those
// subresources are governed the day they come.
func ClusterRoles() []rbacv1.ClusterRole {
	knativeInternal := []string{"networking.internal.knative.dev", "autoscaling.internal.knative.dev", "caching.internal.knative.dev"}
	knativeLabels := func(agg string) map[string]string {
		return map[string]string{agg: "true", "app.kubernetes.io/name": "knative-serving"}
	}
	buildLabels := func(agg string) map[string]string {
		return map[string]string{agg: "true", "app.kubernetes.io/name": "knative-build"}
	}
	return []rbacv1.ClusterRole{
		defaultRole("cluster-admin", nil, "",
			rule([]string{"*"}, "*", "*"),
			urls([]string{"*"}, "*")),
		defaultRole("admin", nil, aggregateToAdmin),
		defaultRole("edit", map[string]string{aggregateToAdmin: "true"}, aggregateToEdit),
		defaultRole("view", map[string]string{aggregateToEdit: "true"}, aggregateToView),
		defaultRole("system:aggregate-to-admin", map[string]string{aggregateToAdmin: "true"}, "",
			rule([]string{"create"}, "authorization.k8s.io", "localsubjectaccessreviews"),
			rule(all, rbacv1.GroupName, "rolebindings", "roles")),
		defaultRole("system:aggregate-to-edit", map[string]string{aggregateToEdit: "true"}, "",
			rule(read, "", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"),
			rule([]string{"impersonate"}, "", "serviceaccounts"),
			rule(write, "", "pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"),
			rule([]string{"create"}, "", "pods/eviction"),
			rule(write, "", "configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale",
				"secrets", "serviceaccounts", "services", "services/proxy"),
			rule([]string{"create"}, "", "serviceaccounts/token")),
		defaultRole("system:aggregate-to-view", map[string]string{aggregateToView: "true"}, "",
			rule(read, "", "configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
				"replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"),
			rule(read, "", "bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
				"replicationcontrollers/status", "resourcequotas", "resourcequotas/status"),
			rule(read, "", "namespaces")),
		defaultRole("system:discovery", nil, "",
			urls([]string{"get"}, "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/")),
		defaultRole("system:basic-user", nil, "",
			rule([]string{"create"}, "authorization.k8s.io", "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule([]string{"create"}, "authentication.k8s.io", "selfsubjectreviews")),
		defaultRole("system:public-info-viewer", nil, "",
			urls([]string{"get"}, "/healthz", "/livez", "/readyz", "/version", "/version/")),
		defaultRole("system:monitoring", nil, "",
			urls([]string{"get"}, "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*")),
		defaultRole("knative-serving-namespaced-admin", knativeLabels(aggregateToAdmin), "",
			rule([]string{"*"}, "serving.knative.dev", "*"),
			rbacv1.PolicyRule{Verbs: read, APIGroups: knativeInternal, Resources: []string{"*"}}),
		defaultRole("knative-serving-namespaced-edit", knativeLabels(aggregateToEdit), "",
			rule([]string{"create", "update", "patch", "delete"}, "serving.knative.dev", "*"),
			rbacv1.PolicyRule{Verbs: read, APIGroups: knativeInternal, Resources: []string{"*"}}),
		defaultRole("knative-serving-namespaced-view", knativeLabels(aggregateToView), "",
			rbacv1.PolicyRule{Verbs: read, APIGroups: append([]string{"serving.knative.dev"}, knativeInternal...), Resources: []string{"*"}}),
		// Builds (build.knative.dev), as the seed era's knative/build
		// aggregated them into admin, edit and view.
		defaultRole("knative-build-namespaced-admin", buildLabels(aggregateToAdmin), "",
			rule([]string{"*"}, "build.knative.dev", "*")),
		defaultRole("knative-build-namespaced-edit", buildLabels(aggregateToEdit), "",
			rule([]string{"create", "update", "patch", "delete"}, "build.knative.dev", "*")),
		defaultRole("knative-build-namespaced-view", buildLabels(aggregateToView), "",
			rule(read, "build.knative.dev", "*")),
		// knbox's embedded registry (pkg/registry): edit (and so admin)
		// push and pull the repositories of their namespace, view pulls.
		defaultRole("knbox-registry-edit", map[string]string{aggregateToEdit: "true"}, "",
			rule([]string{"get", "list", "create", "update", "delete"}, RegistryGroup, RegistryResource)),
		defaultRole("knbox-registry-view", map[string]string{aggregateToView: "true"}, "",
			rule(read, RegistryGroup, RegistryResource)),
	}
}

func defaultBinding(name, role string, groups ...string) rbacv1.ClusterRoleBinding {
	b := rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{bootstrappingLabel: "rbac-defaults"},
			Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}
	for _, g := range groups {
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
	}
	return b
}

// ClusterRoleBindings binds the default roles as a cluster does:
// cluster-admin to system:masters (the generated admin token's group),
// discovery and self-reviews to every authenticated user, the health and
// version endpoints to everyone, /metrics to system:monitoring; and
// cluster-admin to knbox's own components (InternalGroup).
func ClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	return []rbacv1.ClusterRoleBinding{
		defaultBinding("cluster-admin", "cluster-admin", user.SystemPrivilegedGroup),
		defaultBinding("system:discovery", "system:discovery", user.AllAuthenticated),
		defaultBinding("system:basic-user", "system:basic-user", user.AllAuthenticated),
		defaultBinding("system:public-info-viewer", "system:public-info-viewer", user.AllAuthenticated, user.AllUnauthenticated),
		defaultBinding("system:monitoring", "system:monitoring", MonitoringGroup),
		defaultBinding(InternalBinding, "cluster-admin", InternalGroup),
	}
}
