package replicas

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// spares lists the prepared sandboxes of revision name: pods of the
// revision that are prepared and not instances.
func (e *env) spares(name string) []string {
	var out []string
	for _, st := range e.pods.List() {
		if st.Labels[LabelRevision] == name && st.Prepared {
			out = append(out, st.ID)
		}
	}
	return out
}

// podsOf lists every pod of revision name (instances and sandboxes).
func (e *env) podsOf(name string) []string {
	var out []string
	for _, st := range e.pods.List() {
		if st.Labels[LabelRevision] == name {
			out = append(out, st.ID)
		}
	}
	return out
}

func (e *env) awaitSpare(name string, not ...string) string {
	e.t.Helper()
	var id string
	eventually(e.t, time.Minute, "a prepared sandbox of "+name, func() bool {
		s := e.spares(name)
		if len(s) == 1 && !slices.Contains(not, s[0]) {
			id = s[0]
			return true
		}
		return false
	})
	return id
}

// preparedEnv is a synced env of runc pods with room for count prepared
// sandboxes (and memory without bound), with the runtime-info image.
func preparedEnv(t *testing.T, count int) (h, ref string, e *env) {
	h = "runc"
	requireHandler(t, h)
	ref = runtimeInfoImage(t)
	e = newEnv(t, []string{h}, withShims(), withOptions(func(o *Options) {
		o.Prepared = &PreparedBudget{Count: count, Memory: 1 << 40}
	}))
	e.synced()
	return h, ref, e
}

// TestPreparedSandbox: a revision at zero keeps one prepared sandbox,
// which is no Pod, no endpoint and no ready capacity; the scale-up from
// zero starts it (the instance is the sandbox) and the next is prepared;
// a Secret the revision reads changing drops it for a new one; the
// revision's removal leaves nothing.
func TestPreparedSandbox(t *testing.T) {
	h, ref, e := preparedEnv(t, 4)
	e.setSecret("ns1", "creds", map[string]string{"password": "one"})
	name := uniqueName("prep")
	rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: secretRef("creds", "password", false)}}
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	e.scale.set("ns1", name, 0)
	e.waitState(rev, time.Minute, "at zero", func(st State) bool { return st.Actual == 0 && e.instances("ns1", name) == 0 })
	sp := e.awaitSpare(name)
	if n, _ := e.m.PreparedSandboxes(); n != 1 {
		t.Errorf("PreparedSandboxes: %d, want 1", n)
	}
	for _, p := range e.m.Pods() {
		if p.Labels[LabelRevision] == name {
			t.Errorf("the prepared sandbox shows as Pod %s", p.Name)
		}
	}
	if eps := e.m.Endpoints("ns1", name); len(eps) != 0 || e.m.Ready("ns1", name) != 0 {
		t.Errorf("at zero with a sandbox: endpoints %v, ready %d", endpointIDs(eps), e.m.Ready("ns1", name))
	}

	// The scale-up from zero starts the sandbox.
	e.activate("ns1", name)
	e.waitState(rev, time.Minute, "ready from zero", ready)
	eps := e.m.Endpoints("ns1", name)
	if len(eps) != 1 || eps[0].ID != sp {
		t.Fatalf("endpoints %v, want the prepared sandbox %s", endpointIDs(eps), sp)
	}
	if i := getInfo(t, eps[0]); i.Env["PASSWORD"] != "one" {
		t.Errorf("PASSWORD %q", i.Env["PASSWORD"])
	}
	// The next one, in the background.
	sp2 := e.awaitSpare(name, sp)

	// A Secret it reads changes: the sandbox goes, another is made.
	e.setSecret("ns1", "creds", map[string]string{"password": "two"})
	sp3 := e.awaitSpare(name, sp, sp2)
	e.scale.set("ns1", name, 2)
	e.waitState(rev, time.Minute, "2 ready", func(st State) bool { return st.Actual == 2 })
	got := false
	for _, ep := range e.m.Endpoints("ns1", name) {
		if ep.ID == sp3 {
			got = true
			if i := getInfo(t, ep); i.Env["PASSWORD"] != "two" {
				t.Errorf("after the Secret changed: PASSWORD %q", i.Env["PASSWORD"])
			}
		}
	}
	if !got {
		t.Errorf("endpoints %v, want the new sandbox %s among them", endpointIDs(e.m.Endpoints("ns1", name)), sp3)
	}

	// Its RuntimeClass changes: the sandbox made after the scale-up goes,
	// another is made.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sp4 := e.awaitSpare(name, sp, sp2, sp3)
	rc, err := e.kube.NodeV1().RuntimeClasses().Get(ctx, h, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc.Labels = map[string]string{"changed": "yes"}
	if _, err := e.kube.NodeV1().RuntimeClasses().Update(ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.awaitSpare(name, sp, sp2, sp3, sp4)

	// Removed: nothing is left of it, its sandbox included.
	if err := e.m.Remove(ctx, "ns1", name); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "no pod of the removed revision", func() bool { return len(e.podsOf(name)) == 0 })
	if m, n, c := e.leftovers(name); m != 0 || n != 0 || c != 0 {
		t.Errorf("after Remove: %d mounts, %d namespaces, %d containers", m, n, c)
	}
	if n, _ := e.m.PreparedSandboxes(); n != 0 {
		t.Errorf("PreparedSandboxes after Remove: %d", n)
	}
}

// TestPreparedBudget: with room for one sandbox, the revision requested
// last has it (LRU by last request), and the count is never exceeded.
func TestPreparedBudget(t *testing.T) {
	h, ref, e := preparedEnv(t, 1)
	a, b := uniqueName("lru-a"), uniqueName("lru-b")
	revA, revB := newRev(t, "ns1", a, h, ref), newRev(t, "ns1", b, h, ref)
	e.resolveAndEnsure(revA)
	e.waitState(revA, time.Minute, "a ready", ready)
	e.scale.set("ns1", a, 0)
	e.awaitSpare(a)
	// b is newer: at zero, it takes the one place from a.
	e.resolveAndEnsure(revB)
	e.waitState(revB, time.Minute, "b ready", ready)
	e.scale.set("ns1", b, 0)
	e.awaitSpare(b)
	eventually(t, time.Minute, "a's sandbox gone", func() bool { return len(e.podsOf(a)) == 0 })
	// A request for a (at zero, its scale not raised): a is the most
	// recent now and takes the place back.
	e.m.Poke("ns1", a)
	e.awaitSpare(a)
	eventually(t, time.Minute, "b's sandbox gone", func() bool { return len(e.podsOf(b)) == 0 })
	if n, _ := e.m.PreparedSandboxes(); n != 1 {
		t.Errorf("PreparedSandboxes: %d, want 1", n)
	}
}

// TestPreparedBudgetChurn: revisions at zero whose requests keep taking
// the one place from each other evict sandboxes while they are still being
// prepared; once the requests stop, one sandbox is left and no pod outside
// the budget (a sandbox dropped during its preparation is stopped too).
func TestPreparedBudgetChurn(t *testing.T) {
	h, ref, e := preparedEnv(t, 1)
	var names []string
	for i := range 4 {
		name := uniqueName(fmt.Sprintf("churn-%d", i))
		names = append(names, name)
		rev := newRev(t, "ns1", name, h, ref)
		e.resolveAndEnsure(rev)
		e.waitState(rev, time.Minute, name+" ready", ready)
	}
	for _, n := range names {
		e.scale.set("ns1", n, 0)
	}
	for round := range 40 { // bounded: 40 pokes, 50 ms apart
		e.m.Poke("ns1", names[round%len(names)])
		time.Sleep(50 * time.Millisecond)
	}
	pods := func() (all int) {
		for _, n := range names {
			all += len(e.podsOf(n))
		}
		return all
	}
	eventually(t, 2*time.Minute, "one pod (the sandbox) left of the four revisions", func() bool { return pods() == 1 })
	time.Sleep(2 * time.Second) // a late preparation would show now
	if n := pods(); n != 1 {
		t.Errorf("%d pods of the four revisions at zero, want 1 (the budget's one sandbox)", n)
	}
	if n, _ := e.m.PreparedSandboxes(); n != 1 {
		t.Errorf("PreparedSandboxes: %d, want 1", n)
	}
}

// TestDetachStopsPreparedSandboxes: Detach leaves the instances running
// for a successor but stops the prepared sandboxes, which nothing would
// use.
func TestDetachStopsPreparedSandboxes(t *testing.T) {
	h, ref, e := preparedEnv(t, 4)
	name := uniqueName("detach")
	rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
		r.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	sp := e.awaitSpare(name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.spares(name); len(s) != 0 {
		t.Errorf("prepared sandboxes after Detach: %v", s)
	}
	if _, ok := e.pods.Status(sp); ok {
		t.Errorf("the prepared sandbox %s is still a pod after Detach", sp)
	}
	if pods := e.podsOf(name); len(pods) != 1 {
		t.Errorf("pods after Detach: %v, want the one instance", pods)
	}
}
