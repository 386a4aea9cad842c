package quota

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The resource names and scopes below are Kubernetes' (v1.29), so a quota
// accepted here is accepted by a cluster and means the same there.

// standardQuotaResources are the quota names without a domain that
// Kubernetes knows.
var standardQuotaResources = sets.New[corev1.ResourceName](
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsStorage, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
)

// standardResources are the resource names without a domain that
// Kubernetes knows anywhere (a superset for LimitRange types other than
// Container and Pod).
var standardResources = standardQuotaResources.Clone().Insert(corev1.ResourceStorage)

// integerResources are counted in whole numbers.
var integerResources = sets.New[corev1.ResourceName](
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourceConfigMaps, corev1.ResourcePersistentVolumeClaims,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
)

// standardScopes are the ResourceQuota scopes.
var standardScopes = sets.New[corev1.ResourceQuotaScope](
	corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
	corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
	corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity,
)

// podComputeScoped are the compute resources a scoped quota may limit.
var podComputeScoped = sets.New[corev1.ResourceName](
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory,
)

// legacyCounts are the object count names without "count/", for core kinds.
var legacyCounts = map[corev1.ResourceName]string{
	corev1.ResourceQuotas:                 "resourcequotas",
	corev1.ResourceServices:               "services",
	corev1.ResourceReplicationControllers: "replicationcontrollers",
	corev1.ResourceSecrets:                "secrets",
	corev1.ResourceConfigMaps:             "configmaps",
	corev1.ResourcePersistentVolumeClaims: "persistentvolumeclaims",
}

func isHugePages(n corev1.ResourceName) bool {
	return strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix)
}

// isStandardQuotaResourceName reports whether Kubernetes' quota system
// knows n.
func isStandardQuotaResourceName(n corev1.ResourceName) bool {
	return standardQuotaResources.Has(n) || isHugePages(n) || strings.HasPrefix(string(n), corev1.ResourceRequestsHugePagesPrefix)
}

// isNativeResource: names without a domain, or under kubernetes.io, are
// Kubernetes' own.
func isNativeResource(n corev1.ResourceName) bool {
	return !strings.Contains(string(n), "/") || strings.Contains(string(n), corev1.ResourceDefaultNamespacePrefix)
}

// isExtendedResourceName reports whether n names an extended resource
// (example.com/gpu): not native, not "requests."-prefixed, and a qualified
// name once prefixed.
func isExtendedResourceName(n corev1.ResourceName) bool {
	if isNativeResource(n) || strings.HasPrefix(string(n), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+string(n))) == 0
}

func isIntegerResourceName(n corev1.ResourceName) bool {
	return integerResources.Has(n) || isExtendedResourceName(n)
}

// scopeValidFor reports whether a quota with scope may limit resource n.
func scopeValidFor(scope corev1.ResourceQuotaScope, n corev1.ResourceName) bool {
	switch scope {
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
		corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopePriorityClass,
		corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return n == corev1.ResourcePods || podComputeScoped.Has(n)
	case corev1.ResourceQuotaScopeBestEffort:
		return n == corev1.ResourcePods
	}
	return true
}

// CountName is the object count quota name of a resource:
// count/services.serving.knative.dev, count/configmaps.
func CountName(gr schema.GroupResource) corev1.ResourceName {
	if gr.Group == "" {
		return corev1.ResourceName("count/" + gr.Resource)
	}
	return corev1.ResourceName(fmt.Sprintf("count/%s.%s", gr.Resource, gr.Group))
}

// countedResource returns the resource whose objects quota name n counts:
// count/<resource>[.<group>] for any kind, and the legacy names of core kinds
// (configmaps, secrets, services, ...). Pods are instances, which the
// Ledger counts; they are not objects here.
func countedResource(n corev1.ResourceName) (schema.GroupResource, bool) {
	if r, ok := legacyCounts[n]; ok {
		return schema.GroupResource{Resource: r}, true
	}
	rest, ok := strings.CutPrefix(string(n), "count/")
	if !ok || rest == "" {
		return schema.GroupResource{}, false
	}
	res, group, _ := strings.Cut(rest, ".")
	gr := schema.GroupResource{Group: group, Resource: res}
	if gr == (schema.GroupResource{Resource: "pods"}) {
		return schema.GroupResource{}, false
	}
	return gr, true
}

// objectCountNames are the quota names that one more object of gr uses.
func objectCountNames(gr schema.GroupResource) []corev1.ResourceName {
	names := []corev1.ResourceName{CountName(gr)}
	if gr.Group == "" {
		for n, r := range legacyCounts {
			if r == gr.Resource {
				names = append(names, n)
			}
		}
	}
	return names
}

// isPodResource reports whether quota name n is measured on instances (the
// pods): their number and their compute requests and limits.
func isPodResource(n corev1.ResourceName) bool {
	switch n {
	case corev1.ResourcePods, "count/pods", corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	case corev1.ResourceRequestsStorage:
		return false // PersistentVolumeClaims
	}
	s := string(n)
	return isHugePages(n) || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) || strings.HasPrefix(s, "limits.")
}
