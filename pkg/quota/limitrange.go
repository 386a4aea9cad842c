package quota

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// EffectivePod returns the pod spec an instance of spec runs with in a
// namespace with ranges: a copy of spec where each container (and init
// container) that names no limit or no request for a resource gets it as a
// cluster gives it to a Pod: first a missing request is the container's own
// limit (API defaulting), then a missing limit is the namespace's
// LimitRange default and a missing request its defaultRequest. spec itself
// is not changed: on a cluster the defaults land on the Pod, and the
// Revision stays as written.
func EffectivePod(spec *corev1.PodSpec, ranges []corev1.LimitRange) *corev1.PodSpec {
	out := spec.DeepCopy()
	var defLimits, defRequests corev1.ResourceList
	for i := range ranges {
		for _, it := range ranges[i].Spec.Limits {
			if it.Type != corev1.LimitTypeContainer {
				continue
			}
			for n, q := range it.Default {
				if defLimits == nil {
					defLimits = corev1.ResourceList{}
				}
				defLimits[n] = q.DeepCopy()
			}
			for n, q := range it.DefaultRequest {
				if defRequests == nil {
					defRequests = corev1.ResourceList{}
				}
				defRequests[n] = q.DeepCopy()
			}
		}
	}
	apply := func(c *corev1.Container) {
		r := &c.Resources
		for n, q := range r.Limits {
			if _, ok := r.Requests[n]; !ok {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[n] = q.DeepCopy()
			}
		}
		for n, q := range defLimits {
			if _, ok := r.Limits[n]; !ok {
				if r.Limits == nil {
					r.Limits = corev1.ResourceList{}
				}
				r.Limits[n] = q.DeepCopy()
			}
		}
		for n, q := range defRequests {
			if _, ok := r.Requests[n]; !ok {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[n] = q.DeepCopy()
			}
		}
	}
	for i := range out.InitContainers {
		apply(&out.InitContainers[i])
	}
	for i := range out.Containers {
		apply(&out.Containers[i])
	}
	return out
}

// CheckLimitRanges checks an effective pod spec (see EffectivePod) against
// the min, max and maxLimitRequestRatio of each LimitRange, per Container
// and per Pod, as Kubernetes' LimitRanger does, and that no request is above
// its limit (which a LimitRange default limit can cause). The error's text
// is Kubernetes' ("maximum cpu usage per Container is 1, but limit is 2");
// nil when the pod fits.
func CheckLimitRanges(pod *corev1.PodSpec, ranges []corev1.LimitRange) error {
	var errs []error
	for _, c := range allContainers(pod) {
		for _, n := range sortedNames(c.Resources.Requests) {
			req := c.Resources.Requests[n]
			if lim, ok := c.Resources.Limits[n]; ok && req.Cmp(lim) > 0 {
				errs = append(errs, fmt.Errorf("container %q: %s request %s must be less than or equal to %s limit of %s", c.Name, n, req.String(), n, lim.String()))
			}
		}
	}
	for i := range ranges {
		for _, it := range ranges[i].Spec.Limits {
			switch it.Type {
			case corev1.LimitTypeContainer:
				for _, c := range allContainers(pod) {
					errs = append(errs, checkItem(it, c.Resources.Requests, c.Resources.Limits)...)
				}
			case corev1.LimitTypePod:
				var reqs, lims []corev1.ResourceList
				for _, c := range pod.Containers {
					reqs, lims = append(reqs, c.Resources.Requests), append(lims, c.Resources.Limits)
				}
				req, lim := sumAll(reqs), sumAll(lims)
				addOverhead(req, lim, pod.Overhead)
				errs = append(errs, checkItem(it, req, lim)...)
			}
		}
	}
	return utilerrors.NewAggregate(errs)
}

func allContainers(pod *corev1.PodSpec) []*corev1.Container {
	cs := make([]*corev1.Container, 0, len(pod.InitContainers)+len(pod.Containers))
	for i := range pod.InitContainers {
		cs = append(cs, &pod.InitContainers[i])
	}
	for i := range pod.Containers {
		cs = append(cs, &pod.Containers[i])
	}
	return cs
}

func checkItem(it corev1.LimitRangeItem, req, lim corev1.ResourceList) []error {
	var errs []error
	t := string(it.Type)
	for _, n := range sortedNames(it.Min) {
		if err := minConstraint(t, n, it.Min[n], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range sortedNames(it.Max) {
		if err := maxConstraint(t, n, it.Max[n], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range sortedNames(it.MaxLimitRequestRatio) {
		if err := ratioConstraint(t, n, it.MaxLimitRequestRatio[n], req, lim); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// comparable returns the three values at a common precision: milli-units
// when none overflows, else units.
func comparable(a, b, c resource.Quantity) (int64, int64, int64) {
	x, y, z := a.Value(), b.Value(), c.Value()
	if x <= resource.MaxMilliValue && y <= resource.MaxMilliValue && z <= resource.MaxMilliValue {
		return a.MilliValue(), b.MilliValue(), c.MilliValue()
	}
	return x, y, z
}

func minConstraint(t string, n corev1.ResourceName, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, hasReq := request[n]
	lim, hasLim := limit[n]
	r, l, e := comparable(req, lim, enforced)
	switch {
	case !hasReq:
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", n, t, enforced.String())
	case r < e:
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", n, t, enforced.String(), req.String())
	case hasLim && l < e:
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", n, t, enforced.String(), lim.String())
	}
	return nil
}

func maxConstraint(t string, n corev1.ResourceName, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, hasReq := request[n]
	lim, hasLim := limit[n]
	r, l, e := comparable(req, lim, enforced)
	switch {
	case !hasLim:
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", n, t, enforced.String())
	case l > e:
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", n, t, enforced.String(), lim.String())
	case hasReq && r > e:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", n, t, enforced.String(), req.String())
	}
	return nil
}

func ratioConstraint(t string, n corev1.ResourceName, enforced resource.Quantity, request, limit corev1.ResourceList) error {
	req, hasReq := request[n]
	lim, hasLim := limit[n]
	r, l, _ := comparable(req, lim, enforced)
	if !hasReq || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", n, t, enforced.String())
	}
	if !hasLim || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", n, t, enforced.String())
	}
	observed := float64(l) / float64(r)
	shown := observed
	max := float64(enforced.Value())
	if enforced.Value() <= resource.MaxMilliValue {
		observed *= 1000
		max = float64(enforced.MilliValue())
	}
	if observed > max {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", n, t, enforced.String(), shown)
	}
	return nil
}

// sumAll adds up the resources that every list names (a resource missing
// from one container is missing from the pod's sum, as Kubernetes'
// LimitRanger counts it).
func sumAll(ls []corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	if len(ls) == 0 {
		return out
	}
	names := map[corev1.ResourceName]bool{}
	for _, l := range ls {
		for n := range l {
			names[n] = true
		}
	}
	keys := make([]corev1.ResourceName, 0, len(names))
	for n := range names {
		keys = append(keys, n)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
next:
	for _, n := range keys {
		var total resource.Quantity
		for _, l := range ls {
			q, ok := l[n]
			if !ok {
				continue next
			}
			total.Add(q)
		}
		out[n] = total
	}
	return out
}

// addOverhead adds a pod's overhead (PodOverhead: its RuntimeClass's) to
// its requests, and to those of its limits that are set, as Kubernetes
// counts a pod against a LimitRange's Pod limits.
func addOverhead(req, lim, overhead corev1.ResourceList) {
	for n, q := range overhead {
		v := req[n]
		v.Add(q)
		req[n] = v
		if l, ok := lim[n]; ok && !l.IsZero() {
			l.Add(q)
			lim[n] = l
		}
	}
}
