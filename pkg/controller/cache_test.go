package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestTrimForCache: the transform drops managedFields only; what the
// controllers read (spec, status, labels, annotations, owners, finalizers,
// generation, resourceVersion) is kept, and tombstones pass through.
func TestTrimForCache(t *testing.T) {
	yes := true
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "u", ResourceVersion: "7", Generation: 2,
			Labels:          map[string]string{"serving.knative.dev/configuration": "c"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Configuration", Name: "c", UID: "o", Controller: &yes}},
			Finalizers:      []string{"f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: "img"}}}},
	}
	rev.Status.SetConditions(apis.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionTrue}})
	want := rev.DeepCopy()
	want.ManagedFields = nil

	got, err := TrimForCache(rev)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("trimmed: %+v\nwant %+v", got, want)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/r", Obj: want}
	if got, err := TrimForCache(tomb); err != nil || got != tomb {
		t.Errorf("tombstone: %v, %v", got, err)
	}
}
