package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/runtime"
)

// Bounds of an instance's own operations.
const (
	// cleanupTimeout bounds deleting a container and its network namespace.
	cleanupTimeout = 30 * time.Second
	// killWait bounds the wait for a container's exit after SIGKILL.
	killWait = 10 * time.Second
	// maxTerminationMessage is what is read of the termination log, as the
	// kubelet reads at most 4096 bytes.
	maxTerminationMessage = 4096
	// maxSyslogMessage bounds one datagram on /dev/log.
	maxSyslogMessage = 64 << 10
)

// instanceState is written into the instance's directory before anything
// is made for it, so that Recover knows what to remove after a crash.
type instanceState struct {
	ID        string    `json:"id"`
	Namespace string    `json:"namespace"`
	Revision  string    `json:"revision"`
	Handler   string    `json:"handler"`
	NetNS     string    `json:"netns"`
	Created   time.Time `json:"created"`
}

const stateFile = "instance.json"

// instance is one running copy of a revision: a directory, a network
// namespace, a log, and its containers (one per container of the
// revision), restarted together when one of them ends. Its goroutine (run)
// owns all of them.
type instance struct {
	r    *revision
	id   string
	dir  string
	log  *slog.Logger
	born time.Time

	stopCh    chan struct{} // closed by requestStopLocked
	drainedCh chan struct{} // closed by drained
	drainOnce sync.Once

	// Guarded by r.mu.
	ready    bool
	stopping bool
	exposed  bool // handed out by Endpoints since the last Drained
	ns       *network.NS

	// Owned by run.
	prepared    bool
	logf        *logFile
	syslog      *net.UnixConn
	syslogDone  chan struct{}
	volumes     map[string]oci.Volume
	ctrs        []*ctr // by the revision's containers, once prepared
	lastStarted time.Time
}

// ctr is one container of an instance. The serving container keeps the
// layout an instance of one container has: its id is the instance's and
// its bundle (config.json, overlay, termination log) is the instance's
// directory. A sidecar's id is "<name>_<instance>": neither a revision nor
// a container name has a "_", so the id maps back to its instance (which
// Recover and removeLeftover rely on), and it does not start with the
// instance's id, which runsc would take for an abbreviation of it (runsc
// looks a missing id up by prefix and finds the sidecar). Its bundle is
// containers/<name> below the instance's directory, where Recover's
// unmount of everything under it finds its overlay.
type ctr struct {
	idx     int // in runSpec.containers
	name    string
	id      string
	dir     string
	tail    *outputTail
	stdout  *lineWriter
	stderr  *lineWriter
	c       runtime.Container
	mounted bool
}

// sidecarSep joins a sidecar's name and its instance's id into the
// sidecar's container id.
const sidecarSep = "_"

// sidecarID is the container id of the sidecar name of instance id.
func sidecarID(id, name string) string { return name + sidecarSep + id }

// instanceOf is the id of the instance a container id belongs to.
func instanceOf(containerID string) string {
	if _, id, ok := strings.Cut(containerID, sidecarSep); ok {
		return id
	}
	return containerID
}

func newInstance(r *revision, id string) *instance {
	return &instance{
		r:         r,
		id:        id,
		dir:       filepath.Join(instancesDir(r.m.opts.StateDir), id),
		log:       r.log.With("instance", id),
		born:      time.Now(),
		stopCh:    make(chan struct{}),
		drainedCh: make(chan struct{}),
	}
}

// requestStopLocked starts the orderly stop: the instance leaves the
// endpoints at once. The caller holds r.mu.
func (in *instance) requestStopLocked() {
	if in.stopping {
		return
	}
	in.stopping = true
	close(in.stopCh)
}

// drained is the router's word that no request is in flight any more.
func (in *instance) drained() {
	in.drainOnce.Do(func() { close(in.drainedCh) })
}

func (in *instance) stopRequested() bool {
	select {
	case <-in.stopCh:
		return true
	default:
		return false
	}
}

// sleep waits d, or less if the instance is stopped or ctx ends; it
// returns false then.
func (in *instance) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-in.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// run is the instance's life: prepare, start, supervise, restart with
// backoff when the container ends, and clean up when stopped or when ctx
// ends.
func (in *instance) run(ctx context.Context) {
	defer in.r.instanceEnded(in)
	defer in.cleanup()
	// The volume sync ends before cleanup removes the volumes.
	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan struct{})
	syncing := false
	defer func() {
		stopSync()
		if syncing {
			<-syncDone
		}
	}()
	failures := 0
	for ctx.Err() == nil && !in.stopRequested() {
		err := in.prepare(ctx)
		if err == nil && !syncing {
			syncing = in.startVolumeSync(syncCtx, syncDone)
		}
		if err == nil {
			err = in.start(ctx)
		}
		if err != nil {
			if ctx.Err() != nil || in.stopRequested() {
				return
			}
			failures++
			in.r.startFailed(in, err)
			in.teardownContainer()
			in.removeLeftover(ctx)
			if !in.sleep(ctx, backoff(failures)) {
				return
			}
			continue
		}
		name, code, msg, stopped := in.supervise(ctx)
		if stopped {
			return
		}
		if time.Since(in.lastStarted) >= backoffCap {
			failures = 0
		}
		failures++
		in.r.exited(in, name, code, msg)
		in.teardownContainer()
		d := backoff(failures)
		in.log.Info("restarting instance", "after", d, "restarts", failures)
		if !in.sleep(ctx, d) {
			return
		}
	}
}

// prepare makes what the instance keeps across container restarts: its
// directory, log, network namespace, /etc files, termination log, syslog
// socket and volumes. It does only what is still missing.
func (in *instance) prepare(ctx context.Context) error {
	if in.prepared {
		return nil
	}
	r := in.r
	r.mu.Lock()
	spec, rev := r.spec, r.rev
	r.mu.Unlock()
	if _, err := os.Stat(filepath.Join(in.dir, stateFile)); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(in.dir, 0o711); err != nil {
			return fmt.Errorf("prepare instance: %w", err)
		}
		st := instanceState{ID: in.id, Namespace: r.key.namespace, Revision: r.key.name, Handler: spec.handlerName, NetNS: in.id, Created: in.born.UTC()}
		b, _ := json.Marshal(st)
		if err := writeFileSync(filepath.Join(in.dir, stateFile), b, 0o600); err != nil {
			return fmt.Errorf("prepare instance: %w", err)
		}
	}
	if in.logf == nil {
		l, err := openLogFile(filepath.Join(r.m.revLogDir(r.key), in.id+".log"))
		if err != nil {
			return fmt.Errorf("prepare instance: %w", err)
		}
		in.logf = l
	}
	if in.ctrs == nil {
		in.ctrs = in.newCtrs(spec)
	}
	if in.nsOf() == nil {
		ns, err := network.CreateIn(r.m.netnsRoot, in.id)
		if err != nil {
			return fmt.Errorf("prepare instance: network namespace: %w", err)
		}
		if eg := r.m.opts.Egress; eg != nil {
			addr, err := eg.Attach(r.m.ctx, ns)
			if err != nil {
				if derr := ns.Delete(); derr != nil {
					in.log.Warn("delete network namespace", "err", derr)
				}
				return fmt.Errorf("prepare instance: %w", err)
			}
			in.log.Debug("egress attached", "addr", addr)
		}
		r.mu.Lock()
		in.ns = ns
		r.mu.Unlock()
	}
	hostname := hostnameOf(in.id)
	for _, f := range []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"hostname", hostname + "\n", 0o644},
		{"hosts", "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0o644},
		{"resolv.conf", resolvConf(r.m.opts.Nameservers), 0o644},
	} {
		p := filepath.Join(in.dir, f.name)
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("prepare instance: %w", err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			return fmt.Errorf("prepare instance: %w", err)
		}
	}
	if in.syslog == nil {
		conn, err := listenSyslog(in.dir, "log.sock")
		if err != nil {
			return fmt.Errorf("prepare instance: syslog socket: %w", err)
		}
		in.syslog, in.syslogDone = conn, make(chan struct{})
		go in.readSyslog(conn, in.syslogDone) // ends when cleanup closes conn
	}
	if in.volumes == nil {
		vols, err := r.m.prepareVolumes(rev, filepath.Join(in.dir, "volumes"))
		if err != nil {
			return fmt.Errorf("prepare volumes: %w", err)
		}
		if vols == nil {
			vols = map[string]oci.Volume{}
		}
		in.volumes = vols
	}
	in.prepared = true
	return nil
}

// newCtrs makes the instance's containers' state. With several
// containers, each one's lines in the log start with its name in brackets.
func (in *instance) newCtrs(spec runSpec) []*ctr {
	ctrs := make([]*ctr, len(spec.containers))
	for i := range spec.containers {
		name := spec.containers[i].container.Name
		c := &ctr{idx: i, name: name, id: in.id, dir: in.dir, tail: &outputTail{}}
		if i != spec.serving {
			c.id = sidecarID(in.id, name)
			c.dir = filepath.Join(in.dir, "containers", name)
		}
		tag := ""
		if len(spec.containers) > 1 {
			tag = "[" + name + "] "
		}
		c.stdout = &lineWriter{l: in.logf, stream: streamStdout, tag: tag, tail: c.tail}
		c.stderr = &lineWriter{l: in.logf, stream: streamStderr, tag: tag, tail: c.tail}
		ctrs[i] = c
	}
	return ctrs
}

// startVolumeSync starts syncVolumes for the instance's Secret, ConfigMap
// and projected volumes, if it has any; done is closed when it ends. It
// tells whether it started.
func (in *instance) startVolumeSync(ctx context.Context, done chan<- struct{}) bool {
	period := in.r.m.opts.VolumeSyncPeriod
	if period < 0 {
		return false
	}
	if period == 0 {
		period = DefaultVolumeSyncPeriod
	}
	in.r.mu.Lock()
	volumes := in.r.rev.Spec.Volumes
	in.r.mu.Unlock()
	dirs := map[string]string{}
	for _, v := range volumes {
		if vol, ok := in.volumes[v.Name]; ok && v.EmptyDir == nil {
			dirs[v.Name] = vol.Path
		}
	}
	if len(dirs) == 0 {
		return false
	}
	go func() {
		defer close(done)
		in.syncVolumes(ctx, volumes, dirs, period)
	}()
	return true
}

func (in *instance) nsOf() *network.NS {
	in.r.mu.Lock()
	defer in.r.mu.Unlock()
	return in.ns
}

// hostnameOf is the instance's hostname: its id, cut to a DNS label.
func hostnameOf(id string) string {
	if len(id) > 63 {
		id = id[:63]
	}
	return strings.Trim(id, "-.")
}

// Where resolvConf looks for the host's name servers: the system's file,
// then systemd-resolved's list of its upstream servers, for hosts whose
// /etc/resolv.conf names only resolved's stub on loopback.
var resolvConfFiles = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// resolvConf is the instance's /etc/resolv.conf: nameservers if given,
// else the host's name servers that are not on the host's loopback (which
// an instance cannot reach from its namespace); and the host's search
// domains and options.
func resolvConf(nameservers []string) string {
	const none = "# knbox: no name server of the host is reachable from the instance's network namespace\n"
	var search, servers []string
	for i, file := range resolvConfFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "nameserver":
				if ip := net.ParseIP(f[1]); ip != nil && !ip.IsLoopback() {
					servers = append(servers, strings.Join(f, " "))
				}
			case "search", "options":
				if i == 0 {
					search = append(search, strings.Join(f, " "))
				}
			}
		}
		if len(servers) > 0 {
			break
		}
	}
	if len(nameservers) > 0 {
		servers = servers[:0]
		for _, ns := range nameservers {
			servers = append(servers, "nameserver "+ns)
		}
	}
	if len(servers) == 0 {
		return none
	}
	return strings.Join(append(servers, search...), "\n") + "\n"
}

// start mounts a fresh root filesystem for each container, writes its
// bundle and creates it, in the revision's order (as the kubelet starts a
// pod's containers, without waiting for one to be ready before the next).
func (in *instance) start(ctx context.Context) error {
	r := in.r
	r.mu.Lock()
	spec, rev, imgs := r.spec, r.rev, r.imgs
	ns := in.ns
	r.mu.Unlock()
	if imgs == nil {
		return errors.New("start: the image is not pulled")
	}
	in.teardownContainer()
	t0 := time.Now()
	for _, c := range in.ctrs {
		if err := in.startCtr(ctx, spec, rev, imgs[c.idx], ns, c); err != nil {
			if len(in.ctrs) > 1 {
				if ce, ok := err.(*configError); ok {
					return &configError{fmt.Errorf("container %s: %w", c.name, ce.err)}
				}
				return fmt.Errorf("container %s: %w", c.name, err)
			}
			return err
		}
	}
	in.lastStarted = time.Now()
	in.log.Debug("containers started", "handler", spec.handlerName, "containers", len(in.ctrs), "sinceCreated", time.Since(in.born),
		"start", in.lastStarted.Sub(t0))
	return nil
}

// startCtr mounts c's root filesystem, writes its bundle and creates it.
func (in *instance) startCtr(ctx context.Context, spec runSpec, rev *servingv1.Revision, img *image.Image, ns *network.NS, c *ctr) error {
	r := in.r
	cs := &spec.containers[c.idx]
	if c.dir != in.dir {
		if err := os.MkdirAll(c.dir, 0o711); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	// Each container has a termination log of its own, as on Kubernetes.
	termLog := filepath.Join(c.dir, "termination-log")
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := os.Chmod(termLog, 0o666); err != nil { // past the umask
		return fmt.Errorf("start: %w", err)
	}
	rootfs, err := r.m.opts.Images.Mount(img, c.dir)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.mounted = true
	// Knative gives PORT to the serving container only (makeServingContainer).
	port := spec.port
	if c.idx != spec.serving {
		port = 0
	}
	env, err := r.m.buildEnv(rev, &cs.container, port, instanceMeta{name: in.id, hostname: hostnameOf(in.id)})
	if err != nil {
		return err
	}
	input := oci.Input{
		Container:      cs.container,
		PodSecurity:    spec.pod,
		Image:          oci.ImageConfig{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User},
		Env:            env,
		Rootfs:         rootfs,
		Hostname:       hostnameOf(in.id),
		NetNSPath:      ns.Path,
		CgroupsPath:    "/knbox/" + c.id,
		EtcHosts:       filepath.Join(in.dir, "hosts"),
		EtcHostname:    filepath.Join(in.dir, "hostname"),
		ResolvConf:     filepath.Join(in.dir, "resolv.conf"),
		TerminationLog: termLog,
		SyslogSocket:   filepath.Join(in.dir, "log.sock"),
		Volumes:        in.volumes,
		MachineMemory:  r.m.memory,
		Policy:         r.m.opts.Policy,
	}
	s, err := oci.Build(input)
	if err != nil {
		var fe *oci.FieldError
		if errors.As(err, &fe) {
			return &configError{err}
		}
		return fmt.Errorf("start: %w", err)
	}
	clampRlimits(s)
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := writeFileSync(filepath.Join(c.dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	c.tail.reset()
	t1 := time.Now()
	rc, err := spec.handler.Create(ctx, c.id, c.dir, runtime.IO{Stdout: c.stdout, Stderr: c.stderr})
	if err != nil {
		return err
	}
	c.c = rc
	in.log.Debug("container started", "container", c.name, "pid", rc.Pid(), "create", time.Since(t1))
	return nil
}

// exitWatch observes a container's exit.
type exitWatch struct {
	done   chan struct{}
	status runtime.ExitStatus
	err    error
}

// watchExit waits for c's exit in a goroutine that ends with it or with ctx.
func watchExit(ctx context.Context, c runtime.Container) *exitWatch {
	w := &exitWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.status, w.err = c.Wait(ctx)
	}()
	return w
}

// supervise probes the running containers until one of them exits (its
// name, exit code and termination message returned), the serving
// container's liveness probe fails (it is restarted: the same), the
// instance is stopped (stopped true) or ctx ends (stopped true; cleanup
// kills them). Either of the first two ends all the containers: the
// instance restarts as a whole.
func (in *instance) supervise(ctx context.Context) (name string, code int, msg string, stopped bool) {
	spec := in.r.spec
	serving := in.ctrs[spec.serving]
	exs := make([]*exitWatch, len(in.ctrs))
	exited := make(chan int, len(in.ctrs))
	done := make(chan struct{})
	defer close(done)
	for i, c := range in.ctrs {
		exs[i] = watchExit(ctx, c.c)
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
	var pwg sync.WaitGroup
	dial := in.dialer()
	sc := spec.servingContainer()
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		in.readiness(pctx, &prober{probe: sc.ReadinessProbe, port: spec.port, h2c: spec.h2c, dial: dial})
	}()
	if lp := sc.LivenessProbe; lp != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			in.liveness(pctx, &prober{probe: lp, port: spec.port, h2c: spec.h2c, dial: dial}, restart)
		}()
	}
	stopProbes := func() {
		pcancel()
		pwg.Wait()
		in.r.setReady(in, false)
	}

	var first int
	select {
	case first = <-exited:
		stopProbes()
	case why := <-restart:
		stopProbes()
		in.log.Info("liveness probe failed: restarting the container", "err", why)
		in.platformLog("knbox: liveness probe failed, restarting the container: " + why)
		in.terminate(ctx, exs, spec.timeout)
		if ctx.Err() != nil {
			return "", 0, "", true
		}
		in.flushOutput()
		return serving.name, exitCode(exs[spec.serving].status), "liveness probe failed: " + why, false
	case <-in.stopCh:
		stopProbes()
		in.stopOrderly(ctx, exs, spec.timeout)
		return "", 0, "", true
	case <-ctx.Done():
		stopProbes()
		return "", 0, "", true
	}
	if ctx.Err() != nil {
		return "", 0, "", true
	}
	c := in.ctrs[first]
	st := exs[first].status
	// The others end too: the instance restarts as a whole.
	if len(in.ctrs) > 1 {
		in.log.Info("container exited: stopping the instance's other containers", "container", c.name)
		in.terminate(ctx, exs, spec.timeout)
		if ctx.Err() != nil {
			return "", 0, "", true
		}
	}
	in.flushOutput()
	msg = in.terminationMessage(c, st)
	in.log.Info("container exited", "container", c.name, "status", st.String(), "ranFor", time.Since(in.lastStarted), "message", msg)
	// The developer reads failures where they read their output (the last
	// lines of which are there already; the termination log is not).
	what := "the container"
	if len(in.ctrs) > 1 {
		what = "container " + c.name
	}
	line := "knbox: " + what + " exited (" + st.String() + ")"
	if st.OOMKilled {
		line = "knbox: " + what + " exited (OOMKilled: over its memory limit)"
	}
	if m := c.terminationLog(); m != "" {
		line += ": " + m
	}
	in.platformLog(line)
	return c.name, exitCode(st), msg, false
}

func exitCode(st runtime.ExitStatus) int { return st.Code }

// platformLog writes a line of knbox's own into the instance's log, beside
// the container's output.
func (in *instance) platformLog(line string) {
	if in.logf != nil {
		in.logf.record(streamStderr, false, []byte(line))
	}
}

func (in *instance) flushOutput() {
	for _, c := range in.ctrs {
		c.stdout.Flush()
		c.stderr.Flush()
	}
}

// terminationLog is what the container wrote to /dev/termination-log.
func (c *ctr) terminationLog() string {
	f, err := os.Open(filepath.Join(c.dir, "termination-log"))
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
func (in *instance) terminationMessage(c *ctr, st runtime.ExitStatus) string {
	if m := c.terminationLog(); m != "" {
		return m
	}
	if st.OOMKilled {
		return "OOMKilled: the container used more memory than its limit"
	}
	if st.Code != 0 {
		if t := c.tail.lastLines(); t != "" {
			return t
		}
	}
	if st.Code == 0 {
		return "container exited with no error"
	}
	return st.String()
}

// readiness probes aggressively until the first success, then with the
// probe's period, and tells the revision when the instance is ready.
func (in *instance) readiness(ctx context.Context, p *prober) {
	if d := p.initialDelay(); d > 0 && !sleepCtx(ctx, d) {
		return
	}
	successes, failures := 0, 0
	ready := false
	interval := startProbeInterval
	for {
		err := p.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			successes, failures = successes+1, 0
			if !ready && successes >= p.successThreshold() {
				ready = true
				interval = p.period(defaultReadyPeriod)
				in.r.setReady(in, true)
			}
		} else {
			successes, failures = 0, failures+1
			if ready && failures >= p.failureThreshold() {
				ready = false
				in.log.Info("readiness probe failed", "err", err)
				in.r.setReady(in, false)
			}
		}
		if !sleepCtx(ctx, interval) {
			return
		}
	}
}

// liveness probes with the probe's period and reports on restart when it
// failed failureThreshold times in a row.
func (in *instance) liveness(ctx context.Context, p *prober, restart chan<- string) {
	if d := p.initialDelay(); d > 0 && !sleepCtx(ctx, d) {
		return
	}
	period := p.period(10 * time.Second)
	failures := 0
	for sleepCtx(ctx, period) {
		err := p.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		if failures >= p.failureThreshold() {
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

// stopOrderly drains the instance (it left the endpoints already; wait for
// the router's Drained if the router may have requests on it, at most the
// revision's timeout), then sends SIGTERM and, after the grace period,
// SIGKILL to every container.
func (in *instance) stopOrderly(ctx context.Context, exs []*exitWatch, grace time.Duration) {
	in.r.mu.Lock()
	exposed := in.exposed
	in.r.mu.Unlock()
	in.r.m.notify(in.r.key)
	if exposed {
		t := time.NewTimer(grace)
		select {
		case <-in.drainedCh:
		case <-exs[in.r.spec.serving].done:
		case <-t.C:
			in.log.Info("drain timed out", "after", grace)
		case <-ctx.Done():
		}
		t.Stop()
	}
	in.terminate(ctx, exs, grace)
}

// terminate sends SIGTERM to every container that still runs, waits the
// grace period for all of them to exit, then sends SIGKILL to those that
// have not. exs are the containers' exit watches, by in.ctrs.
func (in *instance) terminate(ctx context.Context, exs []*exitWatch, grace time.Duration) {
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
	for _, i := range running() {
		if err := in.ctrs[i].c.Kill(kctx, syscall.SIGTERM); err != nil {
			in.log.Warn("SIGTERM failed", "container", in.ctrs[i].name, "err", err)
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-allDone:
		return
	case <-t.C:
		in.log.Info("grace period over: SIGKILL", "grace", grace)
	case <-ctx.Done():
	}
	for _, i := range running() {
		if err := in.ctrs[i].c.Kill(kctx, syscall.SIGKILL); err != nil {
			in.log.Warn("SIGKILL failed", "container", in.ctrs[i].name, "err", err)
		}
	}
	t2 := time.NewTimer(killWait)
	defer t2.Stop()
	select {
	case <-allDone:
	case <-t2.C:
	}
}

// teardownContainer deletes the current containers and unmounts their root
// filesystems (a restarted container gets a fresh one, as on Kubernetes).
func (in *instance) teardownContainer() {
	for _, c := range in.ctrs {
		if c.c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			err := c.c.Delete(ctx)
			cancel()
			if err != nil {
				in.log.Warn("delete container", "container", c.name, "err", err)
			} else {
				c.c = nil
			}
		}
		if c.mounted {
			if err := image.Unmount(c.dir); err != nil {
				in.log.Warn("unmount root filesystem", "container", c.name, "err", err)
			} else {
				c.mounted = false
			}
		}
	}
}

// leftBehind tells whether a container or a root filesystem of the
// instance could not be removed.
func (in *instance) leftBehind() bool {
	for _, c := range in.ctrs {
		if c.c != nil || c.mounted {
			return true
		}
	}
	return false
}

// removeLeftover deletes the containers of the instance that a failed
// create may have left in the runtime's state (runc keeps a container that
// failed to start), so that the next create does not find the id taken.
func (in *instance) removeLeftover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cs, err := in.r.spec.handler.Recover(ctx)
	if err != nil {
		in.log.Warn("list containers", "err", err)
		return
	}
	for _, c := range cs {
		if instanceOf(c.ID()) == in.id {
			if err := c.Delete(ctx); err != nil {
				in.log.Warn("delete leftover container", "container", c.ID(), "err", err)
			}
		}
	}
}

// cleanup removes everything the instance made but its log.
func (in *instance) cleanup() {
	in.r.setReady(in, false)
	in.teardownContainer()
	if in.syslog != nil {
		in.syslog.Close()
		<-in.syslogDone
		in.syslog = nil
	}
	in.flushOutput()
	if in.logf != nil {
		if err := in.logf.Close(); err != nil {
			in.log.Warn("close log", "err", err)
		}
	}
	if ns := in.nsOf(); ns != nil {
		if eg := in.r.m.opts.Egress; eg != nil {
			// Not bound to the Manager's context: cleanup also runs at Close.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := eg.Detach(ctx, ns); err != nil {
				in.log.Warn("detach egress; Recover will retry", "err", err)
			}
			cancel()
		}
		if err := ns.Delete(); err != nil {
			in.log.Warn("delete network namespace", "err", err)
		} else {
			in.r.mu.Lock()
			in.ns = nil
			in.r.mu.Unlock()
		}
	}
	if in.leftBehind() || in.nsOf() != nil {
		in.log.Warn("instance left state behind; Recover will remove it", "dir", in.dir)
		return
	}
	if err := os.RemoveAll(in.dir); err != nil {
		in.log.Warn("remove instance directory", "err", err)
	}
}

// dialer dials into the instance's network namespace.
func (in *instance) dialer() dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ns := in.nsOf()
		if ns == nil {
			return nil, fmt.Errorf("instance %s has no network namespace", in.id)
		}
		return ns.Dial(ctx, network, addr)
	}
}

// dialPort connects to the instance's container port.
func (in *instance) dialPort(ctx context.Context) (net.Conn, error) {
	port := in.r.spec.port
	return in.dialer()(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

// listenSyslog makes a datagram socket named name in dir for /dev/log,
// writable by any user. It binds through /proc/self/fd so that a long dir
// does not overflow sun_path.
func listenSyslog(dir, name string) (*net.UnixConn, error) {
	p := filepath.Join(dir, name)
	_ = os.Remove(p)
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o666); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// readSyslog copies datagrams from /dev/log into the log until conn is
// closed.
func (in *instance) readSyslog(conn *net.UnixConn, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, maxSyslogMessage)
	for {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := strings.TrimRight(string(buf[:n]), "\r\n\x00")
		for _, line := range strings.Split(msg, "\n") {
			in.logf.record(streamSyslog, false, []byte(line))
		}
	}
}

// writeFileSync writes a file and syncs it, so that it survives a crash of
// the machine as far as the file system allows.
func writeFileSync(p string, data []byte, mode os.FileMode) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
