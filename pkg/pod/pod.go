package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/runtime"
)

// Restart backoff: doubling from backoffBase up to backoffCap; containers
// that ran for backoffCap or longer start the count afresh.
const (
	backoffBase = 200 * time.Millisecond
	backoffCap  = 10 * time.Second
)

// Bounds of a pod's own operations.
const (
	// cleanupTimeout bounds deleting a container and a network namespace.
	cleanupTimeout = 30 * time.Second
	// killWait bounds the wait for a container's exit after SIGKILL.
	killWait = 10 * time.Second
	// youngContainers and termAgain: containers stopped less than
	// youngContainers after their start get a second SIGTERM termAgain
	// after the first (see terminate).
	youngContainers = 2 * time.Second
	termAgain       = time.Second
	// maxTerminationMessage is what is read of a termination log, as the
	// kubelet reads at most 4096 bytes.
	maxTerminationMessage = 4096
)

func backoff(failures int) time.Duration {
	d := backoffBase
	for i := 1; i < failures && d < backoffCap; i++ {
		d *= 2
	}
	return min(d, backoffCap)
}

// stateFile is written into the pod's directory before anything is made
// for it, so that Recover knows what the pod was.
const stateFile = "pod.json"

// podState is what stateFile holds.
type podState struct {
	Spec    Spec      `json:"spec"`
	NetNS   string    `json:"netns"`
	Created time.Time `json:"created"`
}

// pod is one running pod: a directory, a network namespace, a log, and its
// containers, restarted together when one of them ends. Its goroutine (run)
// owns all of them.
type pod struct {
	rt      *Runtime
	spec    Spec
	h       runtime.Handler
	dir     string
	log     *slog.Logger
	created time.Time
	limits  storageLimits // local storage (ephemeral.go)

	// hold, for a pod made by Prepare, is closed by Start: until then the
	// pod is made up to its containers, created and not started.
	hold     chan struct{}
	holdOnce sync.Once

	stopCh   chan struct{} // closed by requestStop
	stopOnce sync.Once
	grace    time.Duration // set before stopCh is closed
	done     chan struct{} // closed once the pod is gone

	mu sync.Mutex // guards the fields below
	st Status
	ns *network.NS
	// netStop closes what Options.Network serves in ns.
	netStop io.Closer

	// costMon and costPids are what Cost measures: the monitor, and the
	// containers' pids when it is no shim.
	costMon  monitor
	costPids []int

	volMu sync.Mutex            // serialises volume writes
	vols  map[string]oci.Volume // prepared volumes, by name
	files map[string]map[string]File

	// Owned by run.
	adopted  bool // recovered with its containers running: supervise first
	prepared bool
	// ctrsCreated: every container is created (prepare), not started.
	ctrsCreated bool
	mon         monitor
	// shimStarting delivers the shim that prepare started in the
	// background, while the rest of the pod is made; awaitMon takes it.
	shimStarting <-chan shimStart
	imgs         []*image.Image // by container, once all are pulled
	ctrs         []*ctr
	lastStarted  time.Time
}

// ctr is one container of a pod. The serving container keeps the layout a
// pod of one container has: its id is the pod's and its bundle
// (config.json, overlay, termination log) is the pod's directory. A
// sidecar's id is "<name>_<pod>": neither a pod id nor a container name has
// a "_", so the id maps back to its pod (which Recover relies on), and it
// does not start with the pod's id, which runsc would take for an
// abbreviation of it (runsc looks a missing id up by prefix and finds the
// sidecar). Its bundle is containers/<name> below the pod's directory,
// where Recover's unmount of everything under it finds its overlay.
type ctr struct {
	idx     int
	name    string
	id      string
	dir     string
	t       task
	mounted bool
	pinned  bool // its staging directory may hold mounts (see pinner)
}

// sidecarSep joins a sidecar's name and its pod's id into its container id.
const sidecarSep = "_"

// sidecarID is the container id of sidecar name of pod id.
func sidecarID(id, name string) string { return name + sidecarSep + id }

// podOf is the id of the pod a container id belongs to.
func podOf(containerID string) string {
	if _, id, ok := strings.Cut(containerID, sidecarSep); ok {
		return id
	}
	return containerID
}

func newPod(r *Runtime, spec Spec) *pod {
	p := &pod{
		rt:      r,
		spec:    spec,
		h:       r.opts.Handlers[spec.Handler],
		dir:     filepath.Join(r.opts.StateDir, spec.ID),
		log:     r.log.With("pod", spec.ID),
		created: time.Now(),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		files:   map[string]map[string]File{},
		limits:  newStorageLimits(&spec, r.storage.DefaultLimit),
	}
	for _, v := range spec.Volumes {
		if !v.EmptyDir {
			p.files[v.Name] = v.Files
		}
	}
	p.st = Status{ID: spec.ID, Labels: maps.Clone(spec.Labels), Created: p.created, Pulling: true}
	if spec.Sequential {
		p.st.Containers = make([]corev1.ContainerState, len(spec.Containers))
		for i := range p.st.Containers {
			p.st.Containers[i].Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		}
	}
	return p
}

// status is a copy of the pod's status.
func (p *pod) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	st.Labels = maps.Clone(p.st.Labels)
	if f := p.st.LastFailure; f != nil {
		fc := *f
		st.LastFailure = &fc
	}
	st.Containers = make([]corev1.ContainerState, len(p.st.Containers))
	for i := range p.st.Containers {
		p.st.Containers[i].DeepCopyInto(&st.Containers[i])
	}
	if p.st.Containers == nil {
		st.Containers = nil
	}
	return st
}

// update changes the status under the lock and reports a change.
func (p *pod) update(f func(st *Status)) {
	p.mu.Lock()
	before := p.st
	f(&p.st)
	changed := !before.same(p.st)
	p.mu.Unlock()
	if changed {
		p.rt.changed(p.spec.ID)
	}
}

// requestStop starts the stop: SIGTERM, grace, SIGKILL.
func (p *pod) requestStop(grace time.Duration) {
	p.stopOnce.Do(func() {
		p.grace = grace
		p.update(func(st *Status) { st.Stopping = true })
		close(p.stopCh)
	})
}

func (p *pod) stopRequested() bool {
	select {
	case <-p.stopCh:
		return true
	default:
		return false
	}
}

// sleep waits d, or less if the pod is stopped or ctx ends; it returns
// false then.
func (p *pod) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// pullError is a failure to pull one of the pod's images.
type pullError struct {
	ref string
	err error
}

func (e *pullError) Error() string { return fmt.Sprintf("pull %s: %v", e.ref, e.err) }
func (e *pullError) Unwrap() error { return e.err }

// run is the pod's life: pull, prepare, start, supervise, restart with
// backoff when a container ends, and clean up when stopped or when ctx
// ends.
func (p *pod) run(ctx context.Context) {
	defer close(p.done)
	defer p.rt.forget(p)
	defer func() {
		if !p.rt.isDetached() {
			p.cleanup()
		}
	}()
	if p.spec.Sequential {
		p.runSequential(ctx)
		return
	}
	failures := 0
	for ctx.Err() == nil && !p.stopRequested() {
		var err error
		if p.adopted {
			// Its containers run: supervise them as they are.
			p.adopted = false
		} else {
			err = p.pull(ctx)
			if err == nil {
				err = p.prepare(ctx)
			}
			if err == nil && p.held() {
				if err = p.createAll(ctx); err == nil && !p.awaitStart(ctx) {
					return
				}
			}
			if err == nil {
				err = p.start(ctx)
			}
		}
		if err != nil {
			if ctx.Err() != nil || p.stopRequested() {
				return
			}
			if isShimGone(err) {
				// Make the shim (and what it owns) again.
				p.mon, p.prepared = nil, false
			}
			failures++
			p.startFailed(err)
			p.teardownContainers()
			p.removeLeftover(ctx)
			if !p.sleep(ctx, backoff(failures)) {
				return
			}
			continue
		}
		f, stopped := p.supervise(ctx)
		if stopped {
			return
		}
		if time.Since(p.lastStarted) >= backoffCap {
			failures = 0
		}
		failures++
		p.update(func(st *Status) {
			st.Running, st.Failures, st.Restarts = false, st.Failures+1, st.Restarts+1
			st.LastFailure = f
		})
		p.teardownContainers()
		if f.Reason == ReasonEvicted {
			p.emptyVolumes() // as a new pod's
		}
		d := backoff(failures)
		p.log.Info("restarting pod", "after", d, "restarts", failures)
		p.rt.event(Event{Pod: p.spec.ID, Container: f.Container, Reason: EventBackOff, Warning: true,
			Message: fmt.Sprintf("Back-off %v restarting failed container", d)})
		if !p.sleep(ctx, d) {
			return
		}
	}
}

// startFailed records why the pod could not be started.
func (p *pod) startFailed(err error) {
	f := &Failure{Reason: ReasonRunContainer, Message: fmt.Sprintf("%s: %v", p.spec.Handler, err), At: time.Now()}
	var pe *pullError
	switch {
	case errors.As(err, &pe):
		f = &Failure{Reason: ReasonImagePullBackOff, Message: fmt.Sprintf("Back-off pulling image %q: %v", pe.ref, pe.err), At: f.At}
	case IsConfigError(err):
		f = &Failure{Reason: ReasonCreateContainerConfig, Message: err.Error(), At: f.At}
	case errors.As(err, new(*SeedError)):
		f = &Failure{Reason: ReasonSeedFailed, Message: err.Error(), At: f.At}
	}
	p.log.Warn("pod failed to start", "reason", f.Reason, "err", err)
	p.rt.event(Event{Pod: p.spec.ID, Reason: EventFailed, Message: f.Message, Warning: true})
	p.update(func(st *Status) {
		st.Failures++
		st.LastFailure = f
	})
}

// pull fetches the pod's images, unless it has them.
func (p *pod) pull(ctx context.Context) error {
	if p.imgs != nil {
		return nil
	}
	kc, err := image.SecretsKeychain(p.spec.PullSecrets)
	if err != nil {
		return &ConfigError{fmt.Errorf("image pull secrets: %w", err)}
	}
	if len(p.spec.PullSecrets) == 0 {
		kc = nil
	}
	imgs := make([]*image.Image, len(p.spec.Images))
	for i, ref := range p.spec.Images {
		p.rt.event(Event{Pod: p.spec.ID, Container: p.spec.Containers[i].Name, Reason: EventPulling, Message: fmt.Sprintf("Pulling image %q", ref)})
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.rt.opts.PullTimeout)
		img, err := p.rt.opts.Images.Pull(pctx, ref, kc)
		cancel()
		if err != nil {
			return &pullError{ref: ref, err: err}
		}
		p.rt.event(Event{Pod: p.spec.ID, Container: p.spec.Containers[i].Name, Reason: EventPulled,
			Message: fmt.Sprintf("Successfully pulled image %q in %v", ref, time.Since(start).Round(time.Millisecond))})
		imgs[i] = img
	}
	p.imgs = imgs
	p.update(func(st *Status) { st.Pulling = false })
	return nil
}

// prepare makes what the pod keeps across container restarts: its
// directory, monitor (log, /dev/log), network namespace, /etc files and
// volumes. It does only what is still missing.
func (p *pod) prepare(ctx context.Context) error {
	if p.prepared {
		return nil
	}
	if _, err := os.Stat(filepath.Join(p.dir, stateFile)); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(p.dir, 0o711); err != nil {
			return fmt.Errorf("prepare pod: %w", err)
		}
		b, err := json.Marshal(podState{Spec: p.spec, NetNS: p.spec.ID, Created: p.created.UTC()})
		if err != nil {
			return fmt.Errorf("prepare pod: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(p.dir, stateFile), b, 0o600); err != nil {
			return fmt.Errorf("prepare pod: %w", err)
		}
	}
	if p.held() {
		// Before anything else is made for it: a crash from here on
		// leaves a pod that Recover removes, never one it adopts.
		if err := os.WriteFile(filepath.Join(p.dir, preparedMarker), nil, 0o600); err != nil {
			return fmt.Errorf("prepare pod: %w", err)
		}
	}
	if p.mon == nil && p.shimStarting == nil {
		if argv := p.rt.opts.ShimCommand; len(argv) > 0 {
			// The shim is a process of its own to start (tens of
			// milliseconds): it starts while the network namespace, the
			// files, the root filesystems and the bundles are made, and
			// the first container's start waits for it (awaitMon).
			ch := make(chan shimStart, 1)
			dir, logPath, h := p.dir, p.spec.LogPath, p.h
			go func() {
				if sp := p.rt.shims; sp != nil {
					if c := sp.take(ctx, dir, logPath, h); c != nil {
						ch <- shimStart{c, nil}
						return
					}
				}
				c, err := startShim(argv, dir, logPath, h)
				ch <- shimStart{c, err}
			}()
			p.shimStarting = ch
		} else {
			mon, err := newLocalMonitor(p.h, p.spec.LogPath, p.dir)
			if err != nil {
				return fmt.Errorf("prepare pod: %w", err)
			}
			p.mon = mon
		}
	}
	if p.ctrs == nil {
		p.ctrs = p.newCtrs()
	}
	if p.nsOf() == nil {
		ns, err := network.CreateIn(p.rt.netnsRoot, p.spec.ID)
		if err != nil {
			return fmt.Errorf("prepare pod: network namespace: %w", err)
		}
		if eg := p.rt.opts.Egress; eg != nil {
			actx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			addr, err := eg.Attach(actx, ns)
			cancel()
			if err != nil {
				if derr := ns.Delete(); derr != nil {
					p.log.Warn("delete network namespace", "err", derr)
				}
				return fmt.Errorf("prepare pod: %w", err)
			}
			p.log.Debug("egress attached", "addr", addr)
		}
		p.mu.Lock()
		p.ns = ns
		p.mu.Unlock()
	}
	resolv := ""
	if hook := p.rt.opts.Network; hook != nil && p.netStopOf() == nil {
		r, stop, err := hook(ctx, &p.spec, p.nsOf())
		if err != nil {
			return fmt.Errorf("prepare pod: network: %w", err)
		}
		p.mu.Lock()
		p.netStop = stop
		p.mu.Unlock()
		resolv = r
	}
	if resolv == "" {
		resolv = resolvConf(p.rt.opts.Nameservers)
	}
	hostname := p.spec.ID
	for _, f := range []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"hostname", hostname + "\n", 0o644},
		{"hosts", "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0o644},
		{"resolv.conf", resolv, 0o644},
	} {
		path := filepath.Join(p.dir, f.name)
		if err := os.WriteFile(path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("prepare pod: %w", err)
		}
		if err := os.Chmod(path, f.mode); err != nil { // past the umask
			return fmt.Errorf("prepare pod: %w", err)
		}
	}
	if err := p.prepareVolumes(ctx); err != nil {
		return err
	}
	p.prepared = true
	return nil
}

// newCtrs makes the pod's containers' state.
func (p *pod) newCtrs() []*ctr {
	ctrs := make([]*ctr, len(p.spec.Containers))
	for i := range p.spec.Containers {
		c := &ctr{idx: i, name: p.spec.Containers[i].Name, id: p.spec.ID, dir: p.dir}
		if i != p.spec.Serving {
			c.id = sidecarID(p.spec.ID, c.name)
			c.dir = filepath.Join(p.dir, "containers", c.name)
		}
		ctrs[i] = c
	}
	return ctrs
}

// prepareVolumes makes the volumes' directories under volumes/<index>: an
// emptyDir writable by everyone, a files volume laid out by writeVolume.
func (p *pod) prepareVolumes(ctx context.Context) error {
	p.volMu.Lock()
	defer p.volMu.Unlock()
	if p.vols != nil {
		return nil
	}
	vols := make(map[string]oci.Volume, len(p.spec.Volumes))
	for i, v := range p.spec.Volumes {
		vdir := filepath.Join(p.dir, "volumes", strconv.Itoa(i))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		mode := os.FileMode(0o755)
		if v.EmptyDir {
			mode = emptyDirMode
		}
		if err := os.Chmod(vdir, mode); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if v.EmptyDir && v.Medium == corev1.StorageMediumMemory {
			// On the host, shared by the containers (see ephemeral.go).
			if err := mountTmpfs(vdir, p.memoryVolumeSize(v), 0o1777); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
		if v.Seed != nil {
			err := p.seed(ctx, vdir, v.Seed)
			var se *SeedError
			switch {
			case errors.As(err, &se):
				return &SeedError{fmt.Errorf("volume %s: %w", v.Name, se.Err)}
			case err != nil:
				return &ConfigError{fmt.Errorf("volume %s: %w", v.Name, err)}
			}
		}
		if !v.EmptyDir {
			p.mu.Lock()
			files := p.files[v.Name]
			p.mu.Unlock()
			if _, err := writeVolume(vdir, files); err != nil {
				return &ConfigError{fmt.Errorf("volume %s: %w", v.Name, err)}
			}
		}
		vols[v.Name] = oci.Volume{Path: vdir, Writable: v.EmptyDir}
	}
	p.vols = vols
	return nil
}

// seed fills an emptyDir from its Seed; a Stop of the pod ends it.
func (p *pod) seed(ctx context.Context, dir string, s *Seed) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return seed(ctx, dir, s, SeedNet{NS: p.nsOf(), Nameservers: p.rt.opts.Nameservers})
}

// updateVolume records a files volume's new content and writes it if the
// volume is made.
func (p *pod) updateVolume(name string, files map[string]File) error {
	var spec *Volume
	for i := range p.spec.Volumes {
		if p.spec.Volumes[i].Name == name {
			spec = &p.spec.Volumes[i]
		}
	}
	if spec == nil || spec.EmptyDir {
		return fmt.Errorf("update volume %s of pod %s: no such files volume", name, p.spec.ID)
	}
	if err := checkFiles(files); err != nil {
		return fmt.Errorf("update volume %s of pod %s: %w", name, p.spec.ID, err)
	}
	p.volMu.Lock()
	defer p.volMu.Unlock()
	p.mu.Lock()
	p.files[name] = files
	p.mu.Unlock()
	vol, ok := p.vols[name]
	if !ok {
		return nil // made from p.files when the pod prepares
	}
	changed, err := writeVolume(vol.Path, files)
	if err != nil {
		return fmt.Errorf("update volume %s of pod %s: %w", name, p.spec.ID, err)
	}
	if changed {
		p.log.Info("volume updated", "volume", name)
	}
	return nil
}

func (p *pod) nsOf() *network.NS {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ns
}

// start mounts a fresh root filesystem for each container, writes its
// bundle and creates it, in the spec's order (as the kubelet starts a
// pod's containers, without waiting for one to be ready before the next).
func (p *pod) start(ctx context.Context) error {
	if p.ctrsCreated {
		if err := p.startCreated(ctx); err != nil {
			return err
		}
		return p.unmarkPrepared()
	}
	p.teardownContainers()
	ns := p.nsOf()
	t0 := time.Now()
	for _, c := range p.ctrs {
		if err := p.makeCtr(ctx, ns, c, false); err != nil {
			if len(p.ctrs) > 1 {
				if ce, ok := err.(*ConfigError); ok {
					return &ConfigError{fmt.Errorf("container %s: %w", c.name, ce.Err)}
				}
				return fmt.Errorf("container %s: %w", c.name, err)
			}
			return err
		}
	}
	if err := p.unmarkPrepared(); err != nil {
		return err
	}
	p.lastStarted = time.Now()
	p.update(func(st *Status) { st.Running = true })
	p.log.Debug("containers started", "handler", p.spec.Handler, "containers", len(p.ctrs), "sinceCreated", time.Since(p.created),
		"start", p.lastStarted.Sub(t0))
	return nil
}

// makeCtr mounts c's root filesystem, writes its bundle and creates it:
// started, or only created (prepare).
func (p *pod) makeCtr(ctx context.Context, ns *network.NS, c *ctr, prepare bool) error {
	cs := &p.spec.Containers[c.idx]
	img := p.imgs[c.idx]
	if c.dir != p.dir {
		if err := os.MkdirAll(c.dir, 0o711); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	// Each container has a termination log of its own, as on Kubernetes,
	// that cannot grow past what is read of it (see ephemeral.go).
	termLog, err := c.makeTermLog()
	if err != nil {
		return fmt.Errorf("start: termination log: %w", err)
	}
	rootfs, err := p.rt.opts.Images.Mount(img, c.dir)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.mounted = true
	// $(NAME) in a value names a variable defined before it, as on
	// Kubernetes.
	env := oci.EnvList(cs.Env)
	p.volMu.Lock()
	vols := p.vols
	p.volMu.Unlock()
	// The bundle names the shim's /dev/log socket (log.sock): from here on
	// the shim must be up.
	if err := p.awaitMon(); err != nil {
		return err
	}
	pin, err := c.pinner()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	input := oci.Input{
		Container:      *cs,
		PodSecurity:    p.spec.Security,
		Image:          oci.ImageConfig{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User},
		Env:            env,
		Rootfs:         rootfs,
		Hostname:       p.spec.ID,
		NetNSPath:      ns.Path,
		CgroupsPath:    "/knbox/" + c.id,
		EtcHosts:       filepath.Join(p.dir, "hosts"),
		EtcHostname:    filepath.Join(p.dir, "hostname"),
		ResolvConf:     filepath.Join(p.dir, "resolv.conf"),
		TerminationLog: termLog,
		SyslogSocket:   filepath.Join(p.dir, "log.sock"),
		Volumes:        vols,
		MachineMemory:  p.rt.memory,
		Policy:         policyFor(p.rt.opts.Policy, p.h),
		Pin:            pin,
	}
	s, err := oci.Build(input)
	if err != nil {
		var fe *oci.FieldError
		if errors.As(err, &fe) {
			return &ConfigError{err}
		}
		return fmt.Errorf("start: %w", err)
	}
	clampRlimits(s)
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(c.dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	tag := ""
	if len(p.ctrs) > 1 {
		tag = "[" + c.name + "] "
	}
	t1 := time.Now()
	create := p.mon.start
	if prepare {
		create = p.mon.prepare
	}
	t, err := create(ctx, c.id, c.dir, tag)
	if err != nil {
		return err
	}
	c.t = t
	if prepare {
		p.rt.event(Event{Pod: p.spec.ID, Container: c.name, Reason: EventCreated, Message: "Created container " + c.name})
		p.log.Debug("container created", "container", c.name, "pid", t.Pid(), "create", time.Since(t1))
		return nil
	}
	// The OCI runtime creates and starts in one step; the kubelet tells
	// the two apart, and so do these events.
	p.rt.event(Event{Pod: p.spec.ID, Container: c.name, Reason: EventCreated, Message: "Created container " + c.name})
	p.rt.event(Event{Pod: p.spec.ID, Container: c.name, Reason: EventStarted, Message: "Started container " + c.name})
	p.log.Debug("container started", "container", c.name, "pid", t.Pid(), "create", time.Since(t1))
	return nil
}

// preparedMarker is a file in the directory of a pod whose containers are
// created and not started: Recover removes such a pod (see Recover).
const preparedMarker = "prepared"

// held tells whether the pod waits for Start.
func (p *pod) held() bool {
	if p.hold == nil {
		return false
	}
	select {
	case <-p.hold:
		return false
	default:
		return true
	}
}

// createAll makes each container's root filesystem and bundle and creates
// it without starting it, when the monitor can; when it cannot, the pod
// waits with its sandbox made and its containers start as usual.
func (p *pod) createAll(ctx context.Context) error {
	p.teardownContainers()
	if err := p.awaitMon(); err != nil {
		return err
	}
	ns := p.nsOf()
	for _, c := range p.ctrs {
		err := p.makeCtr(ctx, ns, c, true)
		if errors.Is(err, errCannotPrepare) {
			p.log.Debug("containers are created at start", "handler", p.spec.Handler)
			p.teardownContainers()
			return nil
		}
		if err != nil {
			if len(p.ctrs) > 1 {
				return fmt.Errorf("container %s: %w", c.name, err)
			}
			return err
		}
	}
	p.ctrsCreated = true
	return nil
}

// awaitStart reports the pod prepared and waits for Start; false when the
// pod is stopped or ctx ends first.
func (p *pod) awaitStart(ctx context.Context) bool {
	p.mu.Lock()
	p.costMon, p.costPids = p.mon, nil
	if _, isShim := p.mon.(shimMonitor); !isShim {
		for _, c := range p.ctrs {
			if c.t != nil {
				p.costPids = append(p.costPids, c.t.Pid())
			}
		}
	}
	p.mu.Unlock()
	p.update(func(st *Status) { st.Prepared = true })
	defer p.update(func(st *Status) { st.Prepared = false })
	select {
	case <-p.hold:
		return true
	case <-p.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// startCreated starts the containers createAll created: `runc start` of
// each, nothing else.
// unmarkPrepared makes a prepared pod an ordinary one once its containers
// have started: from here on a crash of knbox leaves it to be adopted.
// The marker goes only after the start, not before it: a crash in between
// then removes a pod that had just started (the next knbox starts another),
// rather than adopting one whose containers were created and never started.
func (p *pod) unmarkPrepared() error {
	if p.hold == nil {
		return nil
	}
	if err := os.Remove(filepath.Join(p.dir, preparedMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

func (p *pod) startCreated(ctx context.Context) error {
	p.ctrsCreated = false
	t0 := time.Now()
	for _, c := range p.ctrs {
		if err := c.t.start(ctx); err != nil {
			return fmt.Errorf("start container %s: %w", c.name, err)
		}
		p.rt.event(Event{Pod: p.spec.ID, Container: c.name, Reason: EventStarted, Message: "Started container " + c.name})
	}
	p.lastStarted = time.Now()
	p.update(func(st *Status) { st.Running = true })
	p.log.Debug("prepared containers started", "containers", len(p.ctrs), "start", p.lastStarted.Sub(t0))
	return nil
}

// exitWatch observes a container's exit.
type exitWatch struct {
	done   chan struct{}
	status runtime.ExitStatus
	err    error
}

// watchExit waits for t's exit in a goroutine that ends with it or with ctx.
func watchExit(ctx context.Context, t task) *exitWatch {
	w := &exitWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.status, w.err = t.Wait(ctx)
	}()
	return w
}

// supervise probes the running containers until one of them exits (the
// failure says which, how and why), the serving container's liveness probe
// fails (it is restarted: a failure too), the pod is stopped (stopped
// true) or ctx ends (stopped true; cleanup kills them). Either of the first
// two ends all the containers: the pod restarts as a whole.
func (p *pod) supervise(ctx context.Context) (f *Failure, stopped bool) {
	serving := p.ctrs[p.spec.Serving]
	exs := make([]*exitWatch, len(p.ctrs))
	exited := make(chan int, len(p.ctrs))
	done := make(chan struct{})
	defer close(done)
	for i, c := range p.ctrs {
		exs[i] = watchExit(ctx, c.t)
		go func() {
			select {
			case <-exs[i].done:
				exited <- i
			case <-done:
			}
		}()
	}
	pctx, pcancel := context.WithCancel(ctx)
	restart := make(chan string, 1)
	evict := make(chan *eviction, 1)
	var pwg sync.WaitGroup
	if p.limits.enforced() {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p.watchStorage(pctx, evict)
		}()
	}
	sc := &p.spec.Containers[p.spec.Serving]
	if rp := sc.ReadinessProbe; rp != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p.readiness(pctx, &prober{probe: rp, port: p.spec.Port, h2c: p.spec.H2C, dial: p.dial, exec: p.execProbe})
		}()
	} else {
		p.setReady(true) // no probe: ready once started
	}
	if lp := sc.LivenessProbe; lp != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p.liveness(pctx, &prober{probe: lp, port: p.spec.Port, h2c: p.spec.H2C, dial: p.dial, exec: p.execProbe}, restart)
		}()
	}
	stopProbes := func() {
		pcancel()
		pwg.Wait()
		p.setReady(false)
	}

	var first int
	select {
	case first = <-exited:
		stopProbes()
	case why := <-restart:
		stopProbes()
		p.log.Info("liveness probe failed: restarting the containers", "err", why)
		p.rt.event(Event{Pod: p.spec.ID, Container: serving.name, Reason: EventUnhealthy, Warning: true, Message: "Liveness probe failed: " + why})
		p.mon.log("knbox: liveness probe failed, restarting the container: " + why)
		p.terminate(ctx, exs, p.spec.GracePeriod)
		if ctx.Err() != nil {
			return nil, true
		}
		st := exs[p.spec.Serving].status
		return &Failure{Reason: ReasonUnhealthy, Container: serving.name, ExitCode: st.Code, OOMKilled: st.OOMKilled,
			Message: "liveness probe failed: " + why, At: time.Now()}, false
	case ev := <-evict:
		stopProbes()
		f := ev.f
		used := resource.NewQuantity(ev.used, resource.BinarySI).String()
		p.log.Warn("evicted: killing the containers", "message", f.Message, "usedBytes", ev.used)
		p.rt.event(Event{Pod: p.spec.ID, Container: f.Container, Reason: EventEvicted, Warning: true, Message: f.Message})
		p.mon.log("knbox: evicted: " + f.Message + " (measured: " + used + ")")
		p.terminate(ctx, exs, 0) // the kubelet's grace period for local storage
		if ctx.Err() != nil {
			return nil, true
		}
		return f, false
	case <-p.stopCh:
		stopProbes()
		p.rt.event(Event{Pod: p.spec.ID, Reason: EventKilling, Message: "Stopping the pod's containers"})
		p.terminate(ctx, exs, p.grace)
		return nil, true
	case <-ctx.Done():
		stopProbes()
		return nil, true
	}
	if ctx.Err() != nil {
		return nil, true
	}
	c := p.ctrs[first]
	st := exs[first].status
	// The others end too: the pod restarts as a whole.
	if len(p.ctrs) > 1 {
		p.log.Info("container exited: stopping the pod's other containers", "container", c.name)
		p.terminate(ctx, exs, p.spec.GracePeriod)
		if ctx.Err() != nil {
			return nil, true
		}
	}
	msg := p.terminationMessage(c, st)
	p.log.Info("container exited", "container", c.name, "status", st.String(), "ranFor", time.Since(p.lastStarted), "message", msg)
	// The developer reads failures where they read their output (the last
	// lines of which are there already; the termination log is not).
	what := "the container"
	if len(p.ctrs) > 1 {
		what = "container " + c.name
	}
	line := "knbox: " + what + " exited (" + st.String() + ")"
	if st.OOMKilled {
		line = "knbox: " + what + " exited (OOMKilled: over its memory limit)"
	}
	if m := c.terminationLog(); m != "" {
		line += ": " + m
	}
	p.mon.log(line)
	return &Failure{Reason: ReasonError, Container: c.name, ExitCode: st.Code, OOMKilled: st.OOMKilled, Message: msg, At: st.At}, false
}

func (p *pod) setReady(ready bool) {
	p.update(func(st *Status) { st.Ready = ready })
}

// terminationLog is what the container wrote to /dev/termination-log.
func (c *ctr) terminationLog() string {
	f, err := os.Open(c.termLogPath())
	if errors.Is(err, os.ErrNotExist) {
		// A container adopted from a knbox before termlog/ (Recover).
		f, err = os.Open(filepath.Join(c.dir, "termination-log"))
	}
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, maxTerminationMessage)
	n, _ := f.Read(b)
	return strings.TrimSpace(string(b[:n]))
}

// terminationMessage is what the container wrote to its termination log,
// else (when it failed) the last lines of its output, else its exit status.
func (p *pod) terminationMessage(c *ctr, st runtime.ExitStatus) string {
	if m := c.terminationLog(); m != "" {
		return m
	}
	if st.OOMKilled {
		return "OOMKilled: the container used more memory than its limit"
	}
	if st.Code != 0 {
		if t := c.t.tail(); t != "" {
			return t
		}
	}
	if st.Code == 0 {
		return "container exited with no error"
	}
	return st.String()
}

// readiness probes aggressively until the first success, then with the
// probe's period, and records whether the pod is ready.
func (p *pod) readiness(ctx context.Context, pr *prober) {
	if d := pr.initialDelay(); d > 0 && !sleepCtx(ctx, d) {
		return
	}
	successes, failures := 0, 0
	ready := false
	interval := firstProbeInterval
	for {
		err := pr.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
			if !ready && successes >= pr.successThreshold() {
				ready = true
				interval = pr.period(defaultReadyPeriod)
				p.setReady(true)
			}
		} else {
			successes, failures = 0, failures+1
			if ready && failures >= pr.failureThreshold() {
				ready = false
				p.log.Info("readiness probe failed", "err", err)
				p.rt.event(Event{Pod: p.spec.ID, Reason: EventUnhealthy, Warning: true, Message: "Readiness probe failed: " + err.Error()})
				p.setReady(false)
			}
		}
		if !sleepCtx(ctx, interval) {
			return
		}
		if !ready && interval < startProbeInterval {
			interval = min(2*interval, startProbeInterval) // not yet ready once
		}
	}
}

// liveness probes with the probe's period and reports on restart when it
// failed failureThreshold times in a row.
func (p *pod) liveness(ctx context.Context, pr *prober, restart chan<- string) {
	if d := pr.initialDelay(); d > 0 && !sleepCtx(ctx, d) {
		return
	}
	period := pr.period(10 * time.Second)
	failures := 0
	for sleepCtx(ctx, period) {
		err := pr.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		if failures >= pr.failureThreshold() {
			select {
			case restart <- err.Error():
			default:
			}
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// terminate sends SIGTERM to every container that still runs, waits the
// grace period for all of them to exit, then sends SIGKILL to those that
// have not. exs are the containers' exit watches, by p.ctrs.
func (p *pod) terminate(ctx context.Context, exs []*exitWatch, grace time.Duration) {
	running := func() []int {
		var idx []int
		for i, ex := range exs {
			select {
			case <-ex.done:
			default:
				idx = append(idx, i)
			}
		}
		return idx
	}
	// allDone is closed when every container has exited.
	allDone := make(chan struct{})
	stopWait := make(chan struct{})
	defer close(stopWait)
	go func() {
		for _, ex := range exs {
			select {
			case <-ex.done:
			case <-stopWait:
				return
			}
		}
		close(allDone)
	}()
	if len(running()) == 0 {
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	sigterm := func() {
		for _, i := range running() {
			if err := p.ctrs[i].t.Kill(kctx, syscall.SIGTERM); err != nil {
				p.log.Warn("SIGTERM failed", "container", p.ctrs[i].name, "err", err)
			}
		}
	}
	young := time.Since(p.lastStarted) < youngContainers
	sigterm()
	t := time.NewTimer(grace)
	defer t.Stop()
	var again <-chan time.Time
	if young && grace > termAgain {
		// Containers started moments ago may not have set up their
		// handlers yet: a container's first process is PID 1 of its
		// PID namespace, which ignores a signal it has no handler for,
		// so the SIGTERM is lost and the stop would wait out the whole
		// grace period (a pod restarted for a sidecar that fails at
		// once, above all). They get it once more a little later.
		t2 := time.NewTimer(termAgain)
		defer t2.Stop()
		again = t2.C
	}
	for {
		select {
		case <-allDone:
			return
		case <-again:
			again = nil
			p.log.Info("containers started moments before their SIGTERM: sending it again", "after", termAgain)
			sigterm()
			continue
		case <-t.C:
			p.log.Info("grace period over: SIGKILL", "grace", grace)
		case <-ctx.Done():
		}
		break
	}
	for _, i := range running() {
		if err := p.ctrs[i].t.Kill(kctx, syscall.SIGKILL); err != nil {
			p.log.Warn("SIGKILL failed", "container", p.ctrs[i].name, "err", err)
		}
	}
	t2 := time.NewTimer(killWait)
	defer t2.Stop()
	select {
	case <-allDone:
	case <-t2.C:
	}
}

// teardownContainers deletes the current containers and unmounts their
// root filesystems (a restarted container gets a fresh one, as on
// Kubernetes).
func (p *pod) teardownContainers() {
	for _, c := range p.ctrs {
		if c.t != nil {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			err := c.t.Delete(ctx)
			cancel()
			if isShimGone(err) {
				// The shim is gone: what it left of the container in the
				// runtime's state, removeLeftover and Recover delete.
				err = nil
			}
			if err != nil {
				p.log.Warn("delete container", "container", c.name, "err", err)
			} else {
				c.t = nil
			}
		}
		if c.mounted {
			if err := image.Unmount(c.dir); err != nil {
				p.log.Warn("unmount root filesystem", "container", c.name, "err", err)
			} else {
				c.mounted = false
			}
		}
		if c.pinned && c.t == nil {
			if err := c.unpin(); err != nil {
				p.log.Warn("unmount pinned mount sources", "container", c.name, "err", err)
			}
		}
	}
	p.update(func(st *Status) { st.Running = false })
}

// leftBehind tells whether a container or a root filesystem of the pod
// could not be removed.
func (p *pod) leftBehind() bool {
	for _, c := range p.ctrs {
		if c.t != nil || c.mounted || c.pinned {
			return true
		}
	}
	return false
}

// removeLeftover deletes the containers of the pod that a failed create
// may have left in the runtime's state (runc keeps a container that failed
// to start), so that the next create does not find the id taken.
func (p *pod) removeLeftover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cs, err := p.h.Recover(ctx)
	if err != nil {
		p.log.Warn("list containers", "err", err)
		return
	}
	for _, c := range cs {
		if podOf(c.ID()) == p.spec.ID {
			if err := c.Delete(ctx); err != nil {
				p.log.Warn("delete leftover container", "container", c.ID(), "err", err)
			}
		}
	}
}

// netStopOf returns what Options.Network serves for the pod.
func (p *pod) netStopOf() io.Closer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.netStop
}

// closeNetwork stops what Options.Network serves for the pod.
func (p *pod) closeNetwork() {
	p.mu.Lock()
	stop := p.netStop
	p.netStop = nil
	p.mu.Unlock()
	if stop != nil {
		if err := stop.Close(); err != nil {
			p.log.Warn("stop the pod's network services", "err", err)
		}
	}
}

// cleanup removes everything the pod made but its log.
func (p *pod) cleanup() {
	p.setReady(false)
	p.teardownContainers()
	if err := p.awaitMon(); err != nil {
		p.log.Warn("shim", "err", err)
	}
	if p.mon != nil {
		if err := p.mon.close(); err != nil {
			p.log.Warn("close log", "err", err)
		}
	}
	p.closeNetwork()
	if ns := p.nsOf(); ns != nil {
		if eg := p.rt.opts.Egress; eg != nil {
			// Not bound to the Runtime's context: cleanup also runs at Close.
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			if err := eg.Detach(ctx, ns); err != nil {
				p.log.Warn("detach egress; Recover will retry", "err", err)
			}
			cancel()
		}
		if err := ns.Delete(); err != nil {
			p.log.Warn("delete network namespace", "err", err)
		} else {
			p.mu.Lock()
			p.ns = nil
			p.mu.Unlock()
		}
	}
	if p.leftBehind() || p.nsOf() != nil {
		p.log.Warn("pod left state behind; Recover will remove it", "dir", p.dir)
		return
	}
	// The tmpfs of Memory emptyDirs and termination logs.
	if err := unmountUnder(p.dir); err != nil {
		p.log.Warn("unmount the pod's file systems; Recover will retry", "err", err)
		return
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.log.Warn("remove pod directory", "err", err)
	}
}

// dial dials into the pod's network namespace.
func (p *pod) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ns := p.nsOf()
	if ns == nil {
		return nil, fmt.Errorf("pod %s has no network namespace", p.spec.ID)
	}
	return ns.Dial(ctx, network, addr)
}

// writeFileAtomic writes a file under a temporary name and renames it into
// place: a reader (runc, Recover after a crash of knbox) sees the whole file
// or none. It does not sync: the files it writes (a pod's state, a bundle's
// config.json) describe containers that a crash of the machine ends anyway,
// and Recover removes a pod whose state it cannot read, so a sync would
// protect nothing and costs milliseconds on every start.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// shimStart is the outcome of starting a pod's shim.
type shimStart struct {
	c   *shimClient
	err error
}

// awaitMon waits for the shim that prepare started, if one is starting,
// and makes it the pod's monitor.
func (p *pod) awaitMon() error {
	if p.shimStarting == nil {
		return nil
	}
	r := <-p.shimStarting
	p.shimStarting = nil
	if r.err != nil {
		p.prepared = false // the next attempt starts a shim again
		return fmt.Errorf("prepare pod: %w", r.err)
	}
	p.mon = shimMonitor{r.c}
	return nil
}
