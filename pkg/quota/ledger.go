package quota

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Source reads the stored objects the Ledger needs. The API server
// implements it over its store; reads are local, never HTTP calls.
type Source interface {
	// ResourceQuotas returns the ResourceQuotas of namespace.
	ResourceQuotas(ctx context.Context, namespace string) ([]corev1.ResourceQuota, error)
	// LimitRanges returns the LimitRanges of namespace.
	LimitRanges(ctx context.Context, namespace string) ([]corev1.LimitRange, error)
	// Count returns how many objects of gr namespace holds (0 for a
	// resource the server does not serve).
	Count(ctx context.Context, gr schema.GroupResource, namespace string) (int64, error)
}

// RuntimeClasses is what a Source may also do: read RuntimeClasses, whose
// overhead.podFixed each instance of that class counts besides its
// containers (WithOverhead). A Source without it counts no overhead.
type RuntimeClasses interface {
	// RuntimeClass returns the RuntimeClass name; a NotFound error when
	// there is none.
	RuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, error)
}

// WithOverhead sets pod.Overhead to the overhead.podFixed of the
// RuntimeClass pod.RuntimeClassName names, as Kubernetes' RuntimeClass
// admission does (PodOverhead), so that ResourceQuota usage and LimitRange's
// Pod limits count it. src not a RuntimeClasses, no class, a class that
// does not exist (admission refuses those apart) or one without overhead:
// pod.Overhead is cleared (a pod spec's own is not trusted: the
// RuntimeClass decides).
func WithOverhead(ctx context.Context, src any, pod *corev1.PodSpec) error {
	pod.Overhead = nil
	rcs, ok := src.(RuntimeClasses)
	if !ok || pod.RuntimeClassName == nil || *pod.RuntimeClassName == "" {
		return nil
	}
	rc, err := rcs.RuntimeClass(ctx, *pod.RuntimeClassName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read runtimeclass %s: %w", *pod.RuntimeClassName, err)
	}
	if rc.Overhead != nil && len(rc.Overhead.PodFixed) > 0 {
		pod.Overhead = rc.Overhead.PodFixed.DeepCopy()
	}
	return nil
}

// Ledger knows what a namespace's instances use and checks requests
// against the namespace's ResourceQuotas. Instances hold reservations: the
// runtime reserves before it starts an instance (Reserve) and releases when
// the instance is gone; objects are counted in the store. It is safe for
// concurrent use.
//
// Reservations live in memory: after a restart the runtime records the
// instances it adopts again with Track.
type Ledger struct {
	src Source

	mu       sync.Mutex
	pods     map[string]map[uint64]corev1.ResourceList // namespace -> reservation -> usage
	next     uint64
	watchers []func(namespace string)
}

// NewLedger returns a Ledger that reads quotas, limit ranges and object
// counts from src.
func NewLedger(src Source) *Ledger {
	return &Ledger{src: src, pods: map[string]map[uint64]corev1.ResourceList{}}
}

// OnChange registers fn, called (without locks held) with the namespace
// of every reservation made or released, so that the quotas' status can
// follow.
func (l *Ledger) OnChange(fn func(namespace string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchers = append(l.watchers, fn)
}

func (l *Ledger) changed(ns string) {
	l.mu.Lock()
	ws := append([]func(string){}, l.watchers...)
	l.mu.Unlock()
	for _, w := range ws {
		w(ns)
	}
}

// EffectivePod returns the pod spec an instance of spec runs with in
// namespace: spec with the namespace's LimitRange defaults (see the
// package function EffectivePod) and its RuntimeClass's overhead
// (WithOverhead; spec.runtimeClassName must name the class the instance
// runs in, a default included).
func (l *Ledger) EffectivePod(ctx context.Context, namespace string, spec *corev1.PodSpec) (*corev1.PodSpec, error) {
	ranges, err := l.src.LimitRanges(ctx, namespace)
	if err != nil {
		return nil, fmt.Errorf("read limit ranges of namespace %s: %w", namespace, err)
	}
	pod := EffectivePod(spec, ranges)
	if err := WithOverhead(ctx, l.src, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// Reserve admits one more instance of spec (a Revision's pod spec) in
// namespace: it applies the namespace's LimitRange defaults, checks the
// namespace's ResourceQuotas against what its instances hold already, and
// records the instance's usage. It returns the effective pod spec, which the
// instance must run with, and release, which gives the reservation back
// when the instance is gone (calling it again does nothing).
//
// A refusal is an *ExceededError or an *UnsetError (both errors.Is
// ErrExceeded) whose text is Kubernetes' and belongs on the Revision; the
// caller holds the scale-up and tries again later.
func (l *Ledger) Reserve(ctx context.Context, namespace string, spec *corev1.PodSpec) (pod *corev1.PodSpec, release func(), err error) {
	pod, usage, quotas, err := l.prepare(ctx, namespace, spec)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	if err := l.checkPodLocked(namespace, quotas, pod, usage, true); err != nil {
		l.mu.Unlock()
		return nil, nil, err
	}
	id := l.addLocked(namespace, usage)
	l.mu.Unlock()
	l.changed(namespace)
	return pod, l.releaser(namespace, id), nil
}

// Track records an instance that already runs (one adopted after a restart
// of knbox) with its effective pod spec, without checking quotas: as on a
// cluster, a quota lowered below what runs does not stop what runs.
func (l *Ledger) Track(namespace string, pod *corev1.PodSpec) (release func()) {
	// Its RuntimeClass's overhead too. The read is local; should it fail,
	// the instance is counted without (Track cannot refuse what runs).
	pod = pod.DeepCopy()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = WithOverhead(ctx, l.src, pod)
	cancel()
	l.mu.Lock()
	id := l.addLocked(namespace, PodUsage(pod))
	l.mu.Unlock()
	l.changed(namespace)
	return l.releaser(namespace, id)
}

// Fits checks, without reserving, that one instance of spec fits in
// namespace now, next to the instances that run: admission asks this for
// a new Revision's first instance.
func (l *Ledger) Fits(ctx context.Context, namespace string, spec *corev1.PodSpec) error {
	return l.check(ctx, namespace, spec, true)
}

// CanFit checks that one instance of spec could ever fit in namespace: its
// containers state what the quotas require, and it alone crosses no hard
// limit. Admission asks this of Service and Configuration templates, so that
// a template that can never run is refused at kubectl apply.
func (l *Ledger) CanFit(ctx context.Context, namespace string, spec *corev1.PodSpec) error {
	return l.check(ctx, namespace, spec, false)
}

func (l *Ledger) check(ctx context.Context, namespace string, spec *corev1.PodSpec, now bool) error {
	pod, usage, quotas, err := l.prepare(ctx, namespace, spec)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkPodLocked(namespace, quotas, pod, usage, now)
}

func (l *Ledger) prepare(ctx context.Context, namespace string, spec *corev1.PodSpec) (*corev1.PodSpec, corev1.ResourceList, []corev1.ResourceQuota, error) {
	pod, err := l.EffectivePod(ctx, namespace, spec)
	if err != nil {
		return nil, nil, nil, err
	}
	quotas, err := l.quotas(ctx, namespace)
	if err != nil {
		return nil, nil, nil, err
	}
	return pod, PodUsage(pod), quotas, nil
}

func (l *Ledger) quotas(ctx context.Context, namespace string) ([]corev1.ResourceQuota, error) {
	qs, err := l.src.ResourceQuotas(ctx, namespace)
	if err != nil {
		return nil, fmt.Errorf("read resource quotas of namespace %s: %w", namespace, err)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	return qs, nil
}

// checkPodLocked checks one instance with usage against each quota that
// covers it: first that its containers state what the quota requires, then
// that the quota's hard limits hold (counting what runs when now is set).
func (l *Ledger) checkPodLocked(ns string, quotas []corev1.ResourceQuota, pod *corev1.PodSpec, usage corev1.ResourceList, now bool) error {
	for i := range quotas {
		rq := &quotas[i]
		if !podInScope(rq, usage) {
			continue
		}
		if m := missing(rq.Spec.Hard, pod); m != nil {
			return &UnsetError{Quota: rq.Name, Missing: m}
		}
		used := l.podUsedLocked(ns, rq)
		var e *ExceededError
		for _, n := range sortedNames(rq.Spec.Hard) {
			req, ok := usage[n]
			if !ok || !isPodResource(n) {
				continue
			}
			hard := rq.Spec.Hard[n]
			total := req.DeepCopy()
			if now {
				total.Add(used[n])
			}
			if total.Cmp(hard) > 0 {
				if e == nil {
					e = &ExceededError{Quota: rq.Name, Requested: corev1.ResourceList{}, Used: corev1.ResourceList{}, Hard: corev1.ResourceList{}}
				}
				e.Requested[n], e.Used[n], e.Hard[n] = req.DeepCopy(), used[n].DeepCopy(), hard.DeepCopy()
			}
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// CheckCreate checks that one more object of gr fits the object count
// quotas of namespace (count/<resource>.<group>, and configmaps, secrets,
// ... for core kinds). The caller makes sure no other create of a counted
// object in namespace runs between this check and its write.
func (l *Ledger) CheckCreate(ctx context.Context, namespace string, gr schema.GroupResource) error {
	quotas, err := l.quotas(ctx, namespace)
	if err != nil {
		return err
	}
	names := objectCountNames(gr)
	var count *int64
	for i := range quotas {
		rq := &quotas[i]
		if scoped(rq) {
			continue
		}
		var e *ExceededError
		for _, n := range names {
			hard, ok := rq.Spec.Hard[n]
			if !ok {
				continue
			}
			if count == nil {
				c, err := l.src.Count(ctx, gr, namespace)
				if err != nil {
					return fmt.Errorf("count %s in namespace %s: %w", gr, namespace, err)
				}
				count = &c
			}
			if *count+1 > hard.Value() {
				if e == nil {
					e = &ExceededError{Quota: rq.Name, Requested: corev1.ResourceList{}, Used: corev1.ResourceList{}, Hard: corev1.ResourceList{}}
				}
				e.Requested[n] = *resource.NewQuantity(1, resource.DecimalSI)
				e.Used[n] = *resource.NewQuantity(*count, resource.DecimalSI)
				e.Hard[n] = hard.DeepCopy()
			}
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// Used computes what rq's namespace uses of each resource rq limits: its
// status.used. Instances' resources come from the reservations rq covers,
// object counts from the store; resources knbox has nothing of (storage,
// core Services, ...) are 0.
func (l *Ledger) Used(ctx context.Context, rq *corev1.ResourceQuota) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	counts := map[schema.GroupResource]int64{}
	for n := range rq.Spec.Hard {
		gr, counted := countedResource(n)
		switch {
		case isPodResource(n):
			continue
		case counted && !scoped(rq):
			c, ok := counts[gr]
			if !ok {
				var err error
				if c, err = l.src.Count(ctx, gr, rq.Namespace); err != nil {
					return nil, fmt.Errorf("count %s in namespace %s: %w", gr, rq.Namespace, err)
				}
				counts[gr] = c
			}
			out[n] = *resource.NewQuantity(c, resource.DecimalSI)
		default:
			out[n] = *resource.NewQuantity(0, resource.DecimalSI)
		}
	}
	l.mu.Lock()
	used := l.podUsedLocked(rq.Namespace, rq)
	l.mu.Unlock()
	for n := range rq.Spec.Hard {
		if isPodResource(n) {
			if q, ok := used[n]; ok {
				out[n] = q
			} else {
				out[n] = *resource.NewQuantity(0, resource.DecimalSI)
			}
		}
	}
	return out, nil
}

// podUsedLocked sums the reservations of ns that rq covers, for the
// resources rq limits.
func (l *Ledger) podUsedLocked(ns string, rq *corev1.ResourceQuota) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, usage := range l.pods[ns] {
		if !podInScope(rq, usage) {
			continue
		}
		for n, q := range usage {
			if _, limited := rq.Spec.Hard[n]; !limited {
				continue
			}
			v := out[n]
			v.Add(q)
			out[n] = v
		}
	}
	return out
}

func (l *Ledger) addLocked(ns string, usage corev1.ResourceList) uint64 {
	l.next++
	if l.pods[ns] == nil {
		l.pods[ns] = map[uint64]corev1.ResourceList{}
	}
	l.pods[ns][l.next] = usage
	return l.next
}

func (l *Ledger) releaser(ns string, id uint64) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.pods[ns], id)
			if len(l.pods[ns]) == 0 {
				delete(l.pods, ns)
			}
			l.mu.Unlock()
			l.changed(ns)
		})
	}
}
