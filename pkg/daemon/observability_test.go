package daemon

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	serving "knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestRevisionNames: the metrics' revision informer keeps what labels and
// Forget read, and not the spec or status.
func TestRevisionNames(t *testing.T) {
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels:        map[string]string{serving.ServiceLabelKey: "s", serving.ConfigurationLabelKey: "c"},
			Annotations:   map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{Containers: []corev1.Container{{Image: "img"}}}},
	}
	got, err := revisionNames(rev)
	if err != nil {
		t.Fatal(err)
	}
	r := got.(*servingv1.Revision)
	if r.Name != "r" || r.Namespace != "ns" || r.UID != "u" || r.ResourceVersion != "7" ||
		r.Labels[serving.ServiceLabelKey] != "s" || r.Labels[serving.ConfigurationLabelKey] != "c" {
		t.Errorf("kept %+v", r.ObjectMeta)
	}
	if len(r.Spec.Containers) != 0 || r.Annotations != nil || r.ManagedFields != nil {
		t.Errorf("kept more than names and labels: %+v", r)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/r", Obj: r}
	if got, err := revisionNames(tomb); err != nil || got != tomb {
		t.Errorf("tombstone: %v, %v", got, err)
	}
}
