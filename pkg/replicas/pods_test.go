package replicas

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/serving/pkg/apis/serving"

	"github.com/knbox/knbox/pkg/pod"
)

// TestPodsMirrorInstances runs a revision and reads its instance as a Pod:
// Knative's names and labels, the owner, phase, conditions and container
// statuses; then deletes the Pod and checks that the instance stops and
// the revision replaces it.
func TestPodsMirrorInstances(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	e.synced()
	var notes atomic.Int32
	e.m.SubscribePods(func(ns, name string) { notes.Add(1) })
	name := uniqueName("pods")
	rev := newRev(t, "ns1", name, "process", ref)
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)

	var first *corev1.Pod
	eventually(t, 30*time.Second, "a ready pod", func() bool {
		ps := e.m.Pods()
		if len(ps) != 1 || !podReady(ps[0]) {
			return false
		}
		first = ps[0]
		return true
	})
	if notes.Load() == 0 {
		t.Error("no pod notification")
	}
	p := first
	for k, want := range map[string]string{
		serving.ServiceLabelKey:       "svc-" + name,
		serving.ConfigurationLabelKey: "cfg-" + name,
		serving.RevisionLabelKey:      name,
		serving.RevisionUID:           string(rev.UID),
		"app":                         name,
	} {
		if got := p.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if want := name + "-deployment-"; !strings.HasPrefix(p.Name, want) || p.Annotations[AnnotationInstance] == "" ||
		PodName(name, p.Annotations[AnnotationInstance]) != p.Name {
		t.Errorf("pod %s (instance %q), want %s... as Knative names its pods", p.Name, p.Annotations[AnnotationInstance], want)
	}
	if p.Namespace != "ns1" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Revision" ||
		p.OwnerReferences[0].UID != rev.UID || p.OwnerReferences[0].Name != name {
		t.Errorf("pod %s/%s owners %+v, want the Revision", p.Namespace, p.Name, p.OwnerReferences)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("status %+v, want Running with one container", p.Status)
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.Name != "user-container" || !cs.Ready || cs.State.Running == nil || cs.RestartCount != 0 || cs.ImageID == "" {
		t.Errorf("container status %+v", cs)
	}
	if got, ok := e.m.Pod("ns1", p.Name); !ok || got.Name != p.Name {
		t.Errorf("Pod(%s) = %v, %v", p.Name, got, ok)
	}
	if _, ok := e.m.Pod("other", p.Name); ok {
		t.Error("a pod found in another namespace")
	}
	if err := e.m.DeletePod("ns1", "nope"); err != ErrNoInstance {
		t.Errorf("DeletePod of nothing: %v, want ErrNoInstance", err)
	}

	if err := e.m.DeletePod("ns1", p.Name); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.m.Pod("ns1", p.Name); ok && got.DeletionTimestamp == nil {
		t.Error("a stopping instance's Pod without a deletionTimestamp")
	}
	eventually(t, time.Minute, "the deleted pod gone and another ready", func() bool {
		ps := e.m.Pods()
		return len(ps) == 1 && ps[0].Name != p.Name && podReady(ps[0])
	})
	if _, ok := e.m.Pod("ns1", p.Name); ok {
		t.Error("the deleted pod is still there")
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestPodStatusFromRuntime checks how the runtime's states read as the
// kubelet's: creating, pull back-off, crash loop with the last
// termination and its message, running after restarts.
func TestPodStatusFromRuntime(t *testing.T) {
	spec := runSpec{containers: []corev1.Container{{Name: "user-container", Image: "img"}, {Name: "side", Image: "img2"}},
		refs: []string{"img@sha256:a", "img2@sha256:b"}}
	born := time.Now()
	exit := &pod.Failure{Reason: pod.ReasonError, Container: "user-container", ExitCode: 3, Message: "boom", At: born}
	for _, tc := range []struct {
		name     string
		st       pod.Status
		ready    bool
		phase    corev1.PodPhase
		waiting  string
		running  bool
		lastExit int32
		lastMsg  string
	}{
		{name: "pulling", st: pod.Status{Pulling: true}, phase: corev1.PodPending, waiting: "ContainerCreating"},
		{name: "pull back-off", st: pod.Status{Pulling: true, Failures: 1, LastFailure: &pod.Failure{Reason: pod.ReasonImagePullBackOff, Message: "nope"}},
			phase: corev1.PodPending, waiting: pod.ReasonImagePullBackOff},
		{name: "crash loop", st: pod.Status{Restarts: 2, Failures: 2, LastFailure: exit}, phase: corev1.PodRunning,
			waiting: "CrashLoopBackOff", lastExit: 3, lastMsg: "boom"},
		{name: "running again", st: pod.Status{Running: true, Ready: true, Restarts: 2, Failures: 2, LastFailure: exit}, ready: true,
			phase: corev1.PodRunning, running: true, lastExit: 3, lastMsg: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := podStatus(tc.st, spec, tc.ready, born)
			if ps.Phase != tc.phase {
				t.Errorf("phase %s, want %s", ps.Phase, tc.phase)
			}
			cs := ps.ContainerStatuses[0]
			if cs.RestartCount != int32(tc.st.Restarts) || cs.ImageID != "img@sha256:a" || cs.Ready != tc.ready {
				t.Errorf("status %+v", cs)
			}
			if (cs.State.Running != nil) != tc.running {
				t.Errorf("running %v, want %v", cs.State.Running != nil, tc.running)
			}
			if tc.waiting != "" && (cs.State.Waiting == nil || cs.State.Waiting.Reason != tc.waiting) {
				t.Errorf("waiting %+v, want %s", cs.State.Waiting, tc.waiting)
			}
			lt := cs.LastTerminationState.Terminated
			if tc.lastExit != 0 && (lt == nil || lt.ExitCode != tc.lastExit || lt.Message != tc.lastMsg || lt.Reason != "Error") {
				t.Errorf("last termination %+v, want exit %d %q", lt, tc.lastExit, tc.lastMsg)
			}
			if side := ps.ContainerStatuses[1]; side.LastTerminationState.Terminated != nil {
				t.Errorf("the sidecar got the serving container's exit: %+v", side.LastTerminationState)
			}
		})
	}
}
