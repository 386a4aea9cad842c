package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/runtime"
)

// Options configures a Runtime. Images, Handlers and StateDir are
// required; the zero value of every other field is a documented default.
type Options struct {
	// Images pulls and mounts images.
	Images *image.Store
	// Handlers are the runtimes by handler name (runc, runsc, process, ...).
	Handlers map[string]runtime.Handler
	// StateDir holds the pods' directories (root filesystem mounts,
	// bundles, sockets, volumes). It must belong to this Runtime alone.
	StateDir string
	// NetNSRoot is where pods' network namespaces are bind-mounted
	// ("": network.DefaultRoot).
	NetNSRoot string
	// Egress, when set, attaches every pod's network namespace to the
	// egress bridge (outbound network through NAT) after making it, and
	// detaches it before deleting it; nil: loopback only.
	Egress *network.Egress
	// Nameservers, when set, are the name servers of every pod's
	// /etc/resolv.conf instead of the host's.
	Nameservers []string
	// Network, when set, is called for each pod once its network
	// namespace exists, before the pod's /etc files are written, and for
	// each pod Recover adopts: it may serve the pod inside its namespace
	// (knbox's name server and router listener, as the kubelet's CNI and
	// DNS setup do) and returns the pod's /etc/resolv.conf ("": the one
	// Nameservers makes) and what to close before the namespace is deleted
	// (nil: nothing). Its error fails the pod's start like any sandbox
	// error; for an adopted pod it is logged.
	Network func(ctx context.Context, spec *Spec, ns *network.NS) (resolvConf string, stop io.Closer, err error)
	// Policy is the operator's container policy.
	Policy oci.Policy
	// ShimCommand is the command line that starts a pod's shim (knbox's
	// own binary and "shim": see ShimMain), which runs the pod's containers
	// and owns their output so that they outlive this process. Empty: the
	// containers are this process's children and their output dies with
	// it (for embedding and tests; Detach then loses the output).
	ShimCommand []string
	// IdleShims is the most shims kept started ahead of need, idle, for
	// the next pods to take (see "Idle shims" in shimpool.go); 0: none,
	// every pod starts its own. Only with ShimCommand.
	IdleShims int
	// IdleShimsKeep is how long the idle shims are kept after the last
	// pod was made (0: DefaultIdleShimsKeep).
	IdleShimsKeep time.Duration
	// PullTimeout bounds each pull of a pod's images (0:
	// DefaultPullTimeout); a pull cut by it is a failure like any other
	// (ImagePullBackOff, retried).
	PullTimeout time.Duration
	// EphemeralStorage configures the measure and limits of the pods'
	// local storage (see ephemeral.go); the zero value: the defaults.
	EphemeralStorage EphemeralStorage
	// Logger receives lifecycle logs (nil: discard).
	Logger *slog.Logger
	// Events receives kubelet-like events (see Event); nil: none.
	Events func(Event)
}

// DefaultPullTimeout is Knative's default progress-deadline: a pull that
// takes longer fails the revision anyway.
const DefaultPullTimeout = 600 * time.Second

// DefaultIdleShimsKeep is Options.IdleShimsKeep's default.
const DefaultIdleShimsKeep = 10 * time.Minute

// Event is something that happened to a pod, named as the kubelet names
// its events (Pulling, Pulled, Started, Killing, BackOff, Unhealthy, Failed,
// Evicted).
type Event struct {
	Pod       string
	Container string
	Reason    string
	Message   string
	Warning   bool
}

// Event reasons.
const (
	EventPulling   = "Pulling"
	EventPulled    = "Pulled"
	EventCreated   = "Created"
	EventStarted   = "Started"
	EventKilling   = "Killing"
	EventBackOff   = "BackOff"
	EventUnhealthy = "Unhealthy"
	EventFailed    = "Failed"
	EventEvicted   = "Evicted"
)

// HandlerInfo describes a handler the Runtime has.
type HandlerInfo struct {
	// MultiContainer says the handler runs several containers per pod.
	MultiContainer bool
}

// Runtime runs pods. It is safe for concurrent use.
type Runtime struct {
	opts      Options
	log       *slog.Logger
	memory    int64
	netnsRoot string
	storage   EphemeralStorage // with defaults

	// ctx bounds every goroutine the Runtime starts; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.RWMutex
	pods     map[string]*pod
	closed   bool
	detached bool // set by Detach: pods end without cleaning up

	subsMu sync.RWMutex
	subs   []func(id string)

	// shims are the idle shims; nil without Options.IdleShims.
	shims *shimPool
}

// New returns a Runtime. Call Recover before the first Run, and Close to
// stop every pod.
func New(opts Options) (*Runtime, error) {
	if opts.Images == nil {
		return nil, errors.New("pod runtime: Options.Images is required")
	}
	if len(opts.Handlers) == 0 {
		return nil, errors.New("pod runtime: Options.Handlers is empty")
	}
	if opts.StateDir == "" {
		return nil, errors.New("pod runtime: Options.StateDir is required")
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("pod runtime: %w", err)
	}
	opts.StateDir = dir
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("pod runtime: %w", err)
	}
	r := &Runtime{opts: opts, log: opts.Logger, memory: machineMemory(), netnsRoot: opts.NetNSRoot, pods: map[string]*pod{}}
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if r.netnsRoot == "" {
		r.netnsRoot = network.DefaultRoot
	}
	if r.opts.PullTimeout <= 0 {
		r.opts.PullTimeout = DefaultPullTimeout
	}
	r.storage = opts.EphemeralStorage
	if r.storage.Interval <= 0 {
		r.storage.Interval = DefaultEphemeralStorageInterval
	}
	if r.storage.MaxFiles <= 0 {
		r.storage.MaxFiles = DefaultEphemeralStorageMaxFiles
	}
	if r.storage.MaxDepth <= 0 {
		r.storage.MaxDepth = DefaultEphemeralStorageMaxDepth
	}
	if opts.IdleShims > 0 && len(opts.ShimCommand) > 0 {
		// Beside StateDir, which holds pods' directories only.
		keep := opts.IdleShimsKeep
		if keep <= 0 {
			keep = DefaultIdleShimsKeep
		}
		if r.shims, err = newShimPool(opts.ShimCommand, dir+".shims", opts.IdleShims, keep, r.log.With("component", "shims")); err != nil {
			return nil, fmt.Errorf("pod runtime: %w", err)
		}
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// IdleShims is the number of idle shims (see Options.IdleShims).
func (r *Runtime) IdleShims() int {
	if r.shims == nil {
		return 0
	}
	return r.shims.count()
}

// closeShims ends the idle shims.
func (r *Runtime) closeShims() {
	if r.shims == nil {
		return
	}
	if err := r.shims.close(); err != nil {
		r.log.Warn("close idle shims", "err", err)
	}
}

// Handler tells whether the Runtime has handler name, and what it can do.
func (r *Runtime) Handler(name string) (HandlerInfo, bool) {
	h, ok := r.opts.Handlers[name]
	if !ok {
		return HandlerInfo{}, false
	}
	mc, _ := h.(runtime.MultiContainer)
	return HandlerInfo{MultiContainer: mc != nil && mc.MultiContainer()}, true
}

// Handlers lists the handlers' names, sorted.
func (r *Runtime) Handlers() []string {
	names := make([]string, 0, len(r.opts.Handlers))
	for n := range r.opts.Handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Run starts a pod and returns at once: the pod pulls its images, makes its
// sandbox, starts its containers, probes them and restarts them with
// backoff, until Stop. Its progress is in Status. Run fails only for a spec
// that cannot run here (invalid, an unknown handler, several containers for
// a handler that runs one) or an id that is taken.
func (r *Runtime) Run(ctx context.Context, spec Spec) error {
	return r.run(ctx, spec, false)
}

// Prepare is Run up to the containers' start: the pod pulls its images,
// makes its sandbox (directory, network namespace, egress, /etc files,
// volumes, shim, root filesystems, bundles) and creates its containers
// without starting them (runc create: each init waits on its exec FIFO),
// then waits, with Status.Prepared set, for Start, which only starts them
// (runc start) and probes them. Handlers that cannot create without
// starting (process) have their containers run at Start. A prepared pod
// that is stopped never ran; one that Recover finds after a crash is
// removed. A Sequential pod cannot be prepared.
func (r *Runtime) Prepare(ctx context.Context, spec Spec) error {
	if spec.Sequential {
		return fmt.Errorf("prepare pod %s: a sequential pod cannot be prepared", spec.ID)
	}
	return r.run(ctx, spec, true)
}

// Start starts a pod that Prepare made; it returns at once (the pod's
// progress is in Status). Starting a started pod is not an error.
func (r *Runtime) Start(id string) error {
	p := r.pod(id)
	if p == nil {
		return fmt.Errorf("start pod %s: it does not exist", id)
	}
	if p.hold == nil {
		return nil
	}
	p.holdOnce.Do(func() { close(p.hold) })
	return nil
}

func (r *Runtime) run(ctx context.Context, spec Spec, prepare bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("run pod %s: %w", spec.ID, err)
	}
	if err := spec.validate(); err != nil {
		return err
	}
	info, ok := r.Handler(spec.Handler)
	if !ok {
		return fmt.Errorf("pod %s: runtime handler %q is not available (available: %v)", spec.ID, spec.Handler, r.Handlers())
	}
	if len(spec.Containers) > 1 && !info.MultiContainer {
		return fmt.Errorf("pod %s: runtime handler %q runs one container per pod, not %d", spec.ID, spec.Handler, len(spec.Containers))
	}
	if _, err := os.Lstat(filepath.Join(r.opts.StateDir, spec.ID)); err == nil && r.pod(spec.ID) == nil {
		return fmt.Errorf("run pod %s: its directory exists (left by an earlier pod; Recover removes it)", spec.ID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("run pod %s: the pod runtime is closed", spec.ID)
	}
	if r.pods[spec.ID] != nil {
		return fmt.Errorf("run pod %s: a pod with this id exists", spec.ID)
	}
	p := newPod(r, spec)
	if prepare {
		p.hold = make(chan struct{})
	}
	r.pods[spec.ID] = p
	if r.shims != nil {
		r.shims.poke()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		p.run(r.ctx)
	}()
	return nil
}

// Stop stops a pod: SIGTERM to every container, SIGKILL to those still
// running after grace, then its containers, mounts, network namespace and
// directory are removed (its log is kept). It returns once the pod is gone,
// or when ctx ends (the stop goes on in the background). Stopping a pod
// that does not exist is not an error.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	p := r.pod(id)
	if p == nil {
		return nil
	}
	p.requestStop(grace)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop pod %s: %w", id, ctx.Err())
	}
}

// Status returns what the Runtime knows of a pod; false once it is gone.
func (r *Runtime) Status(id string) (Status, bool) {
	p := r.pod(id)
	if p == nil {
		return Status{}, false
	}
	return p.status(), true
}

// List returns the status of every pod, by id.
func (r *Runtime) List() []Status {
	r.mu.RLock()
	ps := make([]*pod, 0, len(r.pods))
	for _, p := range r.pods {
		ps = append(ps, p)
	}
	r.mu.RUnlock()
	out := make([]Status, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.status())
	}
	slices.SortFunc(out, func(a, b Status) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Dial connects to the pod's port inside its network namespace.
func (r *Runtime) Dial(ctx context.Context, id string) (net.Conn, error) {
	p := r.pod(id)
	if p == nil {
		return nil, fmt.Errorf("pod %s does not exist", id)
	}
	return p.dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p.spec.Port))))
}

// UpdateVolume replaces the files of one of a pod's file volumes, as the
// kubelet updates Secret and ConfigMap volumes: a reader in the container
// sees the old files or the new ones (subPath mounts of them stay as they
// were). It writes nothing when the volume holds these files already, and
// nothing (without an error) when the pod has not made its volumes yet:
// they are made from the files given last.
func (r *Runtime) UpdateVolume(ctx context.Context, id, volume string, files map[string]File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := r.pod(id)
	if p == nil {
		return fmt.Errorf("update volume %s of pod %s: no such pod", volume, id)
	}
	return p.updateVolume(volume, files)
}

func (r *Runtime) pod(id string) *pod {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pods[id]
}

// forget drops a pod whose goroutine has ended.
func (r *Runtime) forget(p *pod) {
	r.mu.Lock()
	if r.pods[p.spec.ID] == p {
		delete(r.pods, p.spec.ID)
	}
	r.mu.Unlock()
	r.changed(p.spec.ID)
}

// Subscribe registers f, called with a pod's id whenever its Status
// changes, and once more when it is gone: the status stream. f must not
// block; it runs with no lock of the Runtime held.
func (r *Runtime) Subscribe(f func(id string)) {
	r.subsMu.Lock()
	r.subs = append(r.subs, f)
	r.subsMu.Unlock()
}

func (r *Runtime) changed(id string) {
	r.subsMu.RLock()
	subs := r.subs
	r.subsMu.RUnlock()
	for _, f := range subs {
		f(id)
	}
}

func (r *Runtime) event(e Event) {
	if r.opts.Events != nil {
		r.opts.Events(e)
	}
}

// Close stops every pod (SIGTERM, its grace period, SIGKILL), waiting at
// most until ctx ends; then it kills what is left and returns once every
// goroutine of the Runtime has ended.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	ps := make([]*pod, 0, len(r.pods))
	for _, p := range r.pods {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.requestStop(p.spec.GracePeriod)
	}
	var err error
	for _, p := range ps {
		select {
		case <-p.done:
		case <-ctx.Done():
			err = fmt.Errorf("close pod runtime: %w", ctx.Err())
		}
		if err != nil {
			break
		}
	}
	r.cancel()
	r.wg.Wait()
	r.closeShims()
	return err
}

// Detach ends every goroutine of the Runtime and leaves its pods running,
// for the next process to adopt (Recover): their shims keep their
// containers and output. Without shims (Options.ShimCommand empty) the
// containers run on, but their output is lost. It returns once every
// goroutine has ended or ctx ends.
func (r *Runtime) Detach(ctx context.Context) error {
	r.mu.Lock()
	r.closed, r.detached = true, true
	r.mu.Unlock()
	r.closeShims()
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("detach pod runtime: %w", ctx.Err())
	}
}

func (r *Runtime) isDetached() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.detached
}

// machineMemory is the machine's memory in bytes (0 if unknown).
func machineMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
