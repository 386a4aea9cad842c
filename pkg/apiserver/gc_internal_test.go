package apiserver

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// TestGCRelevant: an update queues a garbage collector pass when it
// changes the owner references or the object is being deleted, and only
// then.
func TestGCRelevant(t *testing.T) {
	ref := func(uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "serving.knative.dev/v1", Kind: "Configuration", Name: "c", UID: ktypes.UID("uid-" + uid)}
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		old, cur metav1.ObjectMeta
		want     bool
	}{
		{"no owners", metav1.ObjectMeta{}, metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}, false},
		{"same owners (a status update)", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1")}},
			metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1")}}, false},
		{"nil and empty owners", metav1.ObjectMeta{}, metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{}}, false},
		{"owner added", metav1.ObjectMeta{}, metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1")}}, true},
		{"owner removed", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1"), ref("2")}},
			metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1")}}, true},
		{"owner replaced", metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("1")}},
			metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("2")}}, true},
		{"being deleted", metav1.ObjectMeta{DeletionTimestamp: &now, Finalizers: []string{"f"}},
			metav1.ObjectMeta{DeletionTimestamp: &now}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gcRelevant(&tc.old, &tc.cur); got != tc.want {
				t.Errorf("gcRelevant = %v, want %v", got, tc.want)
			}
		})
	}
}
