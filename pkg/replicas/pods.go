package replicas

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// Pod labels Knative puts on a revision's pods, besides the revision's own
// labels (serving.knative.dev/service, configuration, ...).
const (
	LabelApp = "app"
	// AnnotationInstance names the instance a Pod shows (the pod
	// runtime's id, for logs, exec and port-forward).
	AnnotationInstance = "knbox.dev/instance"
	// NodeName is the spec.nodeName of every instance: the one machine.
	NodeName = "knbox"
)

// ErrNoInstance: no instance of that name runs.
var ErrNoInstance = errors.New("no such instance")

// Pods returns every instance the Manager keeps, of the revisions it
// runs, as the core/v1 Pods Knative's Deployment would have: named after
// the instance, labelled as Knative labels its pods, owned by the
// Revision, with the status the pod runtime reports. Pods are snapshots.
func (m *Manager) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, r := range m.revisions() {
		out = append(out, r.pods()...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// PodName is the name of an instance's Pod: as Knative's pods are named
// after their Deployment ("<revision>-deployment-..."), with the
// instance's random suffix. (The instance's id is a DNS label, at most 63
// characters, so it cannot be the Pod's name.)
func PodName(revision, instance string) string {
	suffix := instance[strings.LastIndexByte(instance, '-')+1:]
	return revision + "-deployment-" + suffix
}

// PodUID is the UID of an instance's Pod: derived from its namespace and
// the instance's id (random, never reused), so that the events of an
// instance name its Pod before the API has stored it and after a
// restart of knbox.
func PodUID(namespace, instance string) types.UID {
	return types.UID(uuid.NewSHA1(podUIDSpace, []byte(namespace+"/"+instance)).String())
}

// podUIDSpace is the UUID name space of PodUID.
var podUIDSpace = uuid.MustParse("6f1c6a1e-3b0e-4c5a-9a57-6b6e6f78706f")

// podRef refers to an instance's Pod, as the kubelet's events do.
func podRef(namespace, revision, instance string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace,
		Name: PodName(revision, instance), UID: PodUID(namespace, instance)}
}

// Pod returns one instance as a Pod; false when it does not run (any
// more).
func (m *Manager) Pod(namespace, name string) (*corev1.Pod, bool) {
	r, in := m.podInstance(namespace, name)
	if in == nil {
		return nil, false
	}
	return r.podOf(in), true
}

// DeletePod stops one instance in order (as a scale-down does: out of the
// endpoints, drained, SIGTERM, the grace period, SIGKILL), in the
// background; the revision makes another in its place if its scale wants
// it, as a ReplicaSet replaces a deleted pod (a revision being removed
// makes none: see OwnerGone). ErrNoInstance when no such instance runs.
func (m *Manager) DeletePod(namespace, name string) error {
	r, in := m.podInstance(namespace, name)
	if in == nil {
		return ErrNoInstance
	}
	r.mu.Lock()
	if in.stopping {
		r.mu.Unlock()
		return nil
	}
	in.stopping, in.stoppingAt = true, time.Now()
	in.ready = false
	r.wg.Add(1)
	r.mu.Unlock()
	r.log.Info("instance deleted through the API", "instance", in.id)
	go func() {
		defer r.wg.Done()
		r.stop(in)
	}()
	r.poke() // its replacement
	m.notifyPod(namespace, name)
	return nil
}

// OwnerGone stops the instance of the Pod namespace/name because its
// Revision (of UID owner) is gone or going: the API's garbage collector
// deletes the Pods of a deleted Revision. As on a cluster, such a Pod is
// not replaced: the whole revision is retired at once (see Retire), before
// the Revision reconciler may have seen the delete, so that it makes no
// new instance in the meantime. ErrNoInstance when no such instance runs;
// nil, doing nothing, when the instance's revision is another (a revision
// of the same name made again).
func (m *Manager) OwnerGone(namespace, name string, owner types.UID) error {
	r, in := m.podInstance(namespace, name)
	if in == nil {
		return ErrNoInstance
	}
	if r.uid() != owner {
		return nil
	}
	m.mu.Lock()
	m.retireLocked(r)
	m.mu.Unlock()
	m.notifyPod(namespace, name)
	return nil
}

// SubscribePods registers f, called without blocking whenever an instance
// (a Pod) is made, changes or ends. f must not block.
func (m *Manager) SubscribePods(f func(namespace, name string)) {
	m.subsMu.Lock()
	m.podSubs = append(m.podSubs, f)
	m.subsMu.Unlock()
}

func (m *Manager) notifyPod(namespace, name string) {
	m.subsMu.RLock()
	subs := m.podSubs
	m.subsMu.RUnlock()
	for _, f := range subs {
		f(namespace, name)
	}
}

// podInstance finds the instance whose Pod is namespace/name.
func (m *Manager) podInstance(namespace, name string) (*revision, *instance) {
	m.mu.Lock()
	defer m.mu.Unlock()
	revs := make([]*revision, 0, len(m.revs)+len(m.retiring))
	for _, r := range m.revs {
		revs = append(revs, r)
	}
	for r := range m.retiring {
		revs = append(revs, r)
	}
	for _, r := range revs {
		k := r.key
		if k.namespace != namespace || !strings.HasPrefix(name, k.name+"-deployment-") {
			continue
		}
		r.mu.Lock()
		for id, in := range r.instances {
			if PodName(k.name, id) == name {
				r.mu.Unlock()
				return r, in
			}
		}
		r.mu.Unlock()
	}
	return nil, nil
}

// pods returns the revision's instances as Pods.
func (r *revision) pods() []*corev1.Pod {
	r.mu.Lock()
	ins := make([]*instance, 0, len(r.instances))
	for _, in := range r.instances {
		ins = append(ins, in)
	}
	r.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(ins))
	for _, in := range ins {
		out = append(out, r.podOf(in))
	}
	return out
}

// podOf renders one instance as a Pod. It takes r.mu itself and asks the
// pod runtime without it held.
func (r *revision) podOf(in *instance) *corev1.Pod {
	st, known := r.m.opts.Pods.Status(in.id)
	r.mu.Lock()
	rev := r.rev
	spec := r.spec
	born, ready, stopping, pulling, stoppingAt := in.born, in.ready, in.stopping, in.pulling, in.stoppingAt
	r.mu.Unlock()

	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	p.Name, p.Namespace = PodName(r.key.name, in.id), r.key.namespace
	p.UID = PodUID(r.key.namespace, in.id)
	p.Labels = podLabels(rev)
	p.Annotations = make(map[string]string, len(rev.Annotations)+1)
	for k, v := range rev.Annotations {
		p.Annotations[k] = v
	}
	p.Annotations[AnnotationInstance] = in.id
	p.CreationTimestamp = metav1.NewTime(born.Truncate(time.Second))
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: servingv1.SchemeGroupVersion.String(), Kind: "Revision", Name: rev.Name, UID: rev.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	p.Spec = *rev.Spec.PodSpec.DeepCopy()
	if len(spec.containers) > 0 {
		p.Spec.Containers = make([]corev1.Container, len(spec.containers))
		for i := range spec.containers {
			spec.containers[i].DeepCopyInto(&p.Spec.Containers[i])
		}
	}
	p.Spec.NodeName = NodeName
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if spec.timeout > 0 {
		p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(spec.timeout / time.Second))
	}
	if p.Spec.ServiceAccountName == "" {
		p.Spec.ServiceAccountName = "default"
	}
	if stopping && !stoppingAt.IsZero() {
		// Scaled down or deleted: Terminating, as a ReplicaSet's pod.
		at := metav1.NewTime(stoppingAt.Truncate(time.Second))
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &at, p.Spec.TerminationGracePeriodSeconds
	}
	if !known {
		st = pod.Status{ID: in.id, Created: born, Pulling: pulling, Ready: ready, Stopping: stopping}
	}
	p.Status = podStatus(st, spec, ready && !stopping, born)
	return p
}

// podLabels are the labels of a revision's pods, as Knative's
// (resources.makeLabels): the revision's labels, its name and UID, and
// "app" (the revision's name) unless the revision sets it.
func podLabels(rev *servingv1.Revision) map[string]string {
	l := make(map[string]string, len(rev.Labels)+3)
	for k, v := range rev.Labels {
		l[k] = v
	}
	l[LabelRevision] = rev.Name
	l[LabelRevisionUID] = string(rev.UID)
	if _, ok := l[LabelApp]; !ok {
		l[LabelApp] = rev.Name
	}
	return l
}

// podStatus is the kubelet's view of a pod from the runtime's status.
// Every container of an instance starts, restarts and ends with it, so
// all share the restart count; the serving container's readiness is the
// pod's, sidecars are ready while they run.
func podStatus(st pod.Status, spec runSpec, ready bool, born time.Time) corev1.PodStatus {
	start := metav1.NewTime(born.Truncate(time.Second))
	ps := corev1.PodStatus{Phase: corev1.PodPending, StartTime: &start}
	if st.Running || st.Restarts > 0 {
		ps.Phase = corev1.PodRunning
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: start}
		if ok {
			c.Status = corev1.ConditionTrue
		} else {
			c.Reason = reason
		}
		return c
	}
	ps.Conditions = []corev1.PodCondition{
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.PodReady, ready, "ContainersNotReady"),
		cond(corev1.ContainersReady, ready, "ContainersNotReady"),
		cond(corev1.PodScheduled, true, ""),
	}
	f := st.LastFailure
	for i, c := range spec.containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: int32(st.Restarts)}
		if i < len(spec.refs) {
			cs.ImageID = spec.refs[i]
		}
		switch {
		case st.Running:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: start}
			cs.Ready = ready || i != spec.serving
			cs.Started = ptr.To(true)
		case st.Pulling && f != nil && f.Reason == pod.ReasonImagePullBackOff:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: pod.ReasonImagePullBackOff, Message: f.Message}
		case f != nil && (f.Reason == pod.ReasonError || f.Reason == pod.ReasonUnhealthy):
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: "back-off restarting failed container " + c.Name}
		case f != nil && (f.Reason == pod.ReasonCreateContainerConfig || f.Reason == pod.ReasonRunContainer):
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: f.Reason, Message: f.Message}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if i == spec.serving {
			cs.Ready = cs.Ready && ready
		}
		if f != nil && (f.Reason == pod.ReasonError || f.Reason == pod.ReasonUnhealthy) && (f.Container == "" || f.Container == c.Name) {
			reason := "Error"
			switch {
			case f.OOMKilled:
				reason = "OOMKilled"
			case f.ExitCode == 0:
				reason = "Completed"
			}
			at := metav1.NewTime(f.At.Truncate(time.Second))
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: int32(f.ExitCode), Reason: reason, Message: f.Message, FinishedAt: at,
			}
		}
		ps.ContainerStatuses = append(ps.ContainerStatuses, cs)
	}
	return ps
}
