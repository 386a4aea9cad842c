package instance

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/runtime"
)

// Restart backoff: doubling from backoffBase up to backoffCap; a container
// that ran for backoffCap or longer starts the count afresh.
const (
	backoffBase = 200 * time.Millisecond
	backoffCap  = 10 * time.Second
)

// defaultTimeout is Knative's default revision timeout, used when a
// revision has none: how long a drain may wait for requests in flight, and
// the grace period between SIGTERM and SIGKILL.
const defaultTimeout = 300 * time.Second

func backoff(failures int) time.Duration {
	d := backoffBase
	for i := 1; i < failures && d < backoffCap; i++ {
		d *= 2
	}
	return min(d, backoffCap)
}

// Condition reasons this package reports, besides Knative's ExitCode<N>.
const (
	ReasonImagePullBackOff          = "ImagePullBackOff"
	ReasonProgressDeadlineExceeded  = "ProgressDeadlineExceeded"
	ReasonRuntimeClassNotFound      = "RuntimeClassNotFound"
	ReasonRuntimeHandlerNotFound    = "RuntimeHandlerNotFound"
	ReasonUnsupportedProbe          = "UnsupportedProbe"
	ReasonCreateContainerConfig     = "CreateContainerConfigError"
	ReasonRunContainer              = "RunContainerError"
	ReasonDeploying                 = "Deploying"
	ReasonMultiContainerUnsupported = "MultiContainerUnsupported"
)

type failKind int

const (
	failStatic failKind = iota // the revision can never run here
	failPull
	failConfig
	failRun
	failCrash
	failDeadline
)

type failure struct {
	kind            failKind
	reason, message string
	resources       bool
}

// runSpec is what a revision's instances run, derived once from the
// revision.
type runSpec struct {
	// containers are the revision's containers in its order; the serving
	// one (with the port) is containers[serving].
	containers  []containerSpec
	serving     int
	pod         *corev1.PodSecurityContext
	port        int32
	h2c         bool
	handlerName string
	handler     runtime.Handler
	timeout     time.Duration // drain wait and termination grace period
}

// containerSpec is one container of a revision.
type containerSpec struct {
	container corev1.Container // with the defaults the runtime relies on
	ref       string           // what is pulled: the digest reference, else the image
}

// servingContainer is the container with the port, whose probes decide
// readiness and liveness.
func (s *runSpec) servingContainer() *corev1.Container { return &s.containers[s.serving].container }

// refs are the image references of the containers, in their order.
func (s *runSpec) refs() []string {
	refs := make([]string, len(s.containers))
	for i := range s.containers {
		refs[i] = s.containers[i].ref
	}
	return refs
}

// revision is the Manager's state of one revision. Its loop (run) pulls the
// image and keeps the number of instances at the wanted scale; each
// instance has a goroutine of its own.
type revision struct {
	m   *Manager
	key key
	log *slog.Logger

	ctx    context.Context // ends the loop and all instances at once
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop and all instances ended
	wake   chan struct{}
	wg     sync.WaitGroup // instance goroutines

	mu         sync.Mutex
	rev        *servingv1.Revision
	spec       runSpec
	static     *failure
	desired    int32
	scaleSet   bool
	removing   bool
	everReady  bool
	restored   bool      // ready before this Manager saw it: no deployment probe
	attempt    time.Time // start of the current attempt to become ready
	halted     bool      // the progress deadline passed: no instances until Activate
	fail       *failure
	imgs       []*image.Image // by container, once all are pulled
	pulls      int            // failed pulls in a row
	nextPull   time.Time
	pullCancel context.CancelFunc
	instances  map[string]*instance
}

func newRevision(m *Manager, k key, rev *servingv1.Revision) *revision {
	r := &revision{
		m:         m,
		key:       k,
		log:       m.log.With("namespace", k.namespace, "revision", k.name),
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		rev:       rev.DeepCopy(),
		attempt:   time.Now(),
		instances: map[string]*instance{},
	}
	r.ctx, r.cancel = context.WithCancel(m.ctx)
	r.spec, r.static = m.runSpecFor(r.rev)
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

// runSpecFor derives what rev's instances run, or why they never can.
//
// The serving container is the one with a port (the only one of a
// single-container revision), as Knative's GetContainer picks it. Only its
// probes are used: sidecars' probes matter to Knative only under the
// multi-container-probing feature (off by default, and Knative's
// validation then allows none), so they are ignored here.
func (m *Manager) runSpecFor(rev *servingv1.Revision) (runSpec, *failure) {
	s := runSpec{pod: rev.Spec.SecurityContext, port: 8080, timeout: defaultTimeout}
	for i := range rev.Spec.Containers {
		cs := containerSpec{container: *rev.Spec.Containers[i].DeepCopy()}
		cs.ref = cs.container.Image
		// Knative pairs statuses and containers by index (BuildUserContainers).
		if sts := rev.Status.ContainerStatuses; i < len(sts) && sts[i].ImageDigest != "" {
			cs.ref = sts[i].ImageDigest
		}
		if len(cs.container.Ports) > 0 && len(rev.Spec.Containers) > 1 {
			s.serving = i
		}
		s.containers = append(s.containers, cs)
	}
	if rev.Spec.TimeoutSeconds != nil && *rev.Spec.TimeoutSeconds > 0 {
		s.timeout = time.Duration(*rev.Spec.TimeoutSeconds) * time.Second
	}
	if len(s.containers) == 0 {
		return s, &failure{kind: failStatic, reason: ReasonCreateContainerConfig, message: "the revision has no container"}
	}
	c := s.servingContainer()
	if len(c.Ports) > 0 {
		if c.Ports[0].ContainerPort > 0 {
			s.port = c.Ports[0].ContainerPort
		}
		s.h2c = c.Ports[0].Name == "h2c"
	}
	for i := range s.containers {
		if i != s.serving {
			sc := &s.containers[i].container
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
		if err := checkProbe(p.what, p.probe); err != nil {
			return s, &failure{kind: failStatic, reason: ReasonUnsupportedProbe, message: err.Error()}
		}
	}

	class := ""
	if rev.Spec.RuntimeClassName != nil {
		class = *rev.Spec.RuntimeClassName
	}
	if class == "" {
		class = m.opts.DefaultRuntimeClass
	}
	s.handlerName = DefaultHandler
	if class != "" {
		s.handlerName = class
		if m.opts.RuntimeClassHandler != nil {
			h, ok := m.opts.RuntimeClassHandler(class)
			if !ok {
				return s, &failure{kind: failStatic, resources: true, reason: ReasonRuntimeClassNotFound,
					message: fmt.Sprintf("RuntimeClass %q does not exist", class)}
			}
			s.handlerName = h
		}
	}
	s.handler = m.opts.Handlers[s.handlerName]
	if s.handler == nil {
		names := make([]string, 0, len(m.opts.Handlers))
		for n := range m.opts.Handlers {
			names = append(names, n)
		}
		slices.Sort(names)
		msg := fmt.Sprintf("runtime handler %q is not available on this host (available: %v)", s.handlerName, names)
		if class != "" {
			msg = fmt.Sprintf("RuntimeClass %q names runtime handler %q, which is not available on this host (available: %v)", class, s.handlerName, names)
		}
		return s, &failure{kind: failStatic, resources: true, reason: ReasonRuntimeHandlerNotFound, message: msg}
	}
	if len(s.containers) > 1 {
		if mc, ok := s.handler.(runtime.MultiContainer); !ok || !mc.MultiContainer() {
			return s, &failure{kind: failStatic, resources: true, reason: ReasonMultiContainerUnsupported,
				message: fmt.Sprintf("runtime handler %q runs one container per instance; this revision has %d (use an OCI runtime such as runc or runsc)", s.handlerName, len(s.containers))}
		}
	}
	return s, nil
}

// update records the latest revision object and returns the state.
func (r *revision) update(rev *servingv1.Revision) controller.RevisionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rev = rev.DeepCopy()
	return r.stateLocked()
}

func (r *revision) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// wantLocked is the number of instances wanted now.
func (r *revision) wantLocked() int32 {
	if r.static != nil || r.halted || r.removing {
		return 0
	}
	d := r.desired
	if !r.scaleSet && !r.restored {
		d = 1 // initial scale until the autoscaler speaks
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

func (r *revision) stateLocked() controller.RevisionState {
	ready := r.readyLocked()
	want := r.wantLocked()
	st := controller.RevisionState{
		Actual:  ready,
		Desired: want,
		Active:  want > 0 || len(r.instances) > 0,
		LogURL:  "file://" + r.m.revLogDir(r.key) + "/",
	}
	f := r.static
	if f == nil && r.fail != nil && ready == 0 {
		f = r.fail
	}
	switch {
	case f != nil:
		st.Failed, st.Reason, st.Message, st.ResourcesFailed = true, f.reason, f.message, f.resources
	case r.everReady:
		st.Ready = true
	default:
		st.Reason = ReasonDeploying
		st.Message = "waiting for the first instance to become ready"
		if r.imgs == nil {
			st.Message = "pulling image " + strings.Join(r.spec.refs(), ", ")
		}
	}
	return st
}

// setScale records the autoscaler's scale, or (activate) asks for at least
// one instance and gives a halted revision another attempt.
func (r *revision) setScale(d int32, activate bool) {
	r.mu.Lock()
	before := r.wantLocked()
	if activate {
		if r.halted {
			r.halted, r.fail, r.attempt = false, nil, time.Now()
		}
		r.desired = max(r.desired, d)
	} else {
		r.desired = d
	}
	r.scaleSet = true
	changed := before != r.wantLocked()
	r.mu.Unlock()
	if changed {
		r.poke()
		r.m.notify(r.key)
	}
}

// remove makes the loop stop every instance and end.
func (r *revision) remove() {
	r.mu.Lock()
	r.removing = true
	if r.pullCancel != nil {
		r.pullCancel()
	}
	r.mu.Unlock()
	r.poke()
}

// run is the revision's loop. It ends when the revision is removed and its
// instances are gone, or at once (killing the instances) when r.ctx ends.
func (r *revision) run() {
	defer func() {
		r.cancel()
		r.wg.Wait()
		r.m.forget(r)
		close(r.done)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := r.reconcile()
		r.mu.Lock()
		finished := r.removing && len(r.instances) == 0
		r.mu.Unlock()
		if finished {
			return
		}
		timer.Stop()
		var tc <-chan time.Time
		if next > 0 {
			timer.Reset(next)
			tc = timer.C
		}
		select {
		case <-r.ctx.Done():
			return
		case <-r.wake:
		case <-tc:
		}
	}
}

// reconcile pulls the image if needed and starts or stops instances to
// reach the wanted scale. It returns when it wants to run again (0: only
// when woken).
func (r *revision) reconcile() time.Duration {
	changed := false
	defer func() {
		if changed {
			r.m.notify(r.key)
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	want := r.wantLocked()
	var next time.Duration
	if want > 0 && !r.everReady {
		left := r.attempt.Add(r.m.deadline).Sub(now)
		if left <= 0 {
			msg := fmt.Sprintf("the revision did not become ready within the progress deadline (%v)", r.m.deadline)
			if r.fail != nil {
				msg += "; last failure: " + r.fail.reason + ": " + r.fail.message
			}
			r.fail = &failure{kind: failDeadline, reason: ReasonProgressDeadlineExceeded, message: msg}
			r.halted = true
			r.log.Warn("revision failed", "reason", r.fail.reason, "message", msg)
			want = 0
			changed = true
		} else {
			next = left
		}
	}
	if want > 0 && r.imgs == nil {
		if wait := r.nextPull.Sub(now); wait > 0 {
			return minPositive(next, wait)
		}
		refs := r.spec.refs()
		kcRev := r.rev
		ctx, cancel := context.WithCancel(r.ctx)
		r.pullCancel = cancel
		r.mu.Unlock()
		imgs, ref, err := r.pullAll(ctx, refs, kcRev)
		r.mu.Lock()
		cancel()
		r.pullCancel = nil
		if r.removing || r.ctx.Err() != nil {
			return 0
		}
		if err != nil {
			r.pulls++
			d := backoff(r.pulls)
			r.nextPull = time.Now().Add(d)
			r.fail = &failure{kind: failPull, reason: ReasonImagePullBackOff, message: fmt.Sprintf("Back-off pulling image %q: %v", ref, err)}
			r.log.Warn("image pull failed", "image", ref, "err", err, "retryIn", d)
			changed = true
			return minPositive(next, d)
		}
		r.imgs, r.pulls = imgs, 0
		if r.fail != nil && r.fail.kind == failPull {
			r.fail = nil
		}
		changed = true
		want = r.wantLocked()
	}

	var live []*instance
	for _, in := range r.instances {
		if !in.stopping {
			live = append(live, in)
		}
	}
	for n := int32(len(live)); n < want; n++ {
		in := newInstance(r, r.newInstanceID())
		r.instances[in.id] = in
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			in.run(r.ctx)
		}()
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
			in.requestStopLocked()
		}
		changed = true
	}
	return next
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

// pullAll fetches the images of the revision's containers; on failure it
// returns the reference that failed.
func (r *revision) pullAll(ctx context.Context, refs []string, rev *servingv1.Revision) ([]*image.Image, string, error) {
	imgs := make([]*image.Image, len(refs))
	for i, ref := range refs {
		img, err := r.pull(ctx, ref, rev)
		if err != nil {
			return nil, ref, err
		}
		imgs[i] = img
	}
	return imgs, "", nil
}

// pull fetches one of the revision's images.
func (r *revision) pull(ctx context.Context, ref string, rev *servingv1.Revision) (*image.Image, error) {
	kc, err := r.m.keychain(rev)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	img, err := r.m.opts.Images.Pull(ctx, ref, kc)
	if err != nil {
		return nil, err
	}
	r.log.Debug("image pulled", "image", ref, "took", time.Since(start))
	return img, nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newInstanceID names a new instance "<revision>-<8 random characters>",
// as the pods of a Deployment are named; the revision part is cut to keep
// the name short (it names a container, a directory and a socket path).
func (r *revision) newInstanceID() string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for i := range b {
			b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
		}
		name := r.key.name
		if len(name) > 40 {
			name = name[:40]
		}
		id := name + "-" + string(b[:])
		if r.instances[id] == nil {
			return id
		}
	}
}

// instanceReady records an instance's readiness.
func (r *revision) setReady(in *instance, ready bool) {
	r.mu.Lock()
	changed := in.ready != ready
	in.ready = ready
	first := false
	if ready && changed {
		if !r.everReady {
			r.log.Info("revision ready", "instance", in.id, "sinceCreated", time.Since(in.born))
			first = true
		}
		r.everReady = true
		r.fail = nil
	}
	r.mu.Unlock()
	if first {
		// The deployment probe is done: what is wanted may drop (to the
		// autoscaler's scale, zero for initial-scale 0), so the loop runs.
		r.poke()
	}
	if changed {
		r.m.notify(r.key)
	}
}

// startFailed records that an instance could not be prepared or started.
func (r *revision) startFailed(in *instance, err error) {
	f := &failure{kind: failRun, reason: ReasonRunContainer, message: fmt.Sprintf("%s: %v", r.spec.handlerName, err)}
	if isConfigError(err) {
		f = &failure{kind: failConfig, reason: ReasonCreateContainerConfig, message: err.Error()}
	}
	in.log.Warn("instance failed to start", "reason", f.reason, "err", err)
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
	r.m.notify(r.key)
}

// exited records that an instance's container ended on its own.
//
// The failure is reported while no instance of the revision is ready (as
// Knative reports a pod's last termination while no replica is available),
// also after the revision was once ready; the next ready instance clears it.
//
// In a revision with several containers the message names the container
// that exited ("container sidecar: ..."): the whole instance is restarted
// for it, so the developer needs to know which one it was.
func (r *revision) exited(in *instance, container string, code int, message string) {
	if len(r.spec.containers) > 1 {
		message = "container " + container + ": " + message
	}
	r.mu.Lock()
	r.fail = &failure{kind: failCrash, reason: servingv1.ExitCodeReason(int32(code)), message: servingv1.RevisionContainerExitingMessage(message)}
	r.mu.Unlock()
	r.m.notify(r.key)
}

// instanceEnded forgets an instance whose goroutine is ending.
func (r *revision) instanceEnded(in *instance) {
	r.mu.Lock()
	delete(r.instances, in.id)
	live := make(map[string]bool, len(r.instances))
	for id := range r.instances {
		live[id] = true
	}
	r.mu.Unlock()
	if err := pruneLogs(r.m.revLogDir(r.key), live, keptStoppedLogs); err != nil {
		r.log.Warn("prune logs", "err", err)
	}
	r.poke()
	r.m.notify(r.key)
}
