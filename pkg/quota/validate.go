package quota

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Kubernetes' messages, so that kubectl prints what it prints for a cluster.
const (
	msgNegative        = "must be greater than or equal to 0"
	msgNotInteger      = "must be an integer"
	msgNotQuotaName    = "must be a standard resource for quota"
	msgNotResourceName = "must be a standard resource type or fully qualified"
)

// ValidateResourceQuota checks spec and status of a ResourceQuota as
// kube-apiserver does: every name in hard is a resource quota knows (a
// standard name, or a qualified one such as count/services.serving.knative.dev
// or requests.example.com/gpu), every quantity is non-negative (and whole
// for counts), and scopes are known, compatible with each other and with
// the resources they limit. Metadata is the caller's.
func ValidateResourceQuota(rq *corev1.ResourceQuota) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateQuotaList(rq.Spec.Hard, spec.Child("hard"))
	errs = append(errs, validateScopes(&rq.Spec, spec)...)
	errs = append(errs, validateScopeSelector(&rq.Spec, spec)...)
	status := field.NewPath("status")
	errs = append(errs, validateQuotaList(rq.Status.Hard, status.Child("hard"))...)
	errs = append(errs, validateQuotaList(rq.Status.Used, status.Child("used"))...)
	return errs
}

func validateQuotaList(l corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, n := range sortedNames(l) {
		q := l[n]
		rp := p.Key(string(n))
		errs = append(errs, validateQuotaName(n, rp)...)
		errs = append(errs, validateQuantity(n, q, rp)...)
	}
	return errs
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}

// validateResourceName: a qualified name, and a standard one when it has no
// domain.
func validateResourceName(n corev1.ResourceName, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(n)) {
		errs = append(errs, field.Invalid(p, string(n), msg))
	}
	if len(errs) == 0 && !strings.Contains(string(n), "/") && !standardResources.Has(n) && !isStandardQuotaResourceName(n) {
		errs = append(errs, field.Invalid(p, string(n), msgNotResourceName))
	}
	return errs
}

func validateQuotaName(n corev1.ResourceName, p *field.Path) field.ErrorList {
	errs := validateResourceName(n, p)
	if !strings.Contains(string(n), "/") && !isStandardQuotaResourceName(n) {
		errs = append(errs, field.Invalid(p, string(n), msgNotQuotaName))
	}
	return errs
}

func validateQuantity(n corev1.ResourceName, q resource.Quantity, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.Sign() < 0 {
		errs = append(errs, field.Invalid(p, q.String(), msgNegative))
	}
	if isIntegerResourceName(n) && q.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(p, q.String(), msgNotInteger))
	}
	return errs
}

var conflictingScopes = [][2]corev1.ResourceQuotaScope{
	{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort},
	{corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating},
}

// scopeFits reports, per scope, whether every standard resource of hard
// may be limited under it; computed once per distinct scope, so that
// validation stays linear in the number of scopes and resources.
type scopeFits struct {
	standard []corev1.ResourceName
	seen     map[corev1.ResourceQuotaScope]bool
}

func newScopeFits(hard corev1.ResourceList) *scopeFits {
	f := &scopeFits{seen: map[corev1.ResourceQuotaScope]bool{}}
	for n := range hard {
		if isStandardQuotaResourceName(n) {
			f.standard = append(f.standard, n)
		}
	}
	return f
}

func (f *scopeFits) ok(s corev1.ResourceQuotaScope) bool {
	if v, ok := f.seen[s]; ok {
		return v
	}
	v := true
	for _, n := range f.standard {
		if !scopeValidFor(s, n) {
			v = false
			break
		}
	}
	f.seen[s] = v
	return v
}

// The errors below carry the one scope at fault as their value, where
// Kubernetes prints the whole list: a long list would otherwise be repeated
// in every error.

func validateScopes(spec *corev1.ResourceQuotaSpec, p *field.Path) field.ErrorList {
	if len(spec.Scopes) == 0 {
		return nil
	}
	var errs field.ErrorList
	sp := p.Child("scopes")
	fits := newScopeFits(spec.Hard)
	seen := sets.New[corev1.ResourceQuotaScope]()
	for i, s := range spec.Scopes {
		if !standardScopes.Has(s) {
			errs = append(errs, field.Invalid(sp.Index(i), s, "unsupported scope"))
		} else if !fits.ok(s) {
			errs = append(errs, field.Invalid(sp.Index(i), s, "unsupported scope applied to resource"))
		}
		seen.Insert(s)
	}
	for _, pair := range conflictingScopes {
		if seen.HasAll(pair[0], pair[1]) {
			errs = append(errs, field.Invalid(sp, pair[:], "conflicting scopes"))
		}
	}
	return errs
}

func validateScopeSelector(spec *corev1.ResourceQuotaSpec, p *field.Path) field.ErrorList {
	if spec.ScopeSelector == nil {
		return nil
	}
	var errs field.ErrorList
	mp := p.Child("scopeSelector", "matchExpressions")
	fits := newScopeFits(spec.Hard)
	seen := sets.New[corev1.ResourceQuotaScope]()
	for i, req := range spec.ScopeSelector.MatchExpressions {
		ip := mp.Index(i)
		if !standardScopes.Has(req.ScopeName) {
			errs = append(errs, field.Invalid(ip.Child("scopeName"), req.ScopeName, "unsupported scope"))
		} else if !fits.ok(req.ScopeName) {
			errs = append(errs, field.Invalid(ip.Child("scopeName"), req.ScopeName, "unsupported scope applied to resource"))
		}
		switch req.ScopeName {
		case corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
			corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
			corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
			if req.Operator != corev1.ScopeSelectorOpExists {
				errs = append(errs, field.Invalid(ip.Child("operator"), req.Operator,
					fmt.Sprintf("must be 'Exist' when scope is any of %s, %s, %s, %s or %s",
						corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
						corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
						corev1.ResourceQuotaScopeCrossNamespacePodAffinity)))
			}
		}
		switch req.Operator {
		case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
			if len(req.Values) == 0 {
				errs = append(errs, field.Required(ip.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
			}
		case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
			if len(req.Values) != 0 {
				errs = append(errs, field.Invalid(ip.Child("values"), len(req.Values), "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
			}
		default:
			errs = append(errs, field.Invalid(ip.Child("operator"), req.Operator, "not a valid selector operator"))
		}
		seen.Insert(req.ScopeName)
	}
	for _, pair := range conflictingScopes {
		if seen.HasAll(pair[0], pair[1]) {
			errs = append(errs, field.Invalid(mp, pair[:], "conflicting scopes"))
		}
	}
	return errs
}

// DefaultLimitRange fills what kube-apiserver fills in a LimitRange of type
// Container: a missing default (limit) is the max, a missing
// defaultRequest is the default, else the min.
func DefaultLimitRange(lr *corev1.LimitRange) {
	for i := range lr.Spec.Limits {
		it := &lr.Spec.Limits[i]
		if it.Type != corev1.LimitTypeContainer {
			continue
		}
		if it.Default == nil {
			it.Default = corev1.ResourceList{}
		}
		if it.DefaultRequest == nil {
			it.DefaultRequest = corev1.ResourceList{}
		}
		for n, q := range it.Max {
			if _, ok := it.Default[n]; !ok {
				it.Default[n] = q.DeepCopy()
			}
		}
		for n, q := range it.Default {
			if _, ok := it.DefaultRequest[n]; !ok {
				it.DefaultRequest[n] = q.DeepCopy()
			}
		}
		for n, q := range it.Min {
			if _, ok := it.DefaultRequest[n]; !ok {
				it.DefaultRequest[n] = q.DeepCopy()
			}
		}
		if len(it.Default) == 0 {
			it.Default = nil
		}
		if len(it.DefaultRequest) == 0 {
			it.DefaultRequest = nil
		}
	}
}

var limitTypes = sets.New(corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim)

// ValidateLimitRange checks a (defaulted) LimitRange's spec as
// kube-apiserver does: known types, each at most once, resource names valid
// for the type, non-negative quantities, min <= defaultRequest <= default <=
// max, and ratios of at least 1 that min and max allow. Metadata is the
// caller's.
func ValidateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	var errs field.ErrorList
	lp := field.NewPath("spec", "limits")
	seen := sets.New[corev1.LimitType]()
	for i := range lr.Spec.Limits {
		it := &lr.Spec.Limits[i]
		ip := lp.Index(i)
		errs = append(errs, validateLimitType(it.Type, ip.Child("type"))...)
		if seen.Has(it.Type) {
			errs = append(errs, field.Duplicate(ip.Child("type"), it.Type))
		}
		seen.Insert(it.Type)

		lists := []struct {
			name string
			l    corev1.ResourceList
		}{{"max", it.Max}, {"min", it.Min}, {"default", it.Default}, {"defaultRequest", it.DefaultRequest}, {"maxLimitRequestRatio", it.MaxLimitRequestRatio}}
		keys := sets.New[corev1.ResourceName]()
		for _, l := range lists {
			if it.Type == corev1.LimitTypePod && (l.name == "default" || l.name == "defaultRequest") {
				if len(l.l) > 0 {
					errs = append(errs, field.Forbidden(ip.Child(l.name), "may not be specified when `type` is 'Pod'"))
				}
				continue
			}
			for _, n := range sortedNames(l.l) {
				q := l.l[n]
				np := ip.Child(l.name).Key(string(n))
				errs = append(errs, validateLimitResourceName(it.Type, n, np)...)
				if q.Sign() < 0 {
					errs = append(errs, field.Invalid(np, q.String(), msgNegative))
				}
				keys.Insert(n)
			}
		}
		if it.Type == corev1.LimitTypePersistentVolumeClaim {
			_, min := it.Min[corev1.ResourceStorage]
			_, max := it.Max[corev1.ResourceStorage]
			if !min && !max {
				errs = append(errs, field.Required(ip.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		for _, n := range sets.List(keys) {
			errs = append(errs, validateLimitRelations(it, n, ip)...)
		}
	}
	return errs
}

func validateLimitType(t corev1.LimitType, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(t)) {
		errs = append(errs, field.Invalid(p, string(t), msg))
	}
	if len(errs) == 0 && !strings.Contains(string(t), "/") && !limitTypes.Has(t) {
		errs = append(errs, field.Invalid(p, string(t), "must be a standard limit type or fully qualified"))
	}
	return errs
}

// validateLimitResourceName: containers and pods take compute resources
// (cpu, memory, ephemeral-storage, hugepages-*, extended resources).
func validateLimitResourceName(t corev1.LimitType, n corev1.ResourceName, p *field.Path) field.ErrorList {
	errs := validateResourceName(n, p)
	if len(errs) > 0 || (t != corev1.LimitTypeContainer && t != corev1.LimitTypePod) {
		return errs
	}
	switch {
	case !strings.Contains(string(n), "/"):
		if n != corev1.ResourceCPU && n != corev1.ResourceMemory && n != corev1.ResourceEphemeralStorage && !isHugePages(n) {
			errs = append(errs, field.Invalid(p, string(n), "must be a standard resource for containers"))
		}
	case !isNativeResource(n) && !isExtendedResourceName(n):
		errs = append(errs, field.Invalid(p, string(n), "doesn't follow extended resource name standard"))
	}
	return errs
}

func validateLimitRelations(it *corev1.LimitRangeItem, n corev1.ResourceName, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	min, hasMin := it.Min[n]
	max, hasMax := it.Max[n]
	def, hasDef := it.Default[n]
	if it.Type == corev1.LimitTypePod {
		hasDef = false
	}
	defReq, hasDefReq := it.DefaultRequest[n]
	if it.Type == corev1.LimitTypePod {
		hasDefReq = false
	}
	ratio, hasRatio := it.MaxLimitRequestRatio[n]
	key := func(f string) *field.Path { return ip.Child(f).Key(string(n)) }
	if hasMin && hasMax && min.Cmp(max) > 0 {
		errs = append(errs, field.Invalid(key("min"), min.String(), fmt.Sprintf("min value %s is greater than max value %s", min.String(), max.String())))
	}
	if hasDefReq && hasMin && min.Cmp(defReq) > 0 {
		errs = append(errs, field.Invalid(key("defaultRequest"), defReq.String(), fmt.Sprintf("min value %s is greater than default request value %s", min.String(), defReq.String())))
	}
	if hasDefReq && hasMax && defReq.Cmp(max) > 0 {
		errs = append(errs, field.Invalid(key("defaultRequest"), defReq.String(), fmt.Sprintf("default request value %s is greater than max value %s", defReq.String(), max.String())))
	}
	if hasDefReq && hasDef && defReq.Cmp(def) > 0 {
		errs = append(errs, field.Invalid(key("defaultRequest"), defReq.String(), fmt.Sprintf("default request value %s is greater than default limit value %s", defReq.String(), def.String())))
	}
	if hasDef && hasMin && min.Cmp(def) > 0 {
		errs = append(errs, field.Invalid(key("default"), min.String(), fmt.Sprintf("min value %s is greater than default value %s", min.String(), def.String())))
	}
	if hasDef && hasMax && def.Cmp(max) > 0 {
		errs = append(errs, field.Invalid(key("default"), max.String(), fmt.Sprintf("default value %s is greater than max value %s", def.String(), max.String())))
	}
	if hasRatio && ratio.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0 {
		errs = append(errs, field.Invalid(key("maxLimitRequestRatio"), ratio.String(), fmt.Sprintf("ratio %s is less than 1", ratio.String())))
	}
	if hasRatio && hasMin && hasMax && min.Sign() > 0 {
		r, lo, hi := float64(ratio.Value()), float64(min.Value()), float64(max.Value())
		if ratio.Value() < resource.MaxMilliValue && min.Value() < resource.MaxMilliValue && max.Value() < resource.MaxMilliValue {
			r, lo, hi = float64(ratio.MilliValue())/1000, float64(min.MilliValue()), float64(max.MilliValue())
		}
		if limit := hi / lo; r > limit {
			errs = append(errs, field.Invalid(key("maxLimitRequestRatio"), ratio.String(), fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), limit)))
		}
	}
	// Resources that cannot be overcommitted (hugepages, extended) need
	// equal default and defaultRequest.
	if (isHugePages(n) || isExtendedResourceName(n)) && hasDef && hasDefReq && def.Cmp(defReq) != 0 {
		errs = append(errs, field.Invalid(key("defaultRequest"), defReq.String(), fmt.Sprintf("default value %s must equal to defaultRequest value %s in %s", def.String(), defReq.String(), n)))
	}
	return errs
}
