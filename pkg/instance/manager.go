package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/runtime"
)

// DefaultProgressDeadline is Knative's config-deployment progress-deadline.
const DefaultProgressDeadline = 600 * time.Second

// DefaultHandler runs revisions that name no RuntimeClass when
// Options.DefaultRuntimeClass is empty.
const DefaultHandler = "runc"

// Options configures a Manager. Images, Handlers and StateDir are required;
// the zero value of every other field is a documented default.
type Options struct {
	// Images pulls and mounts images.
	Images *image.Store
	// Handlers are the runtimes by handler name (runc, runsc, process, ...).
	Handlers map[string]runtime.Handler
	// DefaultRuntimeClass is the RuntimeClass of revisions that name none;
	// "" means handler DefaultHandler ("runc") directly.
	DefaultRuntimeClass string
	// RuntimeClassHandler resolves a RuntimeClass name to its handler; nil
	// resolves every name to itself.
	RuntimeClassHandler func(name string) (handler string, ok bool)
	// Lookup reads the Secrets and ConfigMaps that env valueFrom and
	// envFrom, volumes and imagePullSecrets name; nil finds none.
	Lookup Lookup
	// StateDir holds the instances' directories (root filesystem mounts,
	// bundles, sockets) and their logs.
	StateDir string
	// ProgressDeadline bounds how long a new revision may take to become
	// ready (0: DefaultProgressDeadline).
	ProgressDeadline time.Duration
	// Policy is the operator's container policy.
	Policy oci.Policy
	// NetNSRoot is where instances' network namespaces are bind-mounted
	// ("": network.DefaultRoot).
	NetNSRoot string
	// Egress, when set, attaches every instance's network namespace to the
	// egress bridge (outbound network through NAT) after making it, and
	// detaches it before deleting it; nil: loopback only.
	Egress *network.Egress
	// Nameservers, when set, are the name servers of every instance's
	// /etc/resolv.conf instead of the host's (useful with Egress on a host
	// whose resolvers are on loopback).
	Nameservers []string
	// VolumeSyncPeriod is how often running instances' Secret, ConfigMap
	// and projected volumes are brought up to date (0:
	// DefaultVolumeSyncPeriod; negative: never).
	VolumeSyncPeriod time.Duration
	// Logger receives instance lifecycle logs (nil: discard).
	Logger *slog.Logger
}

// Lookup reads Secrets and ConfigMaps. Errors for missing objects must
// satisfy k8s.io/apimachinery's errors.IsNotFound.
type Lookup interface {
	Secret(namespace, name string) (*corev1.Secret, error)
	ConfigMap(namespace, name string) (*corev1.ConfigMap, error)
}

type key struct{ namespace, name string }

func (k key) String() string { return k.namespace + "/" + k.name }

// Manager runs revisions as instances. It is safe for concurrent use.
type Manager struct {
	opts      Options
	log       *slog.Logger
	deadline  time.Duration
	memory    int64
	netnsRoot string

	// ctx bounds every goroutine the Manager starts; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // revision loops

	mu     sync.Mutex
	revs   map[key]*revision
	scales map[key]int32 // desired scales of revisions not ensured yet
	closed bool

	subsMu sync.RWMutex
	subs   []func(namespace, name string)
}

var _ controller.Runtime = (*Manager)(nil)

// New returns a Manager. Call Recover before the first Ensure to clean up
// after an earlier process, and Close to stop every instance.
func New(opts Options) (*Manager, error) {
	if opts.Images == nil {
		return nil, errors.New("instance manager: Options.Images is required")
	}
	if len(opts.Handlers) == 0 {
		return nil, errors.New("instance manager: Options.Handlers is empty")
	}
	if opts.StateDir == "" {
		return nil, errors.New("instance manager: Options.StateDir is required")
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("instance manager: %w", err)
	}
	opts.StateDir = dir
	for _, d := range []string{instancesDir(dir), logsDir(dir)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("instance manager: %w", err)
		}
	}
	m := &Manager{
		opts:      opts,
		log:       opts.Logger,
		deadline:  opts.ProgressDeadline,
		memory:    machineMemory(),
		netnsRoot: opts.NetNSRoot,
		revs:      map[key]*revision{},
		scales:    map[key]int32{},
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if m.netnsRoot == "" {
		m.netnsRoot = network.DefaultRoot
	}
	if m.deadline <= 0 {
		m.deadline = DefaultProgressDeadline
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

func instancesDir(stateDir string) string { return filepath.Join(stateDir, "instances") }
func logsDir(stateDir string) string      { return filepath.Join(stateDir, "logs") }

func (m *Manager) revLogDir(k key) string {
	return filepath.Join(logsDir(m.opts.StateDir), k.namespace, k.name)
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
// using its imagePullSecrets.
func (m *Manager) Resolve(ctx context.Context, rev *servingv1.Revision, img string) (string, error) {
	kc, err := m.keychain(rev)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", img, err)
	}
	ref, err := m.opts.Images.Resolve(ctx, img, kc)
	if err != nil {
		return "", err
	}
	return ref, nil
}

// keychain returns the credentials of the revision's imagePullSecrets
// (nil when it has none). Missing Secrets are skipped, as the kubelet does.
func (m *Manager) keychain(rev *servingv1.Revision) (authn.Keychain, error) {
	if len(rev.Spec.ImagePullSecrets) == 0 || m.opts.Lookup == nil {
		return nil, nil
	}
	var secs []corev1.Secret
	for _, ref := range rev.Spec.ImagePullSecrets {
		s, err := m.opts.Lookup.Secret(rev.Namespace, ref.Name)
		if err != nil {
			if isNotFound(err) {
				m.log.Warn("image pull secret not found", "namespace", rev.Namespace, "revision", rev.Name, "secret", ref.Name)
				continue
			}
			return nil, fmt.Errorf("image pull secret %q: %w", ref.Name, err)
		}
		secs = append(secs, *s)
	}
	if len(secs) == 0 {
		return nil, nil
	}
	kc, err := image.SecretsKeychain(secs)
	if err != nil {
		return nil, fmt.Errorf("image pull secrets: %w", err)
	}
	return kc, nil
}

// Ensure makes the Manager run rev (idempotent) and returns what it knows
// of it. A new revision starts one instance at once, the deployment probe,
// whatever its scale.
func (m *Manager) Ensure(_ context.Context, rev *servingv1.Revision) (controller.RevisionState, error) {
	if len(rev.Spec.Containers) == 0 {
		return controller.RevisionState{}, errors.New("ensure: the revision has no container")
	}
	k := key{rev.Namespace, rev.Name}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return controller.RevisionState{}, errors.New("ensure: the instance manager is closed")
	}
	r := m.revs[k]
	if r == nil {
		r = newRevision(m, k, rev)
		if d, ok := m.scales[k]; ok {
			r.desired, r.scaleSet = d, true
			delete(m.scales, k)
		}
		m.revs[k] = r
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			r.run()
		}()
	}
	m.mu.Unlock()
	return r.update(rev), nil
}

// Remove stops every instance of the revision (orderly, as a scale-down
// does) and removes its logs. It returns once all is gone or ctx is done;
// the rest then goes on in the background.
func (m *Manager) Remove(ctx context.Context, namespace, name string) error {
	k := key{namespace, name}
	m.mu.Lock()
	r := m.revs[k]
	delete(m.scales, k)
	m.mu.Unlock()
	if r != nil {
		r.remove()
		select {
		case <-r.done:
		case <-ctx.Done():
			return fmt.Errorf("remove %s: %w", k, ctx.Err())
		}
	}
	if err := os.RemoveAll(m.revLogDir(k)); err != nil {
		return fmt.Errorf("remove %s: logs: %w", k, err)
	}
	_ = os.Remove(filepath.Dir(m.revLogDir(k))) // the namespace's dir, if empty
	return nil
}

// forget drops r from the revisions once its loop has ended.
func (m *Manager) forget(r *revision) {
	m.mu.Lock()
	if m.revs[r.key] == r {
		delete(m.revs, r.key)
	}
	m.mu.Unlock()
}

func (m *Manager) revision(namespace, name string) *revision {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revs[key{namespace, name}]
}

// Ready returns the number of ready instances of the revision (for the
// autoscaler's Ready hook; it takes no lock the autoscaler could wait on).
func (m *Manager) Ready(namespace, revision string) int32 {
	r := m.revision(namespace, revision)
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyLocked()
}

// ImagesInUse returns the image references (digests) of the revisions the
// Manager runs, sorted, for the image cache's prune to keep.
func (m *Manager) ImagesInUse() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var refs []string
	for _, r := range m.revs {
		for _, ref := range r.spec.refs() {
			if ref != "" && !seen[ref] {
				seen[ref] = true
				refs = append(refs, ref)
			}
		}
	}
	slices.Sort(refs)
	return refs
}

// SetScale sets the number of instances the revision should have; the
// autoscaler calls it. A revision not ensured yet gets it when it is.
func (m *Manager) SetScale(namespace, revision string, desired int32) {
	if desired < 0 {
		desired = 0
	}
	k := key{namespace, revision}
	m.mu.Lock()
	r := m.revs[k]
	if r == nil {
		m.scales[k] = desired
	}
	m.mu.Unlock()
	if r != nil {
		r.setScale(desired, false)
	}
}

// Activate asks for at least one instance of the revision now (a request
// waits for it). A revision that failed its progress deadline gets another
// attempt.
func (m *Manager) Activate(namespace, revision string) {
	k := key{namespace, revision}
	m.mu.Lock()
	r := m.revs[k]
	if r == nil && m.scales[k] < 1 {
		m.scales[k] = 1
	}
	m.mu.Unlock()
	if r != nil {
		r.setScale(1, true)
	}
}

// Logs writes the revision's logs (stdout, stderr and syslog of all its
// instances, the stopped ones that are kept included) from since on, in
// time order, one message a line. With follow it keeps writing new lines
// until a write fails, the revision is removed or the Manager is closed.
func (m *Manager) Logs(namespace, revision string, follow bool, since time.Time, w io.Writer) error {
	return m.LogsContext(m.ctx, namespace, revision, follow, since, w)
}

// LogsContext is Logs that also ends when ctx is done.
func (m *Manager) LogsContext(ctx context.Context, namespace, revision string, follow bool, since time.Time, w io.Writer) error {
	k := key{namespace, revision}
	var removed <-chan struct{}
	if r := m.revision(namespace, revision); r != nil {
		removed = r.done
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWithManager := context.AfterFunc(m.ctx, cancel)
	defer stopWithManager()
	stop := ctx.Done()
	if removed != nil && follow {
		// Stop following when the revision goes away.
		merged := make(chan struct{})
		go func() { // ends when either ends; cancel runs when copyLogs returns
			defer close(merged)
			select {
			case <-stop:
			case <-removed:
			}
		}()
		stop = merged
	}
	return copyLogs(m.revLogDir(k), follow, since, w, stop)
}

// Close stops every instance in order (drain, SIGTERM, grace, SIGKILL),
// waiting at most until ctx is done; then it kills what is left and returns
// once every goroutine of the Manager has ended.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	revs := make([]*revision, 0, len(m.revs))
	for _, r := range m.revs {
		revs = append(revs, r)
	}
	m.mu.Unlock()
	for _, r := range revs {
		r.remove()
	}
	var err error
	for _, r := range revs {
		select {
		case <-r.done:
		case <-ctx.Done():
			err = fmt.Errorf("close instance manager: %w", ctx.Err())
		}
		if err != nil {
			break
		}
	}
	m.cancel()
	m.wg.Wait()
	return err
}

// machineMemory is the machine's memory in bytes (0 if unknown).
func machineMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

func numCPU() int { return goruntime.NumCPU() }
