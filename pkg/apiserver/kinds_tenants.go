package apiserver

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// tenantKinds are the core kinds of namespace policy: ResourceQuota (with
// its status, which the server keeps) and LimitRange.
func tenantKinds() []*Kind {
	return []*Kind{
		{
			Group: "", Version: "v1", Kind: "ResourceQuota", Resource: "resourcequotas", Singular: "resourcequota", Namespaced: true,
			ShortNames: []string{"quota"}, HasStatus: true,
			New: func() runtime.Object { return &corev1.ResourceQuota{} }, NewList: func() runtime.Object { return &corev1.ResourceQuotaList{} },
			Columns: cols(col("Request", "string", "Used/hard of the resources other than limits"), col("Limit", "string", "Used/hard of the limits.* resources")),
			Row: func(o runtime.Object) []interface{} {
				req, lim := quotaColumns(o.(*corev1.ResourceQuota))
				return []interface{}{req, lim}
			},
		},
		{
			Group: "", Version: "v1", Kind: "LimitRange", Resource: "limitranges", Singular: "limitrange", Namespaced: true,
			ShortNames: []string{"limits"},
			New:        func() runtime.Object { return &corev1.LimitRange{} }, NewList: func() runtime.Object { return &corev1.LimitRangeList{} },
			Columns: cols(),
		},
	}
}

// quotaColumns renders "name: used/hard" pairs as kubectl's table does for
// a cluster: limits.* in Limit, the rest in Request.
func quotaColumns(rq *corev1.ResourceQuota) (request, limit string) {
	names := make([]string, 0, len(rq.Status.Hard))
	for n := range rq.Status.Hard {
		names = append(names, string(n))
	}
	sort.Strings(names)
	var req, lim []string
	for _, n := range names {
		hard := rq.Status.Hard[corev1.ResourceName(n)]
		used := rq.Status.Used[corev1.ResourceName(n)]
		cell := n + ": " + used.String() + "/" + hard.String()
		if strings.HasPrefix(n, "limits.") {
			lim = append(lim, cell)
		} else {
			req = append(req, cell)
		}
	}
	return strings.Join(req, ", "), strings.Join(lim, ", ")
}
