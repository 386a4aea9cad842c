package quota_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/knbox/knbox/pkg/quota"
)

// source stands in for the API server's store.
type source struct{}

func (source) ResourceQuotas(context.Context, string) ([]corev1.ResourceQuota, error) {
	return []corev1.ResourceQuota{{
		ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: "team-a"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"limits.cpu": resource.MustParse("1")}},
	}}, nil
}

func (source) LimitRanges(context.Context, string) ([]corev1.LimitRange, error) {
	return []corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{"cpu": resource.MustParse("600m")},
	}}}}}, nil
}

func (source) Count(context.Context, schema.GroupResource, string) (int64, error) { return 0, nil }

// The runtime's side: before each instance it starts (a scale-up, the
// deployment probe's first instance), it reserves; it starts the instance
// with the effective pod spec; it releases when the instance is gone. A
// refusal holds the scale-up and belongs on the Revision as a cluster puts
// a ReplicaSet's failure there: condition ResourcesAvailable False, reason
// FailedCreate, message the error's text.
func ExampleLedger_Reserve() {
	ledger := quota.NewLedger(source{})
	revision := &corev1.PodSpec{Containers: []corev1.Container{{Name: "user-container"}}}
	ctx := context.Background()

	pod, release, err := ledger.Reserve(ctx, "team-a", revision)
	if err != nil {
		panic(err)
	}
	lim := pod.Containers[0].Resources.Limits["cpu"]
	fmt.Println("first instance runs with the LimitRange's cpu limit", lim.String())

	_, _, err = ledger.Reserve(ctx, "team-a", revision)
	fmt.Println("second instance held:", errors.Is(err, quota.ErrExceeded))
	fmt.Println(err)

	release() // the first instance is gone
	_, _, err = ledger.Reserve(ctx, "team-a", revision)
	fmt.Println("after release:", err)
	// Output:
	// first instance runs with the LimitRange's cpu limit 600m
	// second instance held: true
	// exceeded quota: compute, requested: limits.cpu=600m, used: limits.cpu=600m, limited: limits.cpu=1
	// after release: <nil>
}
