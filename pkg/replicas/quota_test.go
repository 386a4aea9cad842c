package replicas

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/quota"
)

// quotaObjects is quota.Source over a ResourceQuota the test changes.
type quotaObjects struct {
	mu     sync.Mutex
	quotas []corev1.ResourceQuota
}

func (q *quotaObjects) ResourceQuotas(context.Context, string) ([]corev1.ResourceQuota, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]corev1.ResourceQuota(nil), q.quotas...), nil
}

func (q *quotaObjects) LimitRanges(context.Context, string) ([]corev1.LimitRange, error) {
	return nil, nil
}

func (q *quotaObjects) Count(context.Context, schema.GroupResource, string) (int64, error) {
	return 0, nil
}

func (q *quotaObjects) setHard(ns, memory string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.quotas = []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceLimitsMemory: resource.MustParse(memory)}}}}
}

var _ quota.Source = (*quotaObjects)(nil)

// TestQuotaHoldsScaleUp: a scale-up that would cross the namespace's
// ResourceQuota is held (the instance is not made) and reported with the
// quota, the resource, used, requested and hard; an instance that stops
// gives its share back, so a held scale-up proceeds; a raised quota lets it
// proceed too. A revision none of whose instances fits fails with the same
// reason.
func TestQuotaHoldsScaleUp(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	objs := &quotaObjects{}
	objs.setHard("ns1", "128Mi")
	ledger := quota.NewLedger(objs)
	e := newEnv(t, []string{"runc"}, withOptions(func(o *Options) { o.Quota = ledger }))
	e.synced()
	usedMemory := func() string {
		used, err := ledger.Used(context.Background(), &objs.ResourceQuotasNow()[0])
		if err != nil {
			t.Fatal(err)
		}
		q := used[corev1.ResourceLimitsMemory]
		return q.String()
	}
	name := uniqueName("quota")
	rev := newRev(t, "ns1", name, "runc", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	if got := usedMemory(); got != "48Mi" {
		t.Errorf("used %s with one instance, want 48Mi", got)
	}

	// Two fit in 128Mi, the third does not.
	e.scale.set("ns1", name, 3)
	st := e.waitState(rev, time.Minute, "2 ready and the third held", func(st State) bool { return st.Actual == 2 && st.HeldReason != "" })
	if st.Failed || !st.Ready || st.HeldReason != ReasonExceededQuota {
		t.Errorf("state %+v, want ready with the scale-up held", st)
	}
	for _, w := range []string{"scale to 3 held", "exceeded quota: compute", "requested: limits.memory=48Mi", "used: limits.memory=96Mi", "limited: limits.memory=128Mi"} {
		if !strings.Contains(st.HeldMessage, w) {
			t.Errorf("held message %q lacks %q", st.HeldMessage, w)
		}
	}
	if n := e.instances("ns1", name); n != 2 {
		t.Errorf("%d instances while the third is held, want 2", n)
	}
	if got := usedMemory(); got != "96Mi" {
		t.Errorf("used %s with two instances, want 96Mi", got)
	}

	// Down to one: the stopped instance gives its share back.
	e.scale.set("ns1", name, 1)
	go e.drainAll(context.Background())
	st = e.waitState(rev, time.Minute, "one instance", func(st State) bool { return e.instances("ns1", name) == 1 && st.HeldReason == "" })
	eventually(t, 30*time.Second, "the stopped instance's reservation released", func() bool { return usedMemory() == "48Mi" })

	// Back to three: held again at two; the quota raised, the third comes.
	e.scale.set("ns1", name, 3)
	e.waitState(rev, time.Minute, "held at two", func(st State) bool { return st.Actual == 2 && st.HeldReason == ReasonExceededQuota })
	objs.setHard("ns1", "256Mi")
	st = e.waitState(rev, time.Minute, "three ready", func(st State) bool { return st.Actual == 3 })
	if st.HeldReason != "" {
		t.Errorf("state %+v: still held", st)
	}

	// A revision none of whose instances fits: failed, of resources.
	big := uniqueName("quota-big")
	rev2 := newRev(t, "ns1", big, "runc", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")}
	})
	e.resolveAndEnsure(rev2)
	st = e.waitState(rev2, time.Minute, "failed", failed)
	if st.Reason != ReasonExceededQuota || !st.ResourcesFailed || !strings.Contains(st.Message, "exceeded quota: compute") {
		t.Errorf("state %+v, want ExceededQuota of resources", st)
	}
	if n := e.instances("ns1", big); n != 0 {
		t.Errorf("%d instances of a revision that does not fit", n)
	}
}

// ResourceQuotasNow is the quota as set.
func (q *quotaObjects) ResourceQuotasNow() []corev1.ResourceQuota {
	qs, _ := q.ResourceQuotas(context.Background(), "")
	return qs
}

// classObjects is quotaObjects that also serves RuntimeClasses.
type classObjects struct {
	quotaObjects
	classes map[string]*nodev1.RuntimeClass
}

func (c *classObjects) RuntimeClass(_ context.Context, name string) (*nodev1.RuntimeClass, error) {
	if rc, ok := c.classes[name]; ok {
		return rc, nil
	}
	return nil, apierrors.NewNotFound(nodev1.Resource("runtimeclasses"), name)
}

// TestQuotaCountsRuntimeClassOverhead: a scale-up reserves the instance's
// RuntimeClass overhead besides its containers, the class being the
// default one when the revision names none, and is held when the overhead
// crosses the quota.
func TestQuotaCountsRuntimeClassOverhead(t *testing.T) {
	objs := &classObjects{classes: map[string]*nodev1.RuntimeClass{
		"sandboxed": {ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "runsc",
			Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}},
	}}
	objs.setHard("ns1", "128Mi")
	ledger := quota.NewLedger(objs)
	e := newEnv(t, nil, withOptions(func(o *Options) { o.Quota, o.DefaultRuntimeClass = ledger, "sandboxed" }))
	e.synced()
	rev := newRev(t, "ns1", uniqueName("overhead"), "", "img", func(r *servingv1.Revision) {
		r.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")}
	})
	r := newRevision(e.m, key{"ns1", rev.Name}, rev)
	defer r.cancel()
	if _, ok := r.reserve(&pod.Spec{}, 1); !ok {
		t.Fatalf("first instance (48Mi + 64Mi in 128Mi) held: %+v", r.blocked)
	}
	used, err := ledger.Used(context.Background(), &objs.ResourceQuotasNow()[0])
	if err != nil {
		t.Fatal(err)
	}
	if q := used[corev1.ResourceLimitsMemory]; q.String() != "112Mi" {
		t.Errorf("used limits.memory %s, want 112Mi (48Mi and the class's 64Mi)", q.String())
	}
	if _, ok := r.reserve(&pod.Spec{}, 2); ok {
		t.Fatal("a second instance crossed the quota")
	}
	if r.blocked == nil || !strings.Contains(r.blocked.message, "requested: limits.memory=112Mi") {
		t.Errorf("held: %+v, want the overhead in the request", r.blocked)
	}
}
