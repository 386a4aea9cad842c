// Package daemon assembles `knbox serve`: it opens the store, creates the
// API server's credentials, wires admission with knbox's configuration,
// assembles the runtime side (pod runtime, revision manager, autoscaler,
// router) and the controllers, and serves the API (HTTPS) and the data
// plane (HTTP) until its context ends.
//
// It is wiring only: behaviour belongs to the packages it assembles. It
// must not hold state of its own beyond what connects them.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	"golang.org/x/net/http2/h2c"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/autoscaler"
	"github.com/knbox/knbox/pkg/build"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/console"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/disk"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/kubeclient"
	"github.com/knbox/knbox/pkg/listen"
	"github.com/knbox/knbox/pkg/listener"
	"github.com/knbox/knbox/pkg/logs"
	"github.com/knbox/knbox/pkg/metrics"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pki"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/routing"
	"github.com/knbox/knbox/pkg/runtime"
	"github.com/knbox/knbox/pkg/serviceaccount"
	"github.com/knbox/knbox/pkg/store"
)

// KubeconfigFile is the kubeconfig written into the data directory at
// start, with the server's real address; `knbox kubeconfig` prints it.
const KubeconfigFile = "kubeconfig"

// ControllerUser is the identity the in-process controllers act as.
const ControllerUser = "system:knbox:controller"

// maxTailLines bounds pods/log's tailLines (an instance's log holds far
// fewer lines: 20 MiB at most).
const maxTailLines = 1 << 22

// stopTimeout bounds stopping the instances at exit.
const stopTimeout = 30 * time.Second

// Run serves until ctx ends or a successor asks for the listening sockets,
// then exits as docs/restart.md says: instances are left running for the
// next knbox (unless restart.keepInstances is false) and the sockets are
// handed over. ready, if not nil, is called once the data plane routes
// requests (the routing table restored, instances of an earlier run
// adopted).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, ready func(api, data string)) error {
	if err := disk.PrepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	tuneGC(cfg.Limits.Memory, log)
	handoverWait, err := cfg.HandoverWait()
	if err != nil {
		return err
	}
	// The sockets first: a knbox that still runs on this data dir is asked
	// for them, and so to exit, which frees the store.
	addrs := map[string]string{"api": cfg.APIAddr, "http": cfg.HTTPAddr}
	if cfg.HTTPSAddr != "" {
		addrs["https"] = cfg.HTTPSAddr
	}
	if cfg.Observability.MetricsAddr != "" {
		addrs["metrics"] = cfg.Observability.MetricsAddr
	}
	if !cfg.Registry.Disabled {
		addrs["registry"] = cfg.Registry.Addr
	}
	socks, err := listener.Open(ctx, addrs, filepath.Join(cfg.DataDir, handoverSocket), handoverWait+stopTimeout, log)
	if err != nil {
		return err
	}
	lingered := false
	defer func() {
		if !lingered {
			socks.Close()
		}
	}()
	log.Info("listening sockets", "from", socks.From())
	// The serving certificate also holds the names and the address by
	// which instances reach the API from inside (instancenet.go).
	apiHosts := append(pki.InClusterHosts(cfg.ClusterDomain), instanceAddr.String())
	creds, err := pki.Ensure(cfg.DataDir, append(apiHosts, cfg.APIHosts...))
	if err != nil {
		return err
	}
	authn, err := pki.NewAuthenticator(creds.Token, cfg.TokenAuthFile)
	if err != nil {
		return err
	}
	serving, err := cfg.Serving()
	if err != nil {
		return err
	}
	policy, err := containerPolicy(cfg.Policy) // checked before anything serves
	if err != nil {
		return err
	}
	// Metrics and the access log: the store, the router, the autoscaler
	// and the pods are added once they exist.
	accessLog, closeAccessLog, err := openAccessLog(cfg.Observability.AccessLog)
	if err != nil {
		return err
	}
	defer closeAccessLog()
	var revLabels revisionLabels
	tracer, err := newTracer(cfg)
	if err != nil {
		return err
	}
	defer func() {
		// The spans still queued go out, for a while.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(sctx); err != nil {
			log.Warn("exporting the last spans", "err", err)
		}
	}()
	mopts := metrics.Options{Labels: revLabels.labels, AccessLog: accessLog, QueueLength: cfg.Observability.QueueLength}
	if tracer != nil {
		mopts.Trace = tracer.Observe
	}
	mtr := metrics.New(mopts)
	stOpts := storeOptions(cfg)
	stOpts.ObserveCommit = mtr.ObserveStoreCommit
	st, err := openStore(ctx, filepath.Join(cfg.DataDir, "knbox.db"), stOpts, handoverWait+stopTimeout)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if err := mtr.AddStore(st.Watchers); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	storeOpen := true
	closeStore := func() {
		if storeOpen {
			st.Close()
			storeOpen = false
		}
	}
	defer closeStore()
	iopts, err := imageOptions(cfg)
	if err != nil {
		return err
	}
	iopts.ObservePull = mtr.ObserveImagePull
	regLn := socks.Listener("registry")
	if regLn == nil && !cfg.Registry.Disabled {
		// systemd passed the other sockets but not this one.
		if regLn, err = net.Listen("tcp", cfg.Registry.Addr); err != nil {
			return fmt.Errorf("registry.addr: %w", err)
		}
		defer regLn.Close()
	}
	if regLn != nil {
		// References to the registry are pulled from what was pushed.
		iopts.LocalRegistries = registryNames(cfg, regLn.Addr())
	}
	images, err := image.Open(iopts)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	logStore, err := logs.NewStore(filepath.Join(cfg.DataDir, "instances", "logs"))
	if err != nil {
		return err
	}

	// The controllers are clients of the API like any other, with an
	// identity of their own whose token lives only in memory.
	internalToken, err := randomToken()
	if err != nil {
		return err
	}
	// ServiceAccount tokens, signed with the data dir's key.
	saTokens, err := serviceaccount.NewSigner(creds.ServiceAccountKey, cfg.ServiceAccounts.Issuer, cfg.ServiceAccounts.APIAudiences)
	if err != nil {
		return err
	}
	var ctl atomic.Pointer[controller.Controller] // set once the controllers run
	var builds atomic.Pointer[build.Controller]   // set once it exists
	var podRuntime atomic.Pointer[pod.Runtime]    // set once the pod runtime exists
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Pod Security admission judges what the instances' policy makes of
	// a Revision's containers (oci.Declare).
	admitter, err := newAdmitter(cfg, serving, policy, log)
	if err != nil {
		return err
	}
	var srv *apiserver.Server // the registry's images are authorized by its RBAC
	admitter.RegistryImage = registryImageCheck(iopts.LocalRegistries, func() *apiserver.Server { return srv })
	srv, err = apiserver.New(apiserver.Options{
		Store:    st,
		Kinds:    apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: admitter,
		Authenticate: func(h string) (admission.User, bool) {
			if subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+internalToken)) == 1 {
				return admission.User{Name: ControllerUser, Groups: []string{authz.InternalGroup}}, true
			}
			u, ok := authn.Authenticate(h)
			return admission.User{Name: u.Name, UID: u.UID, Groups: u.Groups}, ok
		},
		MaxRequestBodyBytes:  cfg.MaxRequestBodyBytes,
		Limits:               apiLimits(cfg),
		Logger:               log,
		ServiceAccountTokens: saTokens,
		RootCA:               creds.CACertPEM,
		MaxTokenExpiration:   time.Duration(cfg.ServiceAccounts.MaxTokenExpirationSeconds) * time.Second,
		Metrics:              mtr.Handler(),
		Observe:              observeAPI(mtr),
		Ingress:              ingressService(socks.Listener("http").Addr(), listenerAddr(socks.Listener("https"))),
		Extensions: map[string]http.Handler{
			"images": image.Handler(images, func(context.Context) ([]string, error) {
				if c := ctl.Load(); c != nil {
					return c.ImageDigests()
				}
				return nil, errors.New("the controllers are starting")
			}),
		},
		Logs: func(rctx context.Context, w io.Writer, ns, rev string, o apiserver.LogOptions) error {
			// A follow ends with the request or with knbox.
			rctx, stop := context.WithCancel(rctx)
			defer stop()
			defer context.AfterFunc(runCtx, stop)()
			return logStore.Copy(rctx, ns, rev, logs.CopyOptions{Follow: o.Follow, Since: o.Since}, w)
		},
		BuildSource: func(rctx context.Context, b k8sruntime.Object, body io.Reader) error {
			c := builds.Load()
			if c == nil {
				return apierrors.NewServiceUnavailable("the build controller is starting: try again")
			}
			return c.Upload(rctx, b, body)
		},
		MaxBuildSourceBytes: cfg.Builds.MaxUploadBytes,
		BuildLogs: func(rctx context.Context, w io.Writer, ns, name string, o apiserver.LogOptions) error {
			rctx, stop := context.WithCancel(rctx)
			defer stop()
			defer context.AfterFunc(runCtx, stop)()
			return logStore.Copy(rctx, ns, build.BuildLogGroup(name), logs.CopyOptions{Follow: o.Follow, Since: o.Since}, w)
		},
		Exec: func(rctx context.Context, p *corev1.Pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
			rt := podRuntime.Load()
			if rt == nil {
				return -1, errors.New("the pod runtime is starting")
			}
			rctx, stop := context.WithCancel(rctx)
			defer stop()
			defer context.AfterFunc(runCtx, stop)()
			return rt.Exec(rctx, p.Annotations[replicas.AnnotationInstance], container, runtime.ExecProcess{Args: cmd, Stdin: stdin, Stdout: stdout, Stderr: stderr})
		},
		PortForward: func(rctx context.Context, p *corev1.Pod, port int32) (net.Conn, error) {
			rt := podRuntime.Load()
			if rt == nil {
				return nil, errors.New("the pod runtime is starting")
			}
			return rt.DialPort(rctx, p.Annotations[replicas.AnnotationInstance], port)
		},
		PodLogs: func(rctx context.Context, w io.Writer, p *corev1.Pod, o apiserver.PodLogOptions) error {
			rctx, stop := context.WithCancel(rctx)
			defer stop()
			defer context.AfterFunc(runCtx, stop)()
			co := logs.CopyOptions{Follow: o.Follow, Since: o.Since, Timestamps: o.Timestamps, Previous: o.Previous,
				RunEnd: pod.RunEnded, Select: pod.ContainerLines(o.Container, len(p.Spec.Containers))}
			if o.TailLines != nil {
				co.Tail, co.HasTail = int(min(*o.TailLines, maxTailLines)), true
			}
			err := logStore.CopyInstance(rctx, p.Namespace, p.Labels[replicas.LabelRevision], p.Annotations[replicas.AnnotationInstance], co, w)
			if errors.Is(err, logs.ErrNoPreviousRun) {
				return apiserver.ErrNoPreviousContainer
			}
			return err
		},
	})
	if err != nil {
		return err
	}
	if err := srv.Start(runCtx); err != nil {
		return err
	}

	cert, err := tls.LoadX509KeyPair(creds.CertFile, creds.KeyFile)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	apiLn, dataLn, tlsLn := socks.Listener("api"), socks.Listener("http"), socks.Listener("https")
	// The limits wrap Accept only: the sockets handed over are socks'.
	apiLn, dataLn = apiListen(cfg).Listener(apiLn), routerListen(cfg).Listener(dataLn)
	if tlsLn != nil {
		tlsLn = routerListen(cfg).Listener(tlsLn)
	}
	apiURL := "https://" + clientAddr(apiLn.Addr())
	kc, err := pki.Kubeconfig(apiURL, creds.CACertPEM, creds.Token)
	if err != nil {
		return err
	}
	if err := writePrivate(filepath.Join(cfg.DataDir, KubeconfigFile), kc); err != nil {
		return err
	}
	apiHandler := srv.Handler()
	if cc := cfg.Observability.Console; !cc.Disabled {
		con, err := console.New(console.Options{API: apiHandler, Totals: consoleTotals(mtr), LatencyBounds: metrics.LatencyBounds(), MaxSessions: cc.MaxSessions,
			SessionTTL: time.Duration(cc.SessionTTL), SampleInterval: time.Duration(cc.SampleInterval), Samples: cc.Samples,
			Logger: log.With("component", "console")})
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		go con.Run(runCtx)
		apiHandler = console.Mount(con, apiHandler)
	}
	api := apiListen(cfg).Apply(&http.Server{
		Handler:   apiHandler,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	})
	errc := make(chan error, 5)
	go func() { errc <- api.ServeTLS(apiLn, "", "") }()
	var regSrv *http.Server
	if regLn != nil {
		if regSrv, err = serveRegistry(cfg, regLn, images, srv, cert, errc, log); err != nil {
			return err
		}
	}

	clientCfg := internalConfig(apiURL, creds.CACertPEM, internalToken)
	kube, err := kubeclient.NewForConfig(clientCfg)
	if err != nil {
		return fmt.Errorf("internal client: %w", err)
	}
	sc, err := servingclient.NewForConfig(clientCfg)
	if err != nil {
		return fmt.Errorf("internal client: %w", err)
	}
	// Events of the controllers and of the instances go through client-go's
	// broadcaster, whose correlator counts repeats and aggregates similar
	// ones, as on a cluster.
	events := record.NewBroadcaster(record.WithContext(runCtx))
	defer events.Shutdown()
	events.StartRecordingToSink(kube.EventSink())

	// The runtime side. Probing the handlers takes a while: the API serves
	// meanwhile, and the data plane starts once they are known.
	handlers := selectRuntimes(runCtx, cfg, log.With("component", "runtime"))
	if err := controller.RegisterRuntimeClasses(runCtx, kube.RuntimeClasses(), runtimeHandlers(handlers)); err != nil {
		log.Error("runtime classes", "err", err)
	}
	if err := controller.RemoveRuntimeClasses(runCtx, kube.RuntimeClasses(), disabledRuntimes(cfg)); err != nil {
		log.Error("runtime classes", "err", err)
	}
	egress, err := network.OpenEgress(runCtx, network.EgressConfig{
		Bridge:     cfg.Egress.Bridge,
		Subnet:     cfg.EgressSubnet(),
		PluginDirs: cfg.Egress.CNIPluginDirs,
		StateDir:   filepath.Join(cfg.DataDir, "cni"),
	}, cfg.Egress.Enabled, log)
	if err != nil {
		return err
	}
	var nameservers, upstream []string
	if egress != nil {
		nameservers = cfg.Egress.Nameservers
		log.Info("egress on: instances reach the outside through NAT", "bridge", egress.Bridge(), "subnet", egress.Subnet(), "nameservers", nameservers)
		for _, ns := range nameservers {
			if ip, err := netip.ParseAddr(ns); err == nil {
				upstream = append(upstream, netip.AddrPortFrom(ip, 53).String())
			}
		}
		if len(upstream) == 0 {
			upstream = hostNameservers()
		}
	}
	// Instances' names and calls to other services, served inside their
	// network namespaces; the router serves them once it exists.
	instNet := newInstanceNet(cfg.ClusterDomain, upstream, log.With("component", "instance-network"))
	instNet.tokens = srv
	// The API inside instances: the same handler (authentication,
	// authorization, limits) and certificate, each instance's connections
	// bounded.
	instNet.api = apiListen(cfg).Apply(&http.Server{
		Handler:   srv.Handler(),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	})
	instNet.apiLimits = listen.Limits{MaxConnections: cfg.Limits.InstanceAPI.MaxConnections}
	instNet.resolver.MaxInFlight = cfg.Limits.InstanceDNS.MaxForwarding
	instNet.resolver.Timeout = cfg.Limits.InstanceDNS.ForwardTimeout.D()
	defer instNet.Close()
	dep, err := cfg.Deployment()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find knbox's own binary for the shims: %w", err)
	}
	var podEvents atomic.Pointer[replicas.Manager]
	buildRegistries := make([]netip.AddrPort, 0, len(cfg.Builds.Registries))
	for _, r := range cfg.Builds.Registries {
		a, err := config.LoopbackRegistry(r)
		if err != nil {
			return fmt.Errorf("builds.registries: %w", err)
		}
		buildRegistries = append(buildRegistries, a)
	}
	// The embedded registry is one of them, with credentials for the
	// steps (the Build's ServiceAccount's token).
	var buildRegistry *build.RegistryAccess
	if regLn != nil {
		if a, err := config.LoopbackRegistry(clientAddr(regLn.Addr())); err == nil {
			if !slices.Contains(buildRegistries, a) {
				buildRegistries = append(buildRegistries, a)
			}
			buildRegistry = &build.RegistryAccess{Hosts: []string{a.String()}}
		}
	}
	buildNet := build.Network(buildRegistries, log.With("component", "build"))
	pods, err := pod.New(pod.Options{
		Images:           images,
		Handlers:         handlers,
		StateDir:         filepath.Join(cfg.DataDir, "instances", "instances"),
		Egress:           egress,
		Nameservers:      nameservers,
		Policy:           policy,
		ShimCommand:      []string{self, "shim"},
		IdleShims:        idleShims(cfg.Limits.IdleShims),
		IdleShimsKeep:    cfg.Limits.IdleShims.KeepFor.D(),
		PullTimeout:      dep.ProgressDeadline,
		EphemeralStorage: ephemeralStorage(cfg),
		Network: func(ctx context.Context, spec *pod.Spec, ns *network.NS) (string, io.Closer, error) {
			if build.IsBuildPod(spec.Labels) {
				c, err := buildNet(ctx, spec, ns)
				return "", c, err
			}
			return instNet.attach(ctx, spec, ns)
		},
		// The pods' events go to the revision manager, which knows their
		// Revisions; those of pods adopted before it exists are dropped.
		Events: func(e pod.Event) {
			if m := podEvents.Load(); m != nil {
				m.PodEvent(e)
			}
		},
		Logger: log.With("component", "pod"),
	})
	if err != nil {
		return err
	}
	podRuntime.Store(pods)
	adopted, err := pods.Recover(runCtx)
	if err != nil {
		log.Warn("recovering pods of a previous run", "err", err)
	}
	var mgr *replicas.Manager // the autoscaler asks it how many instances are ready
	as := autoscaler.New(autoscaler.Options{
		Logger: log.With("component", "autoscaler"),
		Ready:  func(rev string) int32 { return mgr.Ready(autoscaler.SplitKey(rev)) },
	})
	scaler := as.Revisions(serving.Autoscaler)
	inputs := kubeclient.NewInformers(kube, kubeclient.InformerOptions{Resync: 10 * time.Minute, Transform: controller.TrimForCache})
	mgr, err = replicas.New(replicas.Options{
		Pods:      pods,
		Images:    images,
		Logs:      logStore,
		Scale:     scaler,
		Informers: inputs,
		// The API serves ServiceAccounts: their imagePullSecrets count.
		ServiceAccounts: true,
		// Projected serviceAccountToken volumes: the API server issues the
		// tokens in process, as kube-apiserver's TokenRequest does for the kubelet.
		Tokens: srv,
		// Scale-ups are held by the namespaces' ResourceQuotas, on the
		// ledger admission checks new Revisions against.
		Quota:               srv.Ledger(),
		DefaultRuntimeClass: cfg.DefaultRuntimeClass,
		// KUBERNETES_SERVICE_HOST and the ServiceAccount volume: the API
		// inside instances.
		API:              netip.AddrPortFrom(instanceAddr, instanceAPIPort),
		ExecProbes:       cfg.Policy.AllowExecProbes,
		Prepared:         preparedBudget(cfg.Limits.PreparedSandboxes),
		Event:            instanceEvents(events),
		ProgressDeadline: dep.ProgressDeadline,
		Logger:           log.With("component", "replicas"),
	})
	if err != nil {
		return err
	}
	podEvents.Store(mgr)
	dyn, err := dynamic.NewForConfig(clientCfg)
	if err != nil {
		return fmt.Errorf("internal client: %w", err)
	}
	if buildRegistry != nil {
		buildRegistry.Tokens = srv
	}
	sources, err := build.NewSources(filepath.Join(cfg.DataDir, "builds", "sources"))
	if err != nil {
		return err
	}
	buildCtl, err := build.New(build.Options{
		Client:              dyn,
		Informers:           inputs,
		Pods:                pods,
		Logs:                logStore,
		DefaultRuntimeClass: cfg.DefaultRuntimeClass,
		Sources:             sources,
		Registry:            buildRegistry,
		SourceLimits: image.ArchiveLimits{What: "source archive", MaxBytes: cfg.Builds.MaxSourceBytes, MaxFiles: cfg.Builds.MaxSourceFiles,
			BytesKey: "builds.maxSourceBytes", FilesKey: "builds.maxSourceFiles"},
		Git:    build.GitLimits{Timeout: time.Duration(cfg.Builds.GitTimeout), MaxFetchBytes: cfg.Builds.MaxGitFetchBytes},
		Logger: log.With("component", "build"),
	})
	if err != nil {
		return err
	}
	builds.Store(buildCtl)
	routes := routing.NewTable()
	rt, err := router.New(router.Options{
		Table:     routes,
		Instances: routerInstances{mgr},
		Stats: func(ns, rev string, at time.Time, concurrency, requests float64) {
			as.Record(autoscaler.Key(ns, rev), at, concurrency, requests)
		},
		Poke: func(ns, rev string, waiting int) {
			as.PokeN(autoscaler.Key(ns, rev), waiting)
			mgr.Poke(ns, rev)
		},
		External:      true,
		ClusterDomain: cfg.ClusterDomain,
		Observer:      mtr,
		Logger:        log.With("component", "router"),
	})
	if err != nil {
		return err
	}
	if err := addCollectors(mtr, rt, as, mgr, pods); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	revInformers, err := revLabels.start(runCtx, sc, mtr)
	if err != nil {
		return err
	}
	claims, err := netclient.NewForConfig(clientCfg)
	if err != nil {
		return err
	}
	c, err := newController(cfg, sc, claims, dyn, controllerRuntime{mgr}, scaler, routes, apiURL, dep.DigestResolutionTimeout, dataLn.Addr(),
		controller.Recorders(events), log)
	if err != nil {
		return err
	}
	if fileDomain, err := cfg.Domain(); err == nil {
		watchDomainConfig(runCtx, kube, c, fileDomain, log.With("component", "config"))
	}
	inputs.Start(runCtx.Done())
	done := make(chan struct{}, 7)
	go func() {
		defer func() { done <- struct{}{} }()
		restGC(runCtx, cfg.Limits.Memory, log, st.DropCache, filepath.Join(cfg.DataDir, "knbox.db"))
	}()
	go func() { defer func() { done <- struct{}{} }(); mtr.Run(runCtx) }()
	go func() { defer func() { done <- struct{}{} }(); rt.Run(runCtx) }()
	go func() { defer func() { done <- struct{}{} }(); _ = as.Run(runCtx) }()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := buildCtl.Run(runCtx, 2); err != nil {
			log.Error("build controller stopped", "err", err)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := c.Run(runCtx, 2); err != nil {
			log.Error("controllers stopped", "err", err)
		}
	}()
	ctl.Store(c)

	// The readiness gate: the data listener accepts once the routing table
	// is restored and adopted instances answered their first probe;
	// connections wait in the backlog until then.
	select {
	case <-c.Initialized():
	case <-ctx.Done():
	case <-socks.Requested():
	}
	waitReady(runCtx, pods, adopted, adoptedReadyWait)
	// The instances as Pods on the API, once those of an earlier run are
	// adopted (their Pods keep their UIDs).
	go func() { defer func() { done <- struct{}{} }(); srv.RunPods(runCtx, podSource{mgr}) }()
	// Plain HTTP: the router's own server (its fast path for HTTP/1.1,
	// net/http with h2c for the rest), with the listener's limits.
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	dataHandler := h2c.NewHandler(rt, routerListen(cfg).H2C())
	lim := routerListen(cfg).Apply(&http.Server{})
	data := &router.Server{Router: rt, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes, H2C: routerListen(cfg).H2C()}
	go func() { errc <- data.Serve(dataLn) }()
	instNet.start(rt, func(namespace string) *router.Server {
		return &router.Server{Router: rt, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
			IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes, H2C: routerListen(cfg).H2C(), Namespace: namespace}
	})
	var dataTLS *http.Server
	if tlsLn != nil {
		dcert, err := tls.LoadX509KeyPair(cfg.HTTPSCertFile, cfg.HTTPSKeyFile)
		if err != nil {
			return fmt.Errorf("httpsCertFile/httpsKeyFile: %w", err)
		}
		// HTTP/2 over TLS comes with net/http's ALPN; the router's h2c
		// wrapper passes TLS requests through untouched.
		dataTLS = routerListen(cfg).Apply(&http.Server{Handler: dataHandler,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{dcert}, MinVersion: tls.VersionTLS12}})
		go func() { errc <- dataTLS.ServeTLS(tlsLn, "", "") }()
	}
	var metricsSrv *http.Server
	metricsLn := socks.Listener("metrics")
	if metricsLn == nil && cfg.Observability.MetricsAddr != "" {
		// systemd passed the other sockets but not this one.
		if metricsLn, err = net.Listen("tcp", cfg.Observability.MetricsAddr); err != nil {
			return fmt.Errorf("observability.metricsAddr: %w", err)
		}
	}
	if ln := metricsLn; ln != nil {
		metricsSrv = metricsServer(mtr)
		go func() { errc <- metricsSrv.Serve(ln) }()
		log.Info("serving /metrics without authentication", "addr", ln.Addr().String())
	}
	if err := socks.ServeHandover(filepath.Join(cfg.DataDir, handoverSocket)); err != nil {
		log.Warn("no handover of the listening sockets to a successor", "err", err)
	}
	log.Info("knbox serving", "api", apiURL, "http", "http://"+dataLn.Addr().String(), "dataDir", cfg.DataDir,
		"adoptedInstances", len(adopted))
	notify(log, sdnotify.SdNotifyReady)
	if ready != nil {
		ready(apiURL, "http://"+dataLn.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case <-socks.Requested():
		log.Info("a new knbox asked for the listening sockets: handing over")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = err
		}
	}

	// Exit: stop accepting (the sockets stay open for a successor), let
	// requests in flight finish, stop the control plane, leave or stop the
	// instances, close the store, then hand the sockets over.
	notify(log, sdnotify.SdNotifyStopping)
	shutdown(api, apiShutdownTimeout)
	shutdown(data, drainTimeout)
	instNet.Close()
	if dataTLS != nil {
		shutdown(dataTLS, drainTimeout)
	}
	if metricsSrv != nil {
		shutdown(metricsSrv, apiShutdownTimeout)
	}
	if regSrv != nil {
		shutdown(regSrv, apiShutdownTimeout)
	}
	cancel()
	for range 7 {
		<-done
	}
	inputs.Shutdown()
	revInformers.Shutdown()
	stop, cancelStop := context.WithTimeout(context.Background(), stopTimeout)
	defer cancelStop()
	if cfg.KeepsInstances() {
		if err := mgr.Detach(stop); err != nil {
			log.Warn("leaving instances", "err", err)
		}
		if err := pods.Detach(stop); err != nil {
			log.Warn("leaving pods", "err", err)
		}
		log.Info("instances left running for the next knbox")
	} else {
		// Stop the instances in order; what a kill -9 leaves behind is
		// adopted or cleaned by Recover at the next start instead.
		if err := mgr.Close(stop); err != nil {
			log.Warn("stopping instances", "err", err)
		}
		if err := pods.Close(stop); err != nil {
			log.Warn("stopping pods", "err", err)
		}
	}
	closeStore()
	lingered = true
	if handed := socks.Linger(context.Background(), handoverWait); handed {
		log.Info("the next knbox has the listening sockets")
	}
	return runErr
}

// Bounds of the exit.
const (
	// apiShutdownTimeout bounds the wait for API requests in flight (a
	// watch never ends by itself).
	apiShutdownTimeout = 5 * time.Second
	// drainTimeout bounds the wait for data plane requests in flight.
	drainTimeout = 30 * time.Second
	// adoptedReadyWait bounds the wait for adopted instances' first probe
	// before the data listener serves.
	adoptedReadyWait = 10 * time.Second
	// handoverSocket is where a running knbox hands its sockets over.
	handoverSocket = "handover.sock"
)

func shutdown(s interface {
	Shutdown(context.Context) error
	Close() error
}, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		_ = s.Close()
	}
}

// waitReady waits until the adopted pods that were running are ready (or
// gone), at most d: they answer their first probe within milliseconds.
func waitReady(ctx context.Context, pods *pod.Runtime, adopted []pod.Status, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, a := range adopted {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			st, ok := pods.Status(a.ID)
			if !ok || st.Ready || !st.Running {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// notify tells systemd (when it started knbox with NOTIFY_SOCKET) knbox's
// state.
func notify(log *slog.Logger, state string) {
	if _, err := sdnotify.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", state, "err", err)
	}
}

// openStore opens the store, waiting while a knbox that is exiting still
// holds it (at most wait).
func openStore(ctx context.Context, path string, opts store.Options, wait time.Duration) (*store.Store, error) {
	deadline := time.Now().Add(wait)
	for {
		st, err := store.Open(path, opts)
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "timeout") {
			return st, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// selectRuntimes builds the handlers of the runtimes table and keeps those
// that work on this host.
func selectRuntimes(ctx context.Context, cfg *config.Config, log *slog.Logger) map[string]runtime.Handler {
	hs, missing := handlers(cfg)
	for name, err := range missing {
		log.Info("runtime handler not installed", "handler", name, "err", err)
	}
	ok := runtime.Select(ctx, hs, filepath.Join(cfg.DataDir, "probe"), log)
	log.Info("runtime handlers ready", "handlers", slices.Sorted(maps.Keys(ok)))
	return ok
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate internal token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// newController builds the reconcilers, talking to this server over
// loopback HTTPS as the controller user.
func newController(cfg *config.Config, client servingclient.Interface, claims netclient.Interface, builds dynamic.Interface, rt controller.Runtime, scaler controller.Scaler, routes *routing.Table,
	apiURL string, resolveTimeout time.Duration, data net.Addr, recorder func(string) record.EventRecorder, log *slog.Logger) (*controller.Controller, error) {
	network, err := cfg.Network()
	if err != nil {
		return nil, err
	}
	domain, err := cfg.Domain()
	if err != nil {
		return nil, err
	}
	gc, err := cfg.GC()
	if err != nil {
		return nil, err
	}
	port := 0
	if tcp, ok := data.(*net.TCPAddr); ok {
		port = tcp.Port
	}
	return controller.New(controller.Options{
		Client: client, Claims: claims, Runtime: rt, Scaler: scaler, Routes: routes,
		Network: network, Domain: domain, ClusterDomain: cfg.ClusterDomain, GC: gc, HTTPPort: port, APIURL: apiURL, DigestResolutionTimeout: resolveTimeout,
		Recorder: recorder,
		Builds:   builds,
		Logger:   log.With("component", "controller"),
	})
}

// clientAddr is the address a local client dials: a wildcard listen
// address becomes loopback, which the serving certificate covers.
func clientAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Port))
}

func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a leftover keeps its mode through WriteFile: start anew, 0600
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// idleShims is the pod runtime's Options.IdleShims.
func idleShims(l config.IdleShimLimits) int {
	if l.Disabled {
		return 0
	}
	return l.Count
}

// preparedBudget is the revision manager's budget of prepared sandboxes
// (nil: none).
func preparedBudget(l config.PreparedSandboxLimits) *replicas.PreparedBudget {
	if l.Disabled {
		return nil
	}
	return &replicas.PreparedBudget{Count: l.Count, Memory: int64(l.Memory)}
}
