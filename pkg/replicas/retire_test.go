package replicas

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestRetireDoesNotWaitOrReplace: the instances of a deleted Revision whose
// Pods the garbage collector deletes are not replaced; the removal returns
// at once while the instances (which ignore SIGTERM, with a long grace
// period) stop in the background, shown as Terminating Pods; a Revision
// of the same name made again runs at once beside them; in the end no
// instance of the old one is left in the pod runtime, and only its logs
// are gone.
func TestRetireDoesNotWaitOrReplace(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e := newEnv(t, []string{"runc"})
	e.synced()
	name := uniqueName("retire")
	rev := newRev(t, "ns1", name, "runc", ref, shell("trap '' TERM; exec httpd -f -p 8080"),
		func(r *servingv1.Revision) { r.Spec.TimeoutSeconds = ptr.Int64(60) })
	e.scale.set("ns1", name, 3)
	e.resolveAndEnsure(rev)
	podsOf := func(uid types.UID) []*corev1.Pod {
		var out []*corev1.Pod
		for _, p := range e.m.Pods() {
			if p.Namespace == "ns1" && len(p.OwnerReferences) == 1 && p.OwnerReferences[0].UID == uid {
				out = append(out, p)
			}
		}
		return out
	}
	eventually(t, 3*time.Minute, "three ready instances", func() bool {
		ps := podsOf(rev.UID)
		n := 0
		for _, p := range ps {
			if podReady(p) {
				n++
			}
		}
		_, _ = e.m.Ensure(context.Background(), rev)
		return len(ps) == 3 && n == 3
	})
	old := map[string]string{} // Pod name -> instance
	for _, p := range podsOf(rev.UID) {
		old[p.Name] = p.Annotations[AnnotationInstance]
	}

	// The garbage collector deletes a Pod of the deleted Revision before
	// the Revision reconciler has seen the delete: the revision is
	// retired at once, nothing replaces the instance.
	var first string
	for p := range old {
		first = p
		break
	}
	if err := e.m.OwnerGone("ns1", first, "another-uid"); err != nil {
		t.Fatal(err)
	}
	if got := len(podsOf(rev.UID)); got != 3 || e.m.revision("ns1", name) == nil {
		t.Fatalf("OwnerGone of another owner's UID changed the revision (%d pods)", got)
	}
	if err := e.m.OwnerGone("ns1", first, rev.UID); err != nil {
		t.Fatal(err)
	}
	if e.m.revision("ns1", name) != nil {
		t.Error("the revision of a Pod whose owner is gone is still known by its name")
	}
	// The reconciler's Remove follows; it does not wait for the instances.
	done := e.m.Retire("ns1", name)
	// The router's word that an instance it was given is drained reaches
	// the revision being removed.
	for _, id := range old {
		e.m.mu.Lock()
		r := e.m.pods[id]
		e.m.mu.Unlock()
		if r == nil {
			continue // stopped already
		}
		r.mu.Lock()
		in := r.instances[id]
		r.mu.Unlock()
		if in == nil {
			continue
		}
		eventually(t, time.Minute, "instance "+id+" stopping", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return in.stopping
		})
		e.m.Drained("ns1", name, id)
		select {
		case <-in.drainedCh:
		default:
			t.Errorf("Drained of %s did not reach its revision, being removed", id)
		}
	}
	eventually(t, time.Minute, "every old Pod Terminating", func() bool {
		ps := podsOf(rev.UID)
		for _, p := range ps {
			if p.DeletionTimestamp == nil {
				return false
			}
		}
		return len(ps) == 3
	})

	// The name is free at once: a new Revision of it (another UID) runs
	// while the old instances still stop.
	rev2 := newRev(t, "ns1", name, "runc", ref, shell("exec httpd -f -p 8080"))
	rev2.UID = types.UID("uid2-" + name)
	e.scale.set("ns1", name, 1)
	e.resolveAndEnsure(rev2)
	e.waitState(rev2, 3*time.Minute, "the new revision ready", ready)
	var newID string
	for _, p := range podsOf(rev2.UID) {
		newID = p.Annotations[AnnotationInstance]
	}

	// The old instances end, none replaced, none left in the runtime.
	eventually(t, 5*time.Minute, "the old instances gone", func() bool {
		ps := podsOf(rev.UID)
		for _, p := range ps {
			if _, ok := old[p.Name]; !ok {
				t.Fatalf("pod %s of the removed revision made after its removal", p.Name)
			}
		}
		return len(ps) == 0
	})
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Retire's channel not closed once the instances are gone")
	}
	for _, id := range old {
		if _, ok := e.pods.Status(id); ok {
			t.Errorf("instance %s of the removed revision is still in the pod runtime", id)
		}
	}
	for _, st := range e.pods.List() {
		if st.Labels[LabelRevisionUID] == string(rev.UID) {
			t.Errorf("pod runtime still has %s of the removed revision", st.ID)
		}
	}
	if st, _ := e.m.Ensure(context.Background(), rev2); !ready(st) {
		t.Errorf("the new revision after the old one ended: %+v", st)
	}
	dir, err := e.logs.Dir("ns1", name)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var files []string
	for _, f := range ents {
		files = append(files, f.Name())
	}
	for _, id := range old {
		if _, err := os.Stat(filepath.Join(dir, id+".log")); err == nil {
			t.Errorf("log of removed instance %s kept (files %v)", id, files)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, newID+".log")); err != nil {
		t.Errorf("log of the new revision's instance %s: %v (files %v)", newID, err, files)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go e.drainAll(ctx)
	if err := e.m.Remove(ctx, "ns1", name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("logs of %s after Remove: %s", name, strings.Join(files, ", "))
	}
	if m, n, c := e.leftovers(name); m != 0 || n != 0 || c != 0 {
		t.Errorf("left: %d mounts, %d namespaces, %d containers", m, n, c)
	}
}
