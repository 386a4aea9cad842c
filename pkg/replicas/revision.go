package replicas

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/quota"
)

// Condition reasons this package reports, besides Knative's ExitCode<N>
// and the pod runtime's (pod.ReasonImagePullBackOff,
// pod.ReasonCreateContainerConfig, pod.ReasonRunContainer).
const (
	ReasonProgressDeadlineExceeded  = "ProgressDeadlineExceeded"
	ReasonRuntimeClassNotFound      = "RuntimeClassNotFound"
	ReasonRuntimeHandlerNotFound    = "RuntimeHandlerNotFound"
	ReasonUnsupportedProbe          = "UnsupportedProbe"
	ReasonDeploying                 = "Deploying"
	ReasonMultiContainerUnsupported = "MultiContainerUnsupported"
	// ReasonExceededQuota: a scale-up is held because another instance
	// would cross a ResourceQuota of the namespace.
	ReasonExceededQuota = "ExceededQuota"
)

// defaultTimeout is Knative's default revision timeout, used when a
// revision has none: how long a drain may wait for requests in flight, and
// the grace period between SIGTERM and SIGKILL.
const defaultTimeout = 300 * time.Second

// Retry backoff of what keeps instances from being created (a Secret
// missing): doubling from retryBase up to retryCap. An informer event of
// what the revision reads retries at once.
const (
	retryBase = 200 * time.Millisecond
	retryCap  = 10 * time.Second
)

func retryAfter(failures int) time.Duration {
	d := retryBase
	for i := 1; i < failures && d < retryCap; i++ {
		d *= 2
	}
	return min(d, retryCap)
}

// keptStoppedLogs is how many stopped instances of a revision keep their
// log files.
const keptStoppedLogs = 10

// State is what the Manager knows of a revision.
type State struct {
	// Ready: an instance passed its readiness probe once (the deployment
	// probe); a revision scaled to zero stays Ready.
	Ready bool
	// Failed: the revision cannot run now (image missing, container
	// crashing, never ready within the progress deadline, unknown
	// handler, ...), with the reason and message to show.
	Failed  bool
	Reason  string
	Message string
	// ResourcesFailed: the failure is of resources (handler), not of the
	// container itself.
	ResourcesFailed bool
	// Actual is the number of ready instances.
	Actual int32
	// Want is the number of instances the Manager keeps now: the
	// autoscaler's scale, at least one until the revision was ready once,
	// none after the progress deadline passed.
	Want int32
	// Held: a scale-up is held by a ResourceQuota while instances are
	// ready (with none ready the revision is Failed with the same reason
	// and message instead): HeldReason is ReasonExceededQuota and
	// HeldMessage names the quota, the resources, used, requested and hard.
	HeldReason, HeldMessage string
}

type failKind int

const (
	failStatic   failKind = iota // the revision can never run here
	failHandler                  // no handler for it now (its RuntimeClass may come)
	failConfig                   // an instance's spec cannot be assembled now
	failQuota                    // another instance would cross a quota
	failPod                      // an instance failed (pull, start, exit)
	failDeadline                 // not ready within the progress deadline
)

type failure struct {
	kind            failKind
	reason, message string
	resources       bool
}

// runSpec is what a revision's instances run, derived once from the
// revision.
type runSpec struct {
	// containers are the revision's containers in its order, with the
	// defaults the runtime relies on; the serving one (with the port) is
	// containers[serving].
	containers []corev1.Container
	refs       []string // the images, by container: digest references
	serving    int
	port       int32
	h2c        bool
	timeout    time.Duration // drain wait and termination grace period
}

// revision is the Manager's state of one revision. Its loop (run) keeps
// the number of instances at the wanted scale. The loop's goroutine runs
// only while the revision has work (poke starts it; it ends once nothing
// is left to do and no timer is due), so that a revision at rest, at zero
// most of all, costs no goroutine.
type revision struct {
	m   *Manager
	key key
	log *slog.Logger

	ctx    context.Context // ends the loop and all instance stops at once
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop and all instance stops ended
	wake   chan struct{}
	wg     sync.WaitGroup // instance stops
	// running: the loop's goroutine runs; loopEnded: the loop has ended
	// for good (the revision is gone). Both are guarded by m.loopMu.
	running, loopEnded bool

	mu       sync.Mutex
	rev      *servingv1.Revision
	spec     runSpec
	srcs     map[string]bool // the Secrets and ConfigMaps it reads
	static   *failure
	removing bool
	// dropLogs: the revision is retired (Manager.Retire): its logs go
	// when its instances are gone.
	dropLogs bool
	// ended are the last instances that stopped (at most
	// 2*keptStoppedLogs), whose logs may remain.
	ended     []string
	everReady bool
	restored  bool      // ready before this Manager saw it: no deployment probe
	attempt   time.Time // start of the current attempt to become ready
	halted    bool      // the progress deadline passed: no instances until Poke
	fail      *failure
	blocked   *failure // no instance can be made now (handler, config)
	retries   int      // failed attempts to make an instance, in a row
	nextTry   time.Time
	dirty     map[string]bool // changed sources whose volumes are to be rewritten
	// automount: rev has the ServiceAccount volume (addAPIAccess).
	automount bool
	instances map[string]*instance
	want      int32

	// The prepared sandbox (see "Prepared sandboxes").
	spare         *spare
	spareNext     time.Time // no new one before
	spareFailures int
	lastRequest   time.Time // the router's last Poke
}

// instance is one of the revision's pods, as the revision sees it.
type instance struct {
	id       string
	born     time.Time
	ready    bool
	pulling  bool
	stopping bool
	// stoppingAt is when the stop began (the Pod's deletionTimestamp).
	stoppingAt time.Time
	exposed    bool // handed out by Endpoints since the last Drained
	failures   int  // the pod's failures already reported
	// refresh is when the instance's ServiceAccount tokens are to be
	// issued again (zero: it has none).
	refresh time.Time
	// release gives its quota reservation back (nil: none).
	release func()

	drainedCh chan struct{}
	drainOnce sync.Once
}

func (in *instance) drained() { in.drainOnce.Do(func() { close(in.drainedCh) }) }

func newRevision(m *Manager, k key, rev *servingv1.Revision) *revision {
	r := &revision{
		m:           m,
		key:         k,
		log:         m.log.With("namespace", k.namespace, "revision", k.name),
		done:        make(chan struct{}),
		wake:        make(chan struct{}, 1),
		rev:         keep(rev),
		attempt:     time.Now(),
		lastRequest: time.Now(),
		dirty:       map[string]bool{},
		instances:   map[string]*instance{},
	}
	r.ctx, r.cancel = context.WithCancel(m.ctx)
	// Decided once, as admission decides once per pod.
	r.automount = m.automount(r.rev)
	if r.automount {
		addAPIAccess(r.rev)
	}
	// The images' digests are in the status, which r.rev leaves out.
	withStatus := *r.rev
	withStatus.Status.ContainerStatuses = rev.Status.ContainerStatuses
	r.spec, r.static = runSpecFor(&withStatus, m.opts.ExecProbes)
	r.srcs = sources(&r.rev.Spec.PodSpec)
	// A revision that was ready before (the daemon restarted) has passed
	// its deployment probe: it runs what the autoscaler says.
	st := &rev.Status
	if c := st.GetCondition(servingv1.RevisionConditionContainerHealthy); c != nil && c.IsTrue() {
		if c := st.GetCondition(servingv1.RevisionConditionResourcesAvailable); c != nil && c.IsTrue() {
			r.everReady, r.restored = true, true
		}
	}
	if r.static != nil {
		r.log.Warn("revision cannot run", "reason", r.static.reason, "message", r.static.message)
	}
	return r
}

// keep is the copy of a Revision that a revision holds: its spec and the
// metadata that its instances' environment and Pods show (name,
// namespace, UID, labels, annotations). Its status and the rest of its
// metadata (owner references, managedFields, ...) are read only when it is
// first seen (newRevision), so that a revision at rest does not hold them.
func keep(rev *servingv1.Revision) *servingv1.Revision {
	k := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: rev.Namespace, Name: rev.Name, UID: rev.UID,
		Labels: maps.Clone(rev.Labels), Annotations: maps.Clone(rev.Annotations)}}
	rev.Spec.DeepCopyInto(&k.Spec)
	return k
}

// claim takes over instances of an earlier process: those of this revision
// (same UID) become its instances, as they are (ready, failures seen); the
// others (a revision deleted and made again with the same name) are
// returned to be stopped. Their files volumes are rewritten from the
// informers at the first reconcile. m.mu is held.
func (r *revision) claim(sts []pod.Status) (claimed []string, stale []pod.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range sts {
		if st.Labels[LabelRevisionUID] != string(r.rev.UID) {
			stale = append(stale, st)
			continue
		}
		r.instances[st.ID] = &instance{id: st.ID, born: st.Created, ready: st.Ready, pulling: st.Pulling,
			failures: st.Failures, drainedCh: make(chan struct{})}
		claimed = append(claimed, st.ID)
		r.log.Info("instance of an earlier run adopted", "instance", st.ID, "ready", st.Ready)
	}
	if len(claimed) > 0 {
		sa := serviceAccountName(&r.rev.Spec.PodSpec)
		for _, v := range r.rev.Spec.Volumes {
			for src := range volumeSources(sa, v) {
				r.dirty[src] = true
			}
		}
	}
	return claimed, stale
}

// runSpecFor derives what rev's instances run, or why they never can.
//
// The serving container is the one with a port (the only one of a
// single-container revision), as Knative's GetContainer picks it. Only its
// probes are used: sidecars' probes matter to Knative only under the
// multi-container-probing feature (off by default, and Knative's
// validation then allows none), so they are dropped.
func runSpecFor(rev *servingv1.Revision, execProbes bool) (runSpec, *failure) {
	s := runSpec{port: 8080, timeout: defaultTimeout}
	for i := range rev.Spec.Containers {
		c := *rev.Spec.Containers[i].DeepCopy()
		ref := c.Image
		// Knative pairs statuses and containers by index (BuildUserContainers).
		if sts := rev.Status.ContainerStatuses; i < len(sts) && sts[i].ImageDigest != "" {
			ref = sts[i].ImageDigest
		}
		if len(c.Ports) > 0 && len(rev.Spec.Containers) > 1 {
			s.serving = i
		}
		s.containers = append(s.containers, c)
		s.refs = append(s.refs, ref)
	}
	if rev.Spec.TimeoutSeconds != nil && *rev.Spec.TimeoutSeconds > 0 {
		s.timeout = time.Duration(*rev.Spec.TimeoutSeconds) * time.Second
	}
	if len(s.containers) == 0 {
		return s, &failure{kind: failStatic, reason: pod.ReasonCreateContainerConfig, message: "the revision has no container"}
	}
	c := &s.containers[s.serving]
	if len(c.Ports) > 0 {
		if c.Ports[0].ContainerPort > 0 {
			s.port = c.Ports[0].ContainerPort
		}
		s.h2c = c.Ports[0].Name == "h2c"
	}
	for i := range s.containers {
		if i != s.serving {
			sc := &s.containers[i]
			sc.ReadinessProbe, sc.LivenessProbe, sc.StartupProbe = nil, nil, nil
		}
	}
	// Knative's default: a TCP probe of the port.
	if c.ReadinessProbe == nil {
		c.ReadinessProbe = &corev1.Probe{}
	}
	if c.ReadinessProbe.TCPSocket == nil && c.ReadinessProbe.HTTPGet == nil && c.ReadinessProbe.Exec == nil && c.ReadinessProbe.GRPC == nil {
		c.ReadinessProbe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(s.port)}
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
		check := pod.CheckProbe
		if execProbes {
			check = pod.CheckProbeExec
		}
		if err := check(p.what, p.probe); err != nil {
			return s, &failure{kind: failStatic, reason: ReasonUnsupportedProbe, message: err.Error()}
		}
	}
	c.StartupProbe = nil
	return s, nil
}

// handlerLocked resolves the revision's handler through its RuntimeClass,
// or says why there is none now.
func (r *revision) handlerLocked() (string, *failure) {
	class := ""
	if r.rev.Spec.RuntimeClassName != nil {
		class = *r.rev.Spec.RuntimeClassName
	}
	if class == "" {
		class = r.m.opts.DefaultRuntimeClass
	}
	name := DefaultHandler
	if class != "" {
		rc, err := r.m.runtimeClass(class)
		if err != nil {
			if isNotFound(err) {
				return "", &failure{kind: failHandler, resources: true, reason: ReasonRuntimeClassNotFound,
					message: fmt.Sprintf("RuntimeClass %q does not exist", class)}
			}
			return "", &failure{kind: failHandler, resources: true, reason: ReasonRuntimeClassNotFound, message: err.Error()}
		}
		name = rc.Handler
	}
	info, ok := r.m.opts.Pods.Handler(name)
	if !ok {
		names := r.m.opts.Pods.Handlers()
		msg := fmt.Sprintf("runtime handler %q is not available on this host (available: %v)", name, names)
		if class != "" {
			msg = fmt.Sprintf("RuntimeClass %q names runtime handler %q, which is not available on this host (available: %v)", class, name, names)
		}
		return "", &failure{kind: failHandler, resources: true, reason: ReasonRuntimeHandlerNotFound, message: msg}
	}
	if n := len(r.spec.containers); n > 1 && !info.MultiContainer {
		return "", &failure{kind: failHandler, resources: true, reason: ReasonMultiContainerUnsupported,
			message: fmt.Sprintf("runtime handler %q runs one container per instance; this revision has %d (use an OCI runtime such as runc or runsc)", name, n)}
	}
	return name, nil
}

// podSpecLocked assembles instance id's pod: environment and volumes read
// from the informers' caches, ServiceAccount tokens issued (refresh is when
// to issue them again), the handler resolved. The token issuer is local (a
// cache read and a signature), so it is called with r.mu held.
func (r *revision) podSpecLocked(id, handler string) (spec pod.Spec, refresh time.Time, err error) {
	m, rev, s := r.m, r.rev, &r.spec
	spec = pod.Spec{
		ID: id,
		Labels: map[string]string{
			LabelNamespace:      r.key.namespace,
			LabelRevision:       r.key.name,
			LabelRevisionUID:    string(rev.UID),
			LabelServiceAccount: serviceAccountName(&rev.Spec.PodSpec),
		},
		Handler:     handler,
		Security:    rev.Spec.SecurityContext,
		Images:      s.refs,
		Serving:     s.serving,
		Port:        s.port,
		H2C:         s.h2c,
		GracePeriod: s.timeout,
		PullSecrets: m.pullSecrets(rev),
		ExecProbes:  m.opts.ExecProbes,
	}
	if spec.LogPath, err = m.opts.Logs.Path(r.key.namespace, r.key.name, id); err != nil {
		return pod.Spec{}, refresh, err
	}
	for i := range s.containers {
		c := s.containers[i].DeepCopy()
		// Knative gives PORT to the serving container only (makeServingContainer).
		port := s.port
		if i != s.serving {
			port = 0
		}
		env, err := m.buildEnv(rev, c, port, instanceMeta{name: id})
		if err != nil {
			if len(s.containers) > 1 {
				return pod.Spec{}, refresh, configErrorf("container %s: %w", c.Name, err)
			}
			return pod.Spec{}, refresh, err
		}
		c.Env, c.EnvFrom = env, nil
		spec.Containers = append(spec.Containers, *c)
	}
	if spec.Volumes, refresh, err = m.volumes(r.key.namespace, serviceAccountName(&rev.Spec.PodSpec), rev.Spec.Volumes); err != nil {
		return pod.Spec{}, refresh, err
	}
	return spec, refresh, nil
}

// update records the latest revision object and returns the state.
func (r *revision) update(rev *servingv1.Revision) State {
	desired, known := r.m.opts.Scale.Desired(r.key.namespace, r.key.name)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rev = keep(rev)
	if r.automount {
		addAPIAccess(r.rev)
	}
	r.want = r.wantLocked(desired, known)
	return r.stateLocked()
}

// reads tells whether the revision reads a source ("Secret/<name>", ...).
func (r *revision) reads(src string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srcs[src]
}

// inputChanged is an informer's word that a source the revision reads
// changed: its volumes are rewritten, and what could not be made is tried
// again at once.
func (r *revision) inputChanged(src string) {
	r.mu.Lock()
	drop := r.spare != nil && (!strings.HasPrefix(src, "RuntimeClass/") || src == "RuntimeClass/"+r.runtimeClassLocked())
	r.mu.Unlock()
	if drop {
		// Its pod spec may read otherwise now.
		r.dropSpare(src + " changed")
	}
	r.mu.Lock()
	sa := serviceAccountName(&r.rev.Spec.PodSpec)
	for _, v := range r.rev.Spec.Volumes {
		if volumeSources(sa, v)[src] {
			r.dirty[src] = true
		}
	}
	r.nextTry = time.Time{}
	r.mu.Unlock()
	r.poke()
}

// poke makes the loop run: it wakes the loop's goroutine, or starts one
// when none runs.
func (r *revision) poke() {
	m := r.m
	m.loopMu.Lock()
	defer m.loopMu.Unlock()
	if r.running {
		// Sent under loopMu: the loop looks for it there before it ends
		// its goroutine (idle), so no wake is lost.
		select {
		case r.wake <- struct{}{}:
		default:
		}
		return
	}
	if r.loopEnded || m.loopsClosed {
		return
	}
	r.running = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r.run()
	}()
}

// idle ends the loop's goroutine unless the loop was poked meanwhile; it
// reports whether it ended it.
func (r *revision) idle() bool {
	r.m.loopMu.Lock()
	defer r.m.loopMu.Unlock()
	select {
	case <-r.wake:
		return false
	default:
	}
	r.running = false
	return true
}

// wantLocked is the number of instances wanted now, given the autoscaler's
// desired scale (known false: it has not decided yet).
func (r *revision) wantLocked(desired int32, known bool) int32 {
	if r.static != nil || r.halted || r.removing {
		return 0
	}
	d := desired
	if !known {
		d = 0
		if !r.restored {
			d = 1 // initial scale until the autoscaler speaks
		}
	}
	if !r.everReady && d < 1 {
		d = 1 // the deployment probe
	}
	return d
}

func (r *revision) readyLocked() int32 {
	var n int32
	for _, in := range r.instances {
		if in.ready && !in.stopping {
			n++
		}
	}
	return n
}

func (r *revision) stateLocked() State {
	ready := r.readyLocked()
	st := State{Actual: ready, Want: r.want}
	f := r.static
	if f == nil && ready == 0 {
		f = r.fail
		if f == nil || f.kind == failPod {
			if r.blocked != nil {
				f = r.blocked
			}
		}
	}
	if f == nil && r.blocked != nil && r.blocked.kind == failQuota {
		st.HeldReason, st.HeldMessage = r.blocked.reason, r.blocked.message
	}
	switch {
	case f != nil:
		st.Failed, st.Reason, st.Message, st.ResourcesFailed = true, f.reason, f.message, f.resources
		if f.kind == failHandler {
			st.Want = 0
		}
	case r.everReady:
		st.Ready = true
	default:
		st.Reason = ReasonDeploying
		st.Message = "waiting for the first instance to become ready"
		for _, in := range r.instances {
			if in.pulling && !in.stopping {
				st.Message = "pulling image " + strings.Join(r.spec.refs, ", ")
				break
			}
		}
		if !r.m.inputsSynced() {
			st.Message = "waiting for the API's Secrets, ConfigMaps and RuntimeClasses"
		}
	}
	return st
}

// retry gives a revision that failed its progress deadline another
// attempt (a request waits for it).
func (r *revision) retry() {
	r.mu.Lock()
	halted := r.halted
	if halted {
		r.halted, r.fail, r.attempt = false, nil, time.Now()
	}
	r.mu.Unlock()
	if halted {
		r.poke()
		r.m.notify(r.key)
	}
}

// remove makes the loop stop every instance and end; dropLogs: remove
// the revision's logs then (Manager.retired).
func (r *revision) remove(dropLogs bool) {
	r.mu.Lock()
	r.removing = true
	r.dropLogs = r.dropLogs || dropLogs
	r.mu.Unlock()
	r.poke()
}

// uid is the UID of the Revision r runs.
func (r *revision) uid() types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rev.UID
}

// count is the number of r's instances, stopping ones included.
func (r *revision) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.instances)
}

// ranIDs are the instances whose logs r may have left: those it has and
// the last that ended.
func (r *revision) ranIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := slices.Clone(r.ended)
	for id := range r.instances {
		ids = append(ids, id)
	}
	return ids
}

// run is the revision's loop (poke starts it). It returns when nothing is
// left to do until the next poke; it ends for good when the revision is
// removed and its instances are gone, or at once when r.ctx ends.
func (r *revision) run() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if r.ctx.Err() != nil {
			r.end()
			return
		}
		next := r.reconcile()
		r.mu.Lock()
		finished := r.removing && len(r.instances) == 0
		r.mu.Unlock()
		if finished {
			r.end()
			return
		}
		if next <= 0 {
			if r.idle() {
				return
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(next)
		} else {
			timer.Reset(next)
		}
		select {
		case <-r.ctx.Done():
			r.end()
			return
		case <-r.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// end ends the loop for good: the instance stops end, the logs of a
// retired revision go, and the Manager forgets it.
func (r *revision) end() {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	drop := r.dropLogs && len(r.instances) == 0
	r.mu.Unlock()
	if drop {
		r.m.retired(r)
	}
	r.m.forget(r)
	r.m.loopMu.Lock()
	r.loopEnded, r.running = true, false
	r.m.loopMu.Unlock()
	close(r.done)
}

// inputsRetry is how soon a revision that wants instances looks again
// while the informers have not synced.
const inputsRetry = 100 * time.Millisecond

// volumeUpdate is new content for one volume of one instance.
type volumeUpdate struct {
	id, volume string
	files      map[string]pod.File
}

// reconcile starts or stops instances to reach the wanted scale and
// rewrites volumes whose sources changed. It returns when it wants to run
// again (0: only when woken). Nothing in it waits on I/O with the lock
// held: pods are run, stopped and updated after it is released.
func (r *revision) reconcile() time.Duration {
	desired, known := r.m.opts.Scale.Desired(r.key.namespace, r.key.name)
	synced := r.m.inputsSynced()
	var (
		toRun   []pod.Spec
		toStop  []*instance
		updates []volumeUpdate
		changed bool
		next    time.Duration
		evs     []event
	)
	defer func() { r.emit(evs) }()
	r.mu.Lock()
	now := time.Now()
	want := r.wantLocked(desired, known)
	if r.m.deadline > 0 && want > 0 && !r.everReady {
		left := r.attempt.Add(r.m.deadline).Sub(now)
		if left <= 0 {
			msg := fmt.Sprintf("the revision did not become ready within the progress deadline (%v)", r.m.deadline)
			if last := r.lastFailureLocked(); last != nil {
				msg += "; last failure: " + last.reason + ": " + last.message
			}
			r.fail = &failure{kind: failDeadline, reason: ReasonProgressDeadlineExceeded, message: msg}
			r.halted = true
			evs = append(evs, r.eventLocked(corev1.EventTypeWarning, ReasonProgressDeadlineExceeded, msg))
			r.log.Warn("revision failed", "reason", r.fail.reason, "message", msg)
			want = 0
			changed = true
		} else {
			next = left
		}
	}

	var live []*instance
	for _, in := range r.instances {
		if !in.stopping {
			live = append(live, in)
		}
	}
	handler, canMake := "", synced
	if !synced && want > int32(len(live)) {
		// The informers' first list has not arrived: nothing says yet
		// whether the RuntimeClass exists, and its arrival may wake
		// only the revisions that name what it listed. Look again soon.
		next = minPositive(next, inputsRetry)
	}
	switch {
	case want <= int32(len(live)):
		// Nothing to make: what kept instances from being made is moot.
		if r.blocked != nil {
			r.blocked, r.retries, changed = nil, 0, true
		}
		canMake = false
	case synced:
		h, f := r.handlerLocked()
		if f != nil {
			if r.blocked == nil || *r.blocked != *f {
				r.log.Warn("no instance can be made", "reason", f.reason, "message", f.message)
				changed = true
			}
			r.blocked, canMake = f, false
			break
		}
		handler = h
		if r.blocked != nil && r.blocked.kind == failHandler {
			r.blocked, changed = nil, true
		}
		if wait := r.nextTry.Sub(now); wait > 0 {
			next, canMake = minPositive(next, wait), false
		}
	}
	var toStart []*spare
	for n := int32(len(live)); n < want && canMake; n++ {
		if sp := r.spare; sp != nil && sp.handler == handler {
			// The prepared sandbox becomes the instance: only its start
			// is left.
			r.spare = nil
			r.instances[sp.id] = &instance{id: sp.id, born: now, refresh: sp.refresh, drainedCh: make(chan struct{})}
			toStart = append(toStart, sp)
			changed = true
			continue
		}
		id := r.newInstanceIDLocked()
		spec, refresh, err := r.podSpecLocked(id, handler)
		if err != nil {
			r.retries++
			d := retryAfter(r.retries)
			r.nextTry = now.Add(d)
			f := &failure{kind: failConfig, reason: pod.ReasonCreateContainerConfig, message: err.Error()}
			if !pod.IsConfigError(err) {
				f.reason = pod.ReasonRunContainer
			}
			if r.blocked == nil || *r.blocked != *f {
				r.log.Warn("instance cannot be made", "reason", f.reason, "err", err, "retryIn", d)
			}
			r.blocked = f
			changed = true
			next = minPositive(next, d)
			break
		}
		if r.blocked != nil && r.blocked.kind != failQuota { // the quota is checked after
			r.blocked, r.retries = nil, 0
		}
		in := &instance{id: id, born: time.Now(), pulling: true, refresh: refresh, drainedCh: make(chan struct{})}
		r.instances[id] = in
		toRun = append(toRun, spec)
		changed = true
	}
	if extra := len(live) - int(want); extra > 0 {
		// Not ready ones first, then the newest.
		slices.SortFunc(live, func(a, b *instance) int {
			if a.ready != b.ready {
				if !a.ready {
					return -1
				}
				return 1
			}
			return b.born.Compare(a.born)
		})
		for _, in := range live[:extra] {
			in.stopping, in.stoppingAt = true, time.Now()
			toStop = append(toStop, in)
		}
		changed = true
	}
	if len(r.dirty) > 0 {
		updates = r.volumeUpdatesLocked()
	}
	tokens, due := r.tokenUpdatesLocked(now)
	updates = append(updates, tokens...)
	if !due.IsZero() {
		next = minPositive(next, max(due.Sub(now), time.Millisecond))
	}
	r.want = want
	dropSpare, prepSpare, evicted := r.spareLocked(now, want, len(live), synced)
	r.mu.Unlock()
	if dropSpare != "" {
		r.dropSpare(dropSpare)
	}
	evict(evicted)
	for _, sp := range toStart {
		r.startSpare(sp, want)
	}
	if prepSpare != nil {
		r.prepareSpare(prepSpare)
	}

	for i, spec := range toRun {
		release, ok := r.reserve(&spec, want)
		if !ok {
			// The rest would cross the quota too (or read it in vain).
			r.mu.Lock()
			for _, s := range toRun[i:] {
				delete(r.instances, s.ID)
			}
			d := retryAfter(r.retries)
			r.mu.Unlock()
			next = minPositive(next, d)
			r.m.notify(r.key)
			break
		}
		r.m.trackPod(spec.ID, r)
		r.mu.Lock()
		created := r.eventLocked(corev1.EventTypeNormal, "Created", "Created instance "+spec.ID)
		r.mu.Unlock()
		r.emit([]event{created}) // before the pod's own events
		if err := r.m.opts.Pods.Run(r.ctx, spec); err != nil {
			release()
			// The pod runtime refuses the spec: tried again with backoff.
			r.mu.Lock()
			delete(r.instances, spec.ID)
			r.retries++
			d := retryAfter(r.retries)
			r.nextTry = time.Now().Add(d)
			r.blocked = &failure{kind: failConfig, reason: pod.ReasonRunContainer, message: err.Error()}
			evs = append(evs, r.eventLocked(corev1.EventTypeWarning, pod.ReasonRunContainer, fmt.Sprintf("Instance %s could not be run: %v", spec.ID, err)))
			r.mu.Unlock()
			r.log.Warn("run instance", "instance", spec.ID, "err", err, "retryIn", d)
			r.m.untrackPod(spec.ID)
			next = minPositive(next, d)
			continue
		}
		r.giveRelease(spec.ID, release)
		r.podChanged(spec.ID) // it may have changed before it was tracked
	}
	for _, in := range toStop {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.stop(in)
		}()
	}
	for _, u := range updates {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		if err := r.m.opts.Pods.UpdateVolume(ctx, u.id, u.volume, u.files); err != nil {
			r.log.Warn("volume not updated; it keeps its content", "instance", u.id, "volume", u.volume, "err", err)
		}
		cancel()
	}
	if changed {
		r.m.notify(r.key)
	}
	return next
}

// reserve takes the quota reservation of one more instance (spec is to
// run with the LimitRange defaults the ledger applies), or records why the
// scale-up to want is held and returns false. Without a ledger it admits
// everything. Called without r.mu held: the ledger reads the store and
// calls back (quotaChanged).
func (r *revision) reserve(spec *pod.Spec, want int32) (release func(), ok bool) {
	q := r.m.opts.Quota
	if q == nil {
		return func() {}, true
	}
	r.mu.Lock()
	podSpec := r.quotaSpecLocked()
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	eff, release, err := q.Reserve(ctx, r.key.namespace, podSpec)
	cancel()
	if err != nil {
		f := &failure{kind: failQuota, resources: true, reason: ReasonExceededQuota,
			message: fmt.Sprintf("scale to %d held: %v", want, err)}
		if !errors.Is(err, quota.ErrExceeded) {
			f.kind, f.reason = failConfig, pod.ReasonCreateContainerConfig
			f.message = fmt.Sprintf("check resource quotas: %v", err)
		}
		r.mu.Lock()
		if r.blocked == nil || *r.blocked != *f {
			r.log.Warn("scale-up held", "reason", f.reason, "message", f.message)
		}
		r.blocked = f
		r.retries++
		r.nextTry = time.Now().Add(retryAfter(r.retries))
		r.mu.Unlock()
		return nil, false
	}
	// The instance runs with the namespace's LimitRange defaults, which
	// its reservation counts.
	for i := range spec.Containers {
		if i < len(eff.Containers) && eff.Containers[i].Name == spec.Containers[i].Name {
			spec.Containers[i].Resources = eff.Containers[i].Resources
		}
	}
	r.mu.Lock()
	if r.blocked != nil && r.blocked.kind == failQuota {
		r.blocked, r.retries = nil, 0
	}
	r.mu.Unlock()
	return release, true
}

// quotaChanged retries at once a scale-up held by a quota.
func (r *revision) quotaChanged() {
	r.mu.Lock()
	held := r.blocked != nil && r.blocked.kind == failQuota
	if held {
		r.nextTry = time.Time{}
	}
	r.mu.Unlock()
	if held {
		r.poke()
	}
}

// quotaSpecLocked is the pod spec the quota counts an instance by: the
// revision's, naming the RuntimeClass the instance runs in (the default
// one when it names none), whose overhead the ledger adds. r.mu is held.
func (r *revision) quotaSpecLocked() *corev1.PodSpec {
	spec := r.rev.Spec.PodSpec.DeepCopy()
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName == "" {
		if c := r.m.opts.DefaultRuntimeClass; c != "" {
			spec.RuntimeClassName = &c
		}
	}
	return spec
}

// trackAdopted records the quota reservations of instances adopted from an
// earlier process (without a check: as on a cluster, a quota lowered below
// what runs does not stop what runs). Called without locks held.
func (r *revision) trackAdopted(ids []string) {
	q := r.m.opts.Quota
	if q == nil || len(ids) == 0 {
		return
	}
	r.mu.Lock()
	podSpec := r.quotaSpecLocked()
	r.mu.Unlock()
	for _, id := range ids {
		release := q.Track(r.key.namespace, podSpec)
		r.mu.Lock()
		if in := r.instances[id]; in != nil && in.release == nil {
			in.release, release = release, nil
		}
		r.mu.Unlock()
		if release != nil {
			release()
		}
	}
}

// lastFailureLocked is what to name as the last failure.
func (r *revision) lastFailureLocked() *failure {
	if r.fail != nil {
		return r.fail
	}
	return r.blocked
}

// volumeUpdatesLocked reads the volumes whose sources changed, for every
// instance that runs. A source that cannot be read leaves the volume as it
// is. A volume with a ServiceAccount token is read for each instance (each
// has its own token), and its token is refreshed with it.
func (r *revision) volumeUpdatesLocked() []volumeUpdate {
	var out []volumeUpdate
	sa := serviceAccountName(&r.rev.Spec.PodSpec)
	for _, v := range r.rev.Spec.Volumes {
		touched := false
		for src := range volumeSources(sa, v) {
			touched = touched || r.dirty[src]
		}
		if !touched {
			continue
		}
		if hasToken(v) {
			for id, in := range r.instances {
				if in.stopping {
					continue
				}
				files, at, err := r.m.volumeFiles(r.key.namespace, sa, v)
				if err != nil {
					r.log.Warn("volume not updated; it keeps its content", "instance", id, "volume", v.Name, "err", err)
					continue
				}
				in.refresh = earliest(in.refresh, at)
				out = append(out, volumeUpdate{id: id, volume: v.Name, files: files})
			}
			continue
		}
		files, _, err := r.m.volumeFiles(r.key.namespace, sa, v)
		if err != nil {
			r.log.Warn("volume not updated; it keeps its content", "volume", v.Name, "err", err)
			continue
		}
		for id, in := range r.instances {
			if !in.stopping {
				out = append(out, volumeUpdate{id: id, volume: v.Name, files: files})
			}
		}
	}
	clear(r.dirty)
	return out
}

// tokenRetry is how soon a token that could not be refreshed (its
// ServiceAccount is gone) is tried again; the volume keeps the old one
// meanwhile, as the kubelet does.
const tokenRetry = 10 * time.Second

// tokenUpdatesLocked issues new tokens for the instances whose tokens are
// due, and returns the volumes to rewrite and when the next instance's
// tokens are due (zero: none has tokens).
func (r *revision) tokenUpdatesLocked(now time.Time) (out []volumeUpdate, next time.Time) {
	sa := serviceAccountName(&r.rev.Spec.PodSpec)
	for id, in := range r.instances {
		if in.stopping || in.refresh.IsZero() {
			continue
		}
		if in.refresh.After(now) {
			next = earliest(next, in.refresh)
			continue
		}
		var refresh time.Time
		for _, v := range r.rev.Spec.Volumes {
			if !hasToken(v) {
				continue
			}
			files, at, err := r.m.volumeFiles(r.key.namespace, sa, v)
			if err != nil {
				r.log.Warn("token not refreshed; the volume keeps the old one", "instance", id, "volume", v.Name, "err", err, "retryIn", tokenRetry)
				refresh = earliest(refresh, now.Add(tokenRetry))
				continue
			}
			refresh = earliest(refresh, at)
			out = append(out, volumeUpdate{id: id, volume: v.Name, files: files})
		}
		in.refresh = refresh
		next = earliest(next, refresh)
	}
	return out, next
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 {
		return b
	}
	if b <= 0 {
		return a
	}
	return min(a, b)
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newInstanceIDLocked names a new instance "<revision>-<8 random
// characters>", as the pods of a Deployment are named; the revision part is
// cut to keep the name short (it names a container, a directory and a
// socket path).
func (r *revision) newInstanceIDLocked() string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for i := range b {
			b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
		}
		name := strings.TrimRight(r.key.name[:min(len(r.key.name), 40)], "-")
		id := name + "-" + string(b[:])
		if r.instances[id] == nil {
			return id
		}
	}
}

// podChanged takes a pod's status into the instance: readiness, pulling,
// and a failure the revision has not seen yet.
func (r *revision) podChanged(id string) {
	defer r.m.notifyPod(r.key.namespace, PodName(r.key.name, id))
	st, ok := r.m.opts.Pods.Status(id)
	r.mu.Lock()
	in := r.instances[id]
	if in == nil || !ok {
		r.mu.Unlock()
		return
	}
	changed, first, spare := false, false, false
	ready := st.Ready && !in.stopping
	if in.ready != ready {
		in.ready, changed = ready, true
		// The loop prepares the next sandbox once no instance is starting.
		spare = ready && r.spare == nil && r.m.opts.Prepared != nil
		if ready {
			if !r.everReady {
				r.log.Info("revision ready", "instance", id, "sinceCreated", time.Since(in.born))
				first = true
			}
			r.everReady = true
			r.fail = nil
		}
	}
	if in.pulling != st.Pulling {
		in.pulling, changed = st.Pulling, true
	}
	if st.Failures > in.failures {
		in.failures = st.Failures
		if f := st.LastFailure; f != nil {
			r.fail = r.podFailure(f)
			changed = true
		}
	}
	r.mu.Unlock()
	if first || spare {
		// The deployment probe is done: what is wanted may drop (to the
		// autoscaler's scale, zero for initial-scale 0), so the loop runs.
		r.poke()
	}
	if changed {
		r.m.notify(r.key)
	}
}

// podFailure is how a pod's failure reads on the revision. An exit is
// reported as Knative reports it (ExitCode<N>, "Container failed with:
// ..."); in a revision with several containers the message names the one
// that failed, because the whole instance restarts for it.
func (r *revision) podFailure(f *pod.Failure) *failure {
	switch f.Reason {
	case pod.ReasonError, pod.ReasonUnhealthy:
		msg := f.Message
		if len(r.spec.containers) > 1 && f.Container != "" {
			msg = "container " + f.Container + ": " + msg
		}
		return &failure{kind: failPod, reason: servingv1.ExitCodeReason(int32(f.ExitCode)), message: servingv1.RevisionContainerExitingMessage(msg)}
	default:
		return &failure{kind: failPod, reason: f.Reason, message: f.Message}
	}
}

// stop stops an instance in order: it left the endpoints already; if the
// router may have requests on it (it was exposed), wait for Drained, at
// most the revision's timeout; then SIGTERM, the grace period, SIGKILL.
func (r *revision) stop(in *instance) {
	r.mu.Lock()
	exposed, grace := in.exposed, r.spec.timeout
	r.mu.Unlock()
	r.m.notify(r.key) // the endpoints changed
	if exposed {
		t := time.NewTimer(grace)
		select {
		case <-in.drainedCh:
		case <-t.C:
			r.log.Info("drain timed out", "instance", in.id, "after", grace)
		case <-r.ctx.Done():
		}
		t.Stop()
	}
	if err := r.m.opts.Pods.Stop(r.ctx, in.id, grace); err != nil {
		r.log.Warn("stop instance", "instance", in.id, "err", err)
	}
	r.instanceEnded(in)
}

// instanceEnded forgets a stopped instance and prunes the logs of old ones.
func (r *revision) instanceEnded(in *instance) {
	r.mu.Lock()
	release := in.release
	in.release = nil
	delete(r.instances, in.id)
	r.ended = append(r.ended, in.id)
	if n := len(r.ended) - 2*keptStoppedLogs; n > 0 {
		r.ended = slices.Delete(r.ended, 0, n)
	}
	live := make(map[string]bool, len(r.instances)+1)
	for id := range r.instances {
		live[id] = true
	}
	if r.spare != nil {
		live[r.spare.id] = true // its shim holds its log open
	}
	r.mu.Unlock()
	if release != nil {
		release()
	}
	r.m.untrackPod(in.id)
	r.m.notifyPod(r.key.namespace, PodName(r.key.name, in.id))
	if err := r.m.opts.Logs.Prune(r.key.namespace, r.key.name, live, keptStoppedLogs); err != nil {
		r.log.Warn("prune logs", "err", err)
	}
	r.poke()
	r.m.notify(r.key)
}

// podEvent sends an event of one of the revision's pods about its Pod
// (kind Pod, its name and UID, the container's field path), as the
// kubelet records them, so that `kubectl describe pod` shows them.
func (r *revision) podEvent(e pod.Event) {
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	ev := event{about: podRef(r.key.namespace, r.key.name, e.Pod), typ: typ, reason: e.Reason, message: e.Message}
	if e.Container != "" {
		ev.about.FieldPath = "spec.containers{" + e.Container + "}"
	}
	r.emit([]event{ev})
}

// event is one lifecycle event about the revision, made under r.mu and
// sent (emit) after it is released.
type event struct {
	about                corev1.ObjectReference
	typ, reason, message string
}

// eventLocked makes an event about the revision; r.mu is held.
func (r *revision) eventLocked(typ, reason, message string) event {
	ref := corev1.ObjectReference{APIVersion: servingv1.SchemeGroupVersion.String(), Kind: "Revision",
		Namespace: r.key.namespace, Name: r.key.name, UID: r.rev.UID}
	return event{about: ref, typ: typ, reason: reason, message: message}
}

// emit sends events to Options.Event.
func (r *revision) emit(evs []event) {
	if r.m.opts.Event == nil {
		return
	}
	for _, ev := range evs {
		r.m.opts.Event(ev.about, ev.typ, ev.reason, ev.message)
	}
}

// giveRelease hands the quota reservation's release to instance id, which
// calls it when it stops; if id has stopped already, it is released now.
func (r *revision) giveRelease(id string, release func()) {
	r.mu.Lock()
	if in := r.instances[id]; in != nil {
		in.release = release
		release = nil
	}
	r.mu.Unlock()
	if release != nil {
		release()
	}
}
