package replicas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/kubeclient"
	"github.com/knbox/knbox/pkg/logs"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// DefaultProgressDeadline is Knative's config-deployment progress-deadline.
const DefaultProgressDeadline = 600 * time.Second

// DefaultHandler runs revisions that name no RuntimeClass when
// Options.DefaultRuntimeClass is empty.
const DefaultHandler = "runc"

// Pods is the pod runtime (package pod) as the Manager uses it.
type Pods interface {
	Run(ctx context.Context, spec pod.Spec) error
	// Prepare makes a pod up to its containers' start; Start starts it
	// (see "Prepared sandboxes").
	Prepare(ctx context.Context, spec pod.Spec) error
	Start(id string) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	Status(id string) (pod.Status, bool)
	UpdateVolume(ctx context.Context, id, volume string, files map[string]pod.File) error
	Dial(ctx context.Context, id string) (net.Conn, error)
	Handler(name string) (pod.HandlerInfo, bool)
	Handlers() []string
	Subscribe(f func(id string))
	// List returns every pod, those adopted from an earlier process
	// included.
	List() []pod.Status
}

// Quota is the namespaces' quota ledger (package quota's Ledger) as the
// Manager uses it: every instance holds a reservation of its resources
// while it exists.
type Quota interface {
	// Reserve admits one more instance of spec (a Revision's pod spec) in
	// namespace, or refuses it (an error that errors.Is quota.ErrExceeded,
	// whose text names the quota, the resources, used, requested and
	// hard); pod is spec with the namespace's LimitRange defaults, which
	// the instance runs with; release gives the reservation back.
	Reserve(ctx context.Context, namespace string, spec *corev1.PodSpec) (pod *corev1.PodSpec, release func(), err error)
	// Track records an instance that runs already (adopted after a
	// restart), without a check.
	Track(namespace string, pod *corev1.PodSpec) (release func())
	// OnChange registers fn, called with the namespace of every
	// reservation made or released.
	OnChange(fn func(namespace string))
}

// Scale is the source of every revision's desired scale: the autoscaler.
type Scale interface {
	// Desired is a revision's desired scale; false while the source does
	// not know the revision.
	Desired(namespace, name string) (int32, bool)
	// Subscribe registers f, called (without blocking) when a revision's
	// desired scale changes.
	Subscribe(f func(namespace, name string))
}

// Options configures a Manager. Pods, Images, Logs, Scale and Informers are
// required; the zero value of every other field is a documented default.
type Options struct {
	// Pods runs the instances.
	Pods Pods
	// Images resolves image references to digests (Resolve).
	Images *image.Store
	// Logs lays out the instances' log files; each revision's are a group.
	Logs *logs.Store
	// Scale decides how many instances each revision has.
	Scale Scale
	// Informers are the shared informers of the core and node APIs:
	// Secrets, ConfigMaps, RuntimeClasses (and ServiceAccounts) come from
	// their caches, and their changes update running instances. The Manager
	// registers its informers in New; start them after that.
	Informers *kubeclient.Informers
	// ServiceAccounts adds the imagePullSecrets of a revision's
	// ServiceAccount to its own, as Kubernetes' ServiceAccount admission
	// does; set it only where the API serves ServiceAccounts.
	ServiceAccounts bool
	// Tokens issues the ServiceAccount tokens of projected
	// serviceAccountToken volumes (the API server, as the kubelet's
	// TokenRequest; a local call, no HTTP); nil: a revision with such a
	// volume cannot run. Each instance gets its own tokens, refreshed in its
	// volume after 80% of their lifetime or 24 hours.
	Tokens serviceaccount.TokenIssuer
	// API, when valid, is where an instance reaches knbox's API from
	// inside (the Service "kubernetes" of a cluster): every container gets
	// KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT and the other
	// variables the kubelet sets for it, and, unless the revision or its
	// ServiceAccount says automountServiceAccountToken: false, the
	// ServiceAccount volume at ServiceAccountMountPath (token, ca.crt from
	// the ConfigMap kube-root-ca.crt, namespace), as Kubernetes'
	// ServiceAccount admission and the kubelet give every pod. Needs Tokens.
	API netip.AddrPort
	// Quota, if set, holds every scale-up that would cross a namespace's
	// ResourceQuota (the instance is not made; the revision reports
	// ReasonExceededQuota) until an instance of the namespace stops or a
	// ResourceQuota changes; each instance's reservation is released when
	// it is gone. Set it only where the API serves ResourceQuotas (the
	// Manager watches them).
	Quota Quota
	// Prepared, when set, keeps one prepared sandbox per revision within
	// this budget (see "Prepared sandboxes"); nil: none.
	Prepared *PreparedBudget
	// ExecProbes allows exec probes (the operator's switch; the runtime
	// contract says platforms should refuse them): they run with the
	// handler's exec in the serving container.
	ExecProbes bool
	// DefaultRuntimeClass is the RuntimeClass of revisions that name none;
	// "" means handler DefaultHandler ("runc") directly.
	DefaultRuntimeClass string
	// ProgressDeadline bounds how long a new revision may take to become
	// ready (0: DefaultProgressDeadline).
	ProgressDeadline time.Duration
	// Logger receives lifecycle logs (nil: discard).
	Logger *slog.Logger
	// Event, when set, receives events about Revisions (an instance
	// Created, one that could not be run (RunContainerError),
	// ProgressDeadlineExceeded) and, about their Pods (kind Pod, named and
	// UIDed as Pods shows them: PodName, PodUID), the events of the pods
	// (PodEvent: Pulling, Pulled, Created, Started, Killing, BackOff,
	// Unhealthy, Failed, Evicted, as the kubelet names them). It must not
	// block.
	Event func(about corev1.ObjectReference, eventType, reason, message string)
}

type key struct{ namespace, name string }

func (k key) String() string { return k.namespace + "/" + k.name }

// Manager keeps every revision's instances at the autoscaler's scale. It
// is safe for concurrent use.
type Manager struct {
	opts     Options
	log      *slog.Logger
	deadline time.Duration

	secrets         corelisters.SecretLister
	configMaps      corelisters.ConfigMapLister
	serviceAccounts corelisters.ServiceAccountLister
	runtimeClasses  nodelisters.RuntimeClassLister
	synced          []cache.InformerSynced

	// ctx bounds every goroutine the Manager starts; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // revision loops and orphans' stops
	// loopMu guards every revision's running and loopEnded, and
	// loopsClosed: no loop starts any more (Close and Detach wait for
	// m.wg then). It is taken after m.mu and a revision's mu, never
	// before them.
	loopMu      sync.Mutex
	loopsClosed bool

	mu   sync.Mutex
	revs map[key]*revision
	// retiring are revisions being removed (Remove, or a Revision of the
	// same name with another UID): their instances stop in the background
	// while a new revision of the name may run already.
	retiring map[*revision]bool
	pods     map[string]*revision // instance id -> its revision (nil: an orphan not claimed yet)
	orphans  map[key][]pod.Status // pods of an earlier process, until their revision claims them
	spares   map[string]*revision // prepared sandbox id -> its revision
	closed   bool
	// detaching: no sandbox is prepared any more (read under a
	// revision's mu, which must not take m.mu).
	detaching atomic.Bool

	// poolMu guards pool, the prepared sandboxes' budget. It is taken
	// after a revision's mu, never before.
	poolMu sync.Mutex
	pool   map[*revision]*poolEntry

	subsMu sync.RWMutex
	subs   []func(namespace, name string)
	// podSubs are told about every instance's changes (SubscribePods).
	podSubs []func(namespace, name string)
}

// New returns a Manager.
func New(opts Options) (*Manager, error) {
	if opts.Pods == nil || opts.Images == nil || opts.Logs == nil || opts.Scale == nil || opts.Informers == nil {
		return nil, errors.New("revision manager: Pods, Images, Logs, Scale and Informers are required")
	}
	m := &Manager{
		opts:     opts,
		log:      opts.Logger,
		deadline: opts.ProgressDeadline,
		revs:     map[key]*revision{},
		retiring: map[*revision]bool{},
		pods:     map[string]*revision{},
		orphans:  map[key][]pod.Status{},
		spares:   map[string]*revision{},
		pool:     map[*revision]*poolEntry{},
	}
	if b := opts.Prepared; b != nil && (b.Count <= 0 || b.Memory <= 0) {
		return nil, fmt.Errorf("revision manager: prepared sandboxes: count %d and memory %d must be positive", b.Count, b.Memory)
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if m.deadline <= 0 {
		m.deadline = DefaultProgressDeadline
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())

	inf := opts.Informers
	secrets, cms, rcs := inf.Secrets(), inf.ConfigMaps(), inf.RuntimeClasses()
	m.secrets, m.configMaps, m.runtimeClasses = secrets.Lister(), cms.Lister(), rcs.Lister()
	m.watch(secrets.Informer(), "Secret")
	m.watch(cms.Informer(), "ConfigMap")
	m.watch(rcs.Informer(), "RuntimeClass")
	if opts.ServiceAccounts {
		sas := inf.ServiceAccounts()
		m.serviceAccounts = sas.Lister()
		m.watch(sas.Informer(), "ServiceAccount")
	}
	if opts.Quota != nil {
		rqs := inf.ResourceQuotas()
		_, _ = rqs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { m.quotaChanged(namespaceOf(obj)) },
			UpdateFunc: func(_, n interface{}) { m.quotaChanged(namespaceOf(n)) },
			DeleteFunc: func(obj interface{}) { m.quotaChanged(namespaceOf(obj)) },
		})
		m.synced = append(m.synced, rqs.Informer().HasSynced)
		opts.Quota.OnChange(m.quotaChanged)
	}
	opts.Scale.Subscribe(m.wake)
	opts.Pods.Subscribe(m.podChanged)
	// Pods an earlier process left running (adopted by the pod runtime)
	// wait for their revisions.
	for _, st := range opts.Pods.List() {
		k := key{st.Labels[LabelNamespace], st.Labels[LabelRevision]}
		if k.namespace == "" || k.name == "" {
			continue
		}
		m.orphans[k] = append(m.orphans[k], st)
		m.pods[st.ID] = nil
	}
	return m, nil
}

// watch sends the changes of an informer's objects to inputChanged.
func (m *Manager) watch(inf cache.SharedIndexInformer, kind string) {
	handle := func(obj interface{}) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		type meta interface {
			GetNamespace() string
			GetName() string
		}
		if o, ok := obj.(meta); ok {
			m.inputChanged(kind, o.GetNamespace(), o.GetName())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, n interface{}) { handle(n) },
		DeleteFunc: handle,
	})
	m.synced = append(m.synced, inf.HasSynced)
}

// namespaceOf is the namespace of an informer's object.
func namespaceOf(obj interface{}) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(interface{ GetNamespace() string }); ok {
		return o.GetNamespace()
	}
	return ""
}

// quotaChanged retries at once the scale-ups held by a quota in namespace:
// an instance stopped or a ResourceQuota changed. It is called without
// locks held (the Manager reserves and releases outside its locks).
func (m *Manager) quotaChanged(namespace string) {
	for _, r := range m.revisions() {
		if r.key.namespace == namespace {
			r.quotaChanged()
		}
	}
}

// inputsSynced tells whether every informer has its first list.
func (m *Manager) inputsSynced() bool {
	for _, s := range m.synced {
		if !s() {
			return false
		}
	}
	return true
}

// inputChanged wakes the revisions that read the object.
func (m *Manager) inputChanged(kind, namespace, name string) {
	for _, r := range m.revisions() {
		if kind == "RuntimeClass" || (r.key.namespace == namespace && r.reads(kind+"/"+name)) {
			r.inputChanged(kind + "/" + name)
		}
	}
}

func (m *Manager) revisions() []*revision {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*revision, 0, len(m.revs)+len(m.retiring))
	for _, r := range m.revs {
		out = append(out, r)
	}
	for r := range m.retiring {
		out = append(out, r)
	}
	return out
}

// wake makes a revision's loop run (its desired scale changed).
func (m *Manager) wake(namespace, name string) {
	if r := m.revision(namespace, name); r != nil {
		r.poke()
	}
}

// podChanged takes a pod's new status to its revision.
func (m *Manager) podChanged(id string) {
	m.mu.Lock()
	r, sp := m.pods[id], m.spares[id]
	m.mu.Unlock()
	if r != nil {
		r.podChanged(id)
	}
	if sp != nil {
		st, ok := m.opts.Pods.Status(id)
		sp.spareChanged(id, st, ok)
	}
}

// PodEvent passes on an event of the pod runtime (pod.Options.Events) as
// an event about the Revision of the pod, until instances are Pods on the
// API; events of pods it does not run are dropped.
func (m *Manager) PodEvent(e pod.Event) {
	m.mu.Lock()
	r := m.pods[e.Pod]
	m.mu.Unlock()
	if r != nil {
		r.podEvent(e)
	}
}

// Subscribe registers f, called without blocking whenever a revision's
// state or endpoints change. f must not block.
func (m *Manager) Subscribe(f func(namespace, name string)) {
	m.subsMu.Lock()
	m.subs = append(m.subs, f)
	m.subsMu.Unlock()
}

func (m *Manager) notify(k key) {
	m.subsMu.RLock()
	subs := m.subs
	m.subsMu.RUnlock()
	for _, f := range subs {
		f(k.namespace, k.name)
	}
}

// Resolve returns the digest reference of one of the revision's images,
// with its image pull secrets. It waits (within ctx) for the informers'
// first list.
func (m *Manager) Resolve(ctx context.Context, rev *servingv1.Revision, img string) (string, error) {
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return "", fmt.Errorf("resolve %s: %w", img, ctx.Err())
	}
	kc, err := m.keychain(rev)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", img, err)
	}
	return m.opts.Images.Resolve(ctx, img, kc)
}

// keychain returns the credentials of the revision's image pull secrets
// (nil when it has none).
func (m *Manager) keychain(rev *servingv1.Revision) (authn.Keychain, error) {
	secs := m.pullSecrets(rev)
	if len(secs) == 0 {
		return nil, nil
	}
	kc, err := image.SecretsKeychain(secs)
	if err != nil {
		return nil, fmt.Errorf("image pull secrets: %w", err)
	}
	return kc, nil
}

// pullSecrets are the Secrets named by the revision's imagePullSecrets and
// its ServiceAccount's. Missing ones are skipped, as the kubelet does.
func (m *Manager) pullSecrets(rev *servingv1.Revision) []corev1.Secret {
	refs := rev.Spec.ImagePullSecrets
	if m.serviceAccounts != nil && rev.Spec.ServiceAccountName != "" {
		if sa, err := m.serviceAccounts.ServiceAccounts(rev.Namespace).Get(rev.Spec.ServiceAccountName); err == nil {
			refs = append(refs[:len(refs):len(refs)], sa.ImagePullSecrets...)
		}
	}
	var secs []corev1.Secret
	seen := map[string]bool{}
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		s, err := m.secret(rev.Namespace, ref.Name)
		if err != nil {
			m.log.Debug("image pull secret not found", "namespace", rev.Namespace, "revision", rev.Name, "secret", ref.Name)
			continue
		}
		secs = append(secs, *s)
	}
	return secs
}

func (m *Manager) secret(ns, name string) (*corev1.Secret, error) {
	s, err := m.secrets.Secrets(ns).Get(name)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return s, nil
}

func (m *Manager) configMap(ns, name string) (*corev1.ConfigMap, error) {
	c, err := m.configMaps.ConfigMaps(ns).Get(name)
	if err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	return c, nil
}

// runtimeClass reads a RuntimeClass from the cache; NotFound when missing.
func (m *Manager) runtimeClass(name string) (*nodev1.RuntimeClass, error) {
	rc, err := m.runtimeClasses.Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("runtimeclass %q: %w", name, err)
	}
	return rc, nil
}

// Ensure makes the Manager run rev (idempotent) and returns what it knows
// of it. It does no I/O: the revision's loop does the work.
func (m *Manager) Ensure(_ context.Context, rev *servingv1.Revision) (State, error) {
	if len(rev.Spec.Containers) == 0 {
		return State{}, errors.New("ensure: the revision has no container")
	}
	k := key{rev.Namespace, rev.Name}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return State{}, errors.New("ensure: the revision manager is closed")
	}
	r := m.revs[k]
	if r != nil && r.uid() != rev.UID {
		// The Revision was deleted and made again under its name: the
		// old one's instances stop, the new one starts afresh.
		m.retireLocked(r)
		r = nil
	}
	var claimed []string
	var stale []pod.Status
	created := r == nil
	if created {
		r = newRevision(m, k, rev)
		claimed, stale = r.claim(m.orphans[k])
		delete(m.orphans, k)
		for _, id := range claimed {
			m.pods[id] = r
		}
		m.revs[k] = r
	}
	m.mu.Unlock()
	r.trackAdopted(claimed)
	for _, id := range claimed {
		r.podChanged(id) // it may have changed since it was listed
	}
	m.stopOrphans(stale)
	st := r.update(rev)
	if created {
		r.poke() // its first reconcile
	}
	return st, nil
}

// stopOrphans stops pods of an earlier process that no revision claims, in
// the background.
func (m *Manager) stopOrphans(sts []pod.Status) {
	for _, st := range sts {
		m.log.Info("stopping an instance of an earlier run that no revision claims", "instance", st.ID,
			"namespace", st.Labels[LabelNamespace], "revision", st.Labels[LabelRevision])
		m.mu.Lock()
		delete(m.pods, st.ID)
		m.mu.Unlock()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := m.opts.Pods.Stop(m.ctx, st.ID, orphanGrace); err != nil {
				m.log.Warn("stop an instance of an earlier run", "instance", st.ID, "err", err)
			}
		}()
	}
}

// orphanGrace is the grace period of an instance of an earlier run whose
// revision is gone.
const orphanGrace = 30 * time.Second

// Retain stops the instances of an earlier run whose revisions are not in
// keep ("namespace/name"): the Revision reconciler calls it once it has
// seen every Revision, so that instances of revisions deleted while knbox
// was down do not run on.
func (m *Manager) Retain(keep []string) {
	want := map[string]bool{}
	for _, k := range keep {
		want[k] = true
	}
	var stale []pod.Status
	m.mu.Lock()
	for k, sts := range m.orphans {
		if !want[k.String()] {
			stale = append(stale, sts...)
			delete(m.orphans, k)
		}
	}
	m.mu.Unlock()
	m.stopOrphans(stale)
}

// Remove stops every instance of the revision (orderly, as a scale-down
// does) and removes its logs. It returns once all is gone or ctx is done;
// the rest then goes on in the background (see Retire).
func (m *Manager) Remove(ctx context.Context, namespace, name string) error {
	select {
	case <-m.Retire(namespace, name):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("remove %s: %w", key{namespace, name}, ctx.Err())
	}
}

// Retire begins the removal of a revision that no longer exists and
// returns at once: the revision makes no more instances, those it has stop
// in order in the background (their Pods show Terminating until they are
// gone) and its logs are removed then. The name is free at once: a
// revision of the same name that Ensure gets next starts afresh beside the
// instances that stop. The channel is closed once all is gone.
func (m *Manager) Retire(namespace, name string) <-chan struct{} {
	k := key{namespace, name}
	m.mu.Lock()
	stale := m.orphans[k]
	delete(m.orphans, k)
	r := m.revs[k]
	if r != nil {
		m.retireLocked(r)
	} else {
		for o := range m.retiring {
			if o.key == k {
				r = o
			}
		}
	}
	var err error
	if r == nil {
		// Nothing of it runs (any more): its logs go now.
		err = m.opts.Logs.Remove(namespace, name)
	}
	m.mu.Unlock()
	m.stopOrphans(stale)
	if err != nil {
		m.log.Warn("remove logs", "namespace", namespace, "revision", name, "err", err)
	}
	if r == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return r.done
}

// retireLocked takes r out of the revisions by name and makes it stop its
// instances and end (removing its logs). m.mu is held.
func (m *Manager) retireLocked(r *revision) {
	if m.revs[r.key] == r {
		delete(m.revs, r.key)
	}
	if m.retiring[r] {
		return
	}
	m.retiring[r] = true
	r.log.Info("revision removed: stopping its instances", "instances", r.count())
	r.remove(true)
}

// retired is called by a retired revision's loop once its instances are
// gone: it forgets r and removes r's logs: the whole group, or, when a
// revision of the same name runs already, the files of r's instances.
// m.mu is held while the files are removed, so that a new revision of the
// name cannot start writing in between.
func (m *Manager) retired(r *revision) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.retiring, r)
	var err error
	if m.revs[r.key] == nil {
		err = m.opts.Logs.Remove(r.key.namespace, r.key.name)
	} else {
		err = m.opts.Logs.RemoveInstances(r.key.namespace, r.key.name, r.ranIDs())
	}
	if err != nil {
		r.log.Warn("remove logs", "err", err)
	}
}

// forget drops r from the revisions once its loop has ended.
func (m *Manager) forget(r *revision) {
	m.mu.Lock()
	if m.revs[r.key] == r {
		delete(m.revs, r.key)
	}
	delete(m.retiring, r)
	m.mu.Unlock()
}

func (m *Manager) trackPod(id string, r *revision) {
	m.mu.Lock()
	m.pods[id] = r
	m.mu.Unlock()
}

func (m *Manager) untrackPod(id string) {
	m.mu.Lock()
	delete(m.pods, id)
	m.mu.Unlock()
}

func (m *Manager) revision(namespace, name string) *revision {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revs[key{namespace, name}]
}

// Ready returns the number of ready instances of the revision (for the
// autoscaler; it takes no lock the autoscaler could wait on).
func (m *Manager) Ready(namespace, name string) int32 {
	r := m.revision(namespace, name)
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyLocked()
}

// Poke tells the Manager that a request waits for the revision: a revision
// that failed its progress deadline gets another attempt. It does not
// change the scale (the autoscaler, poked too, does).
func (m *Manager) Poke(namespace, name string) {
	if r := m.revision(namespace, name); r != nil {
		now := time.Now()
		r.mu.Lock()
		r.lastRequest = now
		noSpare := m.opts.Prepared != nil && r.spare == nil
		r.mu.Unlock()
		m.touchPool(r, now)
		r.retry()
		if noSpare {
			// Its last request is newer now: it may take a place in
			// the budget.
			r.poke()
		}
	}
}

// Detach ends every goroutine of the Manager and leaves the instances
// running, for the next process to adopt (see package pod's Detach and
// Recover); the prepared sandboxes are stopped first. It returns once every goroutine has ended or ctx ends.
func (m *Manager) Detach(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.detaching.Store(true)
	spares := make(map[string]*revision, len(m.spares))
	for id, r := range m.spares {
		spares[id] = r
	}
	m.mu.Unlock()
	// The prepared sandboxes do not outlive this process: a successor
	// would remove them (package pod's Recover), and without one they
	// would hold their memory for nothing. They stop at once (nothing
	// runs in them).
	var wg sync.WaitGroup
	for id, r := range spares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.mu.Lock()
			if r.spare != nil && r.spare.id == id {
				r.spare = nil
			}
			r.mu.Unlock()
			m.leavePool(r)
			m.untrackSpare(id)
			if err := m.opts.Pods.Stop(ctx, id, 0); err != nil {
				m.log.Warn("stop prepared sandbox", "instance", id, "err", err)
			}
		}()
	}
	wg.Wait()
	m.cancel()
	m.endLoops()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("detach revision manager: %w", ctx.Err())
	}
}

// Close stops every instance in order (drain, SIGTERM, grace, SIGKILL),
// waiting at most until ctx is done, and returns once every goroutine of
// the Manager has ended.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	revs := make([]*revision, 0, len(m.revs)+len(m.retiring))
	for _, r := range m.revs {
		revs = append(revs, r)
	}
	for r := range m.retiring {
		revs = append(revs, r)
	}
	m.mu.Unlock()
	for _, r := range revs {
		r.remove(false)
	}
	var err error
	for _, r := range revs {
		select {
		case <-r.done:
		case <-ctx.Done():
			err = fmt.Errorf("close revision manager: %w", ctx.Err())
		}
		if err != nil {
			break
		}
	}
	m.cancel()
	m.endLoops()
	m.wg.Wait()
	return err
}

// endLoops ends every revision's loop once m.ctx is done: the loops that
// run see it themselves; the others (at rest, without a goroutine) are
// started to end, so that every revision's done is closed as before. No
// loop starts after it.
func (m *Manager) endLoops() {
	for _, r := range m.revisions() {
		r.poke()
	}
	m.loopMu.Lock()
	m.loopsClosed = true
	m.loopMu.Unlock()
}

// Labels the Manager puts on its pods.
const (
	LabelNamespace   = "knbox.dev/namespace"
	LabelRevision    = "serving.knative.dev/revision"
	LabelRevisionUID = "serving.knative.dev/revisionUID"
	// LabelServiceAccount is the ServiceAccount the instance runs as
	// ("default" when the Revision names none): the metadata service
	// issues its identity tokens for it.
	LabelServiceAccount = "knbox.dev/service-account"
)
