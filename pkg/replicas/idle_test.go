package replicas

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// looping tells whether revision ns/name's loop has a goroutine.
func (e *env) looping(ns, name string) bool {
	r := e.m.revision(ns, name)
	if r == nil {
		return false
	}
	e.m.loopMu.Lock()
	defer e.m.loopMu.Unlock()
	return r.running
}

// TestIdleRevisionHasNoGoroutine: a revision at zero keeps no goroutine of
// its own; the autoscaler's scale-up starts its loop again, which makes
// the instance, and a scale-down to zero stops it; Detach still ends every
// revision (its done is closed).
func TestIdleRevisionHasNoGoroutine(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	name := uniqueName("idle")
	rev := newRev(t, "ns1", name, "process", ref)
	e.scale.set("ns1", name, 0)
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", func(st State) bool { return st.Ready })
	e.waitState(rev, time.Minute, "at zero", func(st State) bool { return st.Actual == 0 && e.instances("ns1", name) == 0 })
	eventually(t, 10*time.Second, "no loop goroutine at zero", func() bool { return !e.looping("ns1", name) })

	e.scale.set("ns1", name, 1)
	e.waitState(rev, time.Minute, "1 ready", func(st State) bool { return st.Actual == 1 })
	if eps := e.m.Endpoints("ns1", name); len(eps) != 1 {
		t.Fatalf("endpoints %v", endpointIDs(eps))
	}
	dctx, dcancel := context.WithCancel(context.Background())
	defer dcancel()
	go e.drainAll(dctx) // as the router would: nothing is in flight
	e.scale.set("ns1", name, 0)
	e.waitState(rev, time.Minute, "at zero again", func(st State) bool { return st.Actual == 0 && e.instances("ns1", name) == 0 })
	eventually(t, 10*time.Second, "no loop goroutine at zero again", func() bool { return !e.looping("ns1", name) })

	r := e.m.revision("ns1", name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	default:
		t.Error("Detach returned; the idle revision's done is open")
	}
	e.m.loopMu.Lock()
	running := r.running
	e.m.loopMu.Unlock()
	if running {
		t.Error("the revision's loop runs after Detach")
	}
}

// TestKeepHoldsSpecAndShownMetadata: the copy a revision holds has the
// Revision's spec and the metadata its instances show, not its status or
// other metadata, and shares nothing with the informer's object.
func TestKeepHoldsSpecAndShownMetadata(t *testing.T) {
	rev := newRev(t, "ns1", "keep", "process", "example.com/image@sha256:"+strings.Repeat("0", 64), func(r *servingv1.Revision) {
		r.UID = "uid-1"
		r.Labels = map[string]string{"serving.knative.dev/service": "svc"}
		r.Annotations = map[string]string{"autoscaling.knative.dev/initial-scale": "0"}
		r.OwnerReferences = []metav1.OwnerReference{{Kind: "Configuration", Name: "svc", UID: "uid-0"}}
		r.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "knbox"}}
		r.Status.MarkContainerHealthyTrue()
		r.Status.ContainerStatuses = []servingv1.ContainerStatus{{Name: "user-container", ImageDigest: "example.com/image@sha256:" + strings.Repeat("1", 64)}}
	})
	k := keep(rev)
	if k.Name != rev.Name || k.Namespace != rev.Namespace || k.UID != rev.UID ||
		!equality.Semantic.DeepEqual(k.Labels, rev.Labels) || !equality.Semantic.DeepEqual(k.Annotations, rev.Annotations) ||
		!equality.Semantic.DeepEqual(k.Spec, rev.Spec) {
		t.Errorf("keep lost what instances show:\n%+v\nof\n%+v", k, rev)
	}
	if k.OwnerReferences != nil || k.ManagedFields != nil || !equality.Semantic.DeepEqual(k.Status, servingv1.RevisionStatus{}) {
		t.Errorf("keep holds more than it needs: %+v", k)
	}
	rev.Labels["serving.knative.dev/service"] = "other"
	rev.Spec.Containers[0].Image = "other"
	if k.Labels["serving.knative.dev/service"] != "svc" || k.Spec.Containers[0].Image == "other" {
		t.Error("keep shares maps or slices with the Revision")
	}
}

// BenchmarkKeep compares what a revision holds of a Revision as the
// controller passes it at rest (ready, at zero, its status filled in):
// the whole object (DeepCopy, as it did) against keep.
func BenchmarkKeep(b *testing.B) {
	rev := newRev(b, "default", "idle-001-00001", "", "example.com/image@sha256:"+strings.Repeat("0", 64), func(r *servingv1.Revision) {
		r.UID = "0f5e3a52-3f0c-4d4b-9f43-a1b2c3d4e5f6"
		r.Generation = 1
		r.Labels = map[string]string{"serving.knative.dev/configuration": "idle-001", "serving.knative.dev/configurationGeneration": "1",
			"serving.knative.dev/configurationUID": "7c1a5e2f-1f3b-4b8e-8a7c-0a1b2c3d4e5f", "serving.knative.dev/routingState": "active",
			"serving.knative.dev/service": "idle-001", "serving.knative.dev/serviceUID": "4b1e6f3a-2c7d-4e9a-b1f0-0a1b2c3d4e5f"}
		r.Annotations = map[string]string{"autoscaling.knative.dev/initial-scale": "0", "serving.knative.dev/creator": "system:admin",
			"serving.knative.dev/routingStateModified": "2026-11-28T13:22:18Z"}
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Configuration", Name: "idle-001",
			UID: "7c1a5e2f-1f3b-4b8e-8a7c-0a1b2c3d4e5f", Controller: ptrBool(true), BlockOwnerDeletion: ptrBool(true)}}
		r.Status.InitializeConditions()
		r.Status.MarkContainerHealthyTrue()
		r.Status.MarkResourcesAvailableTrue()
		r.Status.MarkActiveFalse("NoTraffic", "The target is not receiving traffic.")
		r.Status.ObservedGeneration = 1
		r.Status.LogURL = ""
		r.Status.ContainerStatuses = []servingv1.ContainerStatus{{Name: "user-container", ImageDigest: "example.com/image@sha256:" + strings.Repeat("1", 64)}}
		zero := int32(0)
		r.Status.ActualReplicas, r.Status.DesiredReplicas = &zero, &zero
	})
	for _, bc := range []struct {
		name string
		copy func(*servingv1.Revision) *servingv1.Revision
	}{{"DeepCopy", (*servingv1.Revision).DeepCopy}, {"keep", keep}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.copy(rev)
			}
		})
	}
}
