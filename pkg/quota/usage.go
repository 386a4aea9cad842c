package quota

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/kubectl/pkg/util/resource"
)

// PodUsage is what one instance of an effective pod spec (see EffectivePod)
// uses of a namespace's quotas, in quota names, as Kubernetes counts a Pod
// (its requests and limits computed by kubectl's PodRequestsAndLimits, the
// scheduler's and quota's rules: the pod's overhead, WithOverhead, is added
// to every request and to the limits that are set):
// pods and count/pods 1; cpu and requests.cpu, memory and requests.memory,
// ephemeral-storage and requests.ephemeral-storage are the pod's requests
// (the sum over its containers, or the largest init container's when
// larger), limits.* its limits; hugepages and extended resources
// (requests.example.com/gpu) likewise.
func PodUsage(pod *corev1.PodSpec) corev1.ResourceList {
	req, lim := resourcehelper.PodRequestsAndLimits(&corev1.Pod{Spec: *pod})
	one := resource.MustParse("1")
	out := corev1.ResourceList{corev1.ResourcePods: one, "count/pods": one.DeepCopy()}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := req[n]; ok {
			out[n] = q.DeepCopy()
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		}
		if q, ok := lim[n]; ok {
			out["limits."+n] = q.DeepCopy()
		}
	}
	for n, q := range req {
		switch {
		case isHugePages(n):
			out[n] = q.DeepCopy()
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		case isExtendedResourceName(n):
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		}
	}
	return out
}

// bestEffort: no cpu or memory request or limit anywhere in the pod (its
// QoS class is BestEffort).
func bestEffort(usage corev1.ResourceList) bool {
	for _, n := range []corev1.ResourceName{corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory} {
		if q, ok := usage[n]; ok && !q.IsZero() {
			return false
		}
	}
	return true
}

// podInScope reports whether quota rq, by its scopes and scope selector,
// covers an instance with usage. knbox instances never have an
// activeDeadlineSeconds (NotTerminating), a priorityClassName or pod
// affinity (Knative's pod spec has neither).
func podInScope(rq *corev1.ResourceQuota, usage corev1.ResourceList) bool {
	for _, s := range rq.Spec.Scopes {
		if !scopeMatches(corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists}, usage) {
			return false
		}
	}
	if sel := rq.Spec.ScopeSelector; sel != nil {
		for _, r := range sel.MatchExpressions {
			if !scopeMatches(r, usage) {
				return false
			}
		}
	}
	return true
}

func scopeMatches(r corev1.ScopedResourceSelectorRequirement, usage corev1.ResourceList) bool {
	switch r.ScopeName {
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return false
	case corev1.ResourceQuotaScopeNotTerminating:
		return true
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort(usage)
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort(usage)
	case corev1.ResourceQuotaScopePriorityClass:
		// The instance's priority class name is "".
		switch r.Operator {
		case corev1.ScopeSelectorOpIn:
			return contains(r.Values, "")
		case corev1.ScopeSelectorOpNotIn:
			return !contains(r.Values, "")
		case corev1.ScopeSelectorOpDoesNotExist:
			return true
		}
		return false
	}
	return false
}

// scoped reports whether rq has scopes: such a quota covers instances only,
// never other objects.
func scoped(rq *corev1.ResourceQuota) bool {
	return len(rq.Spec.Scopes) > 0 || (rq.Spec.ScopeSelector != nil && len(rq.Spec.ScopeSelector.MatchExpressions) > 0)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// requiredByQuota are the compute names for which a quota makes every
// container state its own request or limit (Kubernetes' rule since before
// QoS classes: quota cpu or memory, and each container must say).
var requiredByQuota = []corev1.ResourceName{
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
}

// missing returns, per quota name that hard requires, the containers of pod
// that do not state it.
func missing(hard corev1.ResourceList, pod *corev1.PodSpec) map[corev1.ResourceName][]string {
	var out map[corev1.ResourceName][]string
	for _, n := range requiredByQuota {
		if _, ok := hard[n]; !ok {
			continue
		}
		res := corev1.ResourceName(strings.TrimPrefix(strings.TrimPrefix(string(n), "requests."), "limits."))
		for _, c := range allContainers(pod) {
			var ok bool
			if strings.HasPrefix(string(n), "limits.") {
				_, ok = c.Resources.Limits[res]
			} else {
				_, ok = c.Resources.Requests[res]
			}
			if !ok {
				if out == nil {
					out = map[corev1.ResourceName][]string{}
				}
				out[n] = append(out[n], c.Name)
			}
		}
	}
	return out
}
