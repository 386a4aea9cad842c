package apiserver

import (
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// authKinds are the kinds of authentication and authorization:
// ServiceAccount, the RBAC kinds, and the reviews (virtual kinds that are
// only created: SelfSubjectAccessReview and friends, SelfSubjectReview).
func authKinds() []*Kind {
	return []*Kind{
		{
			Group: "", Version: "v1", Kind: "ServiceAccount", Resource: "serviceaccounts", Singular: "serviceaccount",
			ShortNames: []string{"sa"}, Namespaced: true,
			New: func() runtime.Object { return &corev1.ServiceAccount{} }, NewList: func() runtime.Object { return &corev1.ServiceAccountList{} },
			Columns: cols(col("Secrets", "integer", "The number of secrets of the service account")),
			Row: func(o runtime.Object) []interface{} {
				return []interface{}{int64(len(o.(*corev1.ServiceAccount).Secrets))}
			},
		},
		{
			Group: rbacv1.GroupName, Version: "v1", Kind: "Role", Resource: "roles", Singular: "role", Namespaced: true,
			New: func() runtime.Object { return &rbacv1.Role{} }, NewList: func() runtime.Object { return &rbacv1.RoleList{} },
			Columns: cols(),
		},
		{
			Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRole", Resource: "clusterroles", Singular: "clusterrole",
			New: func() runtime.Object { return &rbacv1.ClusterRole{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} },
			Columns: cols(),
		},
		{
			Group: rbacv1.GroupName, Version: "v1", Kind: "RoleBinding", Resource: "rolebindings", Singular: "rolebinding", Namespaced: true,
			New: func() runtime.Object { return &rbacv1.RoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.RoleBindingList{} },
			Columns: bindingColumns(),
			Row: func(o runtime.Object) []interface{} {
				b := o.(*rbacv1.RoleBinding)
				return bindingRow(b.RoleRef, b.Subjects)
			},
		},
		{
			Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRoleBinding", Resource: "clusterrolebindings", Singular: "clusterrolebinding",
			New: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
			Columns: bindingColumns(),
			Row: func(o runtime.Object) []interface{} {
				b := o.(*rbacv1.ClusterRoleBinding)
				return bindingRow(b.RoleRef, b.Subjects)
			},
		},
		review(authorizationv1.SchemeGroupVersion.Group, "SelfSubjectAccessReview", "selfsubjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }),
		review(authorizationv1.SchemeGroupVersion.Group, "SelfSubjectRulesReview", "selfsubjectrulesreviews", false,
			func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} }),
		review(authorizationv1.SchemeGroupVersion.Group, "SubjectAccessReview", "subjectaccessreviews", false,
			func() runtime.Object { return &authorizationv1.SubjectAccessReview{} }),
		review(authorizationv1.SchemeGroupVersion.Group, "LocalSubjectAccessReview", "localsubjectaccessreviews", true,
			func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} }),
		review(authenticationv1.SchemeGroupVersion.Group, "SelfSubjectReview", "selfsubjectreviews", false,
			func() runtime.Object { return &authenticationv1.SelfSubjectReview{} }),
	}
}

func review(group, kind, resource string, namespaced bool, newObj func() runtime.Object) *Kind {
	return &Kind{Group: group, Version: "v1", Kind: kind, Resource: resource, Singular: strings.ToLower(kind),
		Namespaced: namespaced, Virtual: true, New: newObj}
}

func bindingColumns() []metav1.TableColumnDefinition {
	wide := func(name string) metav1.TableColumnDefinition {
		c := col(name, "string", "")
		c.Priority = 1
		return c
	}
	return cols(col("Role", "string", "The role the binding grants"), wide("Users"), wide("Groups"), wide("ServiceAccounts"))
}

func bindingRow(ref rbacv1.RoleRef, subjects []rbacv1.Subject) []interface{} {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []interface{}{fmt.Sprintf("%s/%s", ref.Kind, ref.Name), strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}

// kindVerbs are the verbs discovery lists for k.
func kindVerbs(k *Kind) metav1.Verbs {
	if k.Virtual {
		return metav1.Verbs{"create"}
	}
	return verbs
}

// authSubresources are the subresources of k that this file's handlers
// serve, for discovery.
func authSubresources(k *Kind) []metav1.APIResource {
	if k.Group == "" && k.Resource == "serviceaccounts" {
		return []metav1.APIResource{{Name: "serviceaccounts/token", Namespaced: true, Group: authenticationv1.SchemeGroupVersion.Group,
			Version: "v1", Kind: "TokenRequest", Verbs: metav1.Verbs{"create"}}}
	}
	return nil
}
