// Package controller gives Knative's resources their meaning, as Knative
// Serving's reconcilers do on a cluster: a Service owns a Configuration and
// a Route; a Configuration stamps an immutable Revision for every template
// change; a Revision is run by the runtime and reports its health; a Route
// resolves its traffic to Revisions and publishes the routing table; old
// Revisions are collected by config-gc's rules.
//
// The reconcilers are level-triggered: each reads observed state from
// informers (list + watch of the API server, as any client) and converges,
// so a restart converges to the same state. They write through Knative's
// clientset, so every write goes through admission, and status only through
// the status subresource. It must not import the API server, the store or
// the data plane: it talks to the runtime through the Runtime interface and
// to the router through the routing table.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	netinformers "knative.dev/networking/pkg/client/informers/externalversions"
	netcfg "knative.dev/networking/pkg/config"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
	listers "knative.dev/serving/pkg/client/listers/serving/v1"
	v1beta1listers "knative.dev/serving/pkg/client/listers/serving/v1beta1"
	gcconfig "knative.dev/serving/pkg/gc"
	routecfg "knative.dev/serving/pkg/reconciler/route/config"

	"github.com/knbox/knbox/pkg/routing"
)

// Options configure a Controller.
type Options struct {
	Client  servingclient.Interface
	Runtime Runtime
	// Scaler owns each revision's desired scale and Active condition.
	Scaler Scaler
	Routes *routing.Table
	// Claims reads and makes ClusterDomainClaims; nil: DomainMappings are
	// not reconciled.
	Claims  netclient.Interface
	Network *netcfg.Config
	Domain  *routecfg.Domain
	// ClusterDomain is the cluster domain ("": DefaultClusterDomain):
	// cluster-local addresses are name.namespace.svc.<ClusterDomain>.
	ClusterDomain string
	GC            *gcconfig.Config
	// HTTPPort is the data plane's port; URLs carry it unless it is 80.
	HTTPPort int
	// APIURL is the API server's URL: a revision's status.logUrl is its
	// log subresource there ("": no logUrl).
	APIURL string
	// DigestResolutionTimeout bounds the resolution of one image to a
	// digest (config-deployment's digest-resolution-timeout; 0:
	// DefaultDigestResolutionTimeout).
	DigestResolutionTimeout time.Duration
	Clock                   clock.Clock // nil: the real clock
	Logger                  *slog.Logger
	// Resync re-reconciles everything this often (0: 10 minutes), which
	// also drives time-based garbage collection.
	Resync time.Duration
	// Recorder makes the event recorder of a component (Knative's
	// controller names: "service-controller", ...); nil: no events.
	Recorder func(component string) record.EventRecorder
	// Builds reads and creates build.knative.dev Builds: a Revision with
	// a build (see v1alpha1.RevisionBuild) waits for it. nil: such a
	// Revision fails.
	Builds dynamic.Interface
}

// DefaultDigestResolutionTimeout is Knative's default
// digest-resolution-timeout (config-deployment).
const DefaultDigestResolutionTimeout = 10 * time.Second

// Controller runs the reconcilers.
type Controller struct {
	opts   Options
	client servingclient.Interface
	log    *slog.Logger
	clock  clock.Clock

	factory informers.SharedInformerFactory
	// netFactory watches ClusterDomainClaims; nil when Options.Claims is.
	netFactory netinformers.SharedInformerFactory
	services   listers.ServiceLister
	configs    listers.ConfigurationLister
	revisions  listers.RevisionLister
	routes     listers.RouteLister
	// domain is config-domain, replaced by SetDomain.
	domain atomic.Pointer[routecfg.Domain]
	// domainMappings is nil when Options.Claims is.
	domainMappings v1beta1listers.DomainMappingLister

	// builds caches Builds (nil when Options.Builds is).
	builds        cache.Store
	buildInformer cache.SharedIndexInformer

	queues      map[string]workqueue.RateLimitingInterface
	synced      []cache.InformerSynced
	refs        referenced
	events      recorders
	initialized chan struct{} // closed by Run after its first pass
}

const (
	kindService       = "Service"
	kindConfiguration = "Configuration"
	kindRevision      = "Revision"
	kindRoute         = "Route"
)

// New builds a Controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Runtime == nil || opts.Scaler == nil || opts.Routes == nil || opts.Network == nil || opts.Domain == nil || opts.GC == nil {
		return nil, errors.New("controller: Client, Runtime, Scaler, Routes, Network, Domain and GC are required")
	}
	if opts.DigestResolutionTimeout <= 0 {
		opts.DigestResolutionTimeout = DefaultDigestResolutionTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.ClusterDomain == "" {
		opts.ClusterDomain = DefaultClusterDomain
	}
	c := &Controller{opts: opts, client: opts.Client, log: opts.Logger, clock: opts.Clock, queues: map[string]workqueue.RateLimitingInterface{},
		initialized: make(chan struct{}), events: newRecorders(opts.Recorder)}
	c.domain.Store(opts.Domain)
	c.factory = informers.NewSharedInformerFactoryWithOptions(opts.Client, opts.Resync, informers.WithTransform(TrimForCache))
	sv := c.factory.Serving().V1()
	c.services, c.configs, c.revisions, c.routes = sv.Services().Lister(), sv.Configurations().Lister(), sv.Revisions().Lister(), sv.Routes().Lister()
	for _, k := range []string{kindService, kindConfiguration, kindRevision, kindRoute} {
		c.queues[k] = workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), k)
	}

	// Each kind's changes wake the reconcilers that read it.
	c.watch(sv.Services().Informer(), func(o metaObject) {
		c.enqueue(kindService, o.GetNamespace(), o.GetName())
	})
	c.watch(sv.Configurations().Informer(), func(o metaObject) {
		c.enqueue(kindConfiguration, o.GetNamespace(), o.GetName())
		c.enqueueOwner(kindService, o)
		c.enqueueRoutes(o.GetNamespace())
	})
	c.watch(sv.Revisions().Informer(), func(o metaObject) {
		c.enqueue(kindRevision, o.GetNamespace(), o.GetName())
		if cfg := o.GetLabels()["serving.knative.dev/configuration"]; cfg != "" {
			c.enqueue(kindConfiguration, o.GetNamespace(), cfg)
		}
		c.enqueueRoutes(o.GetNamespace())
	})
	c.watch(sv.Routes().Informer(), func(o metaObject) {
		c.enqueue(kindRoute, o.GetNamespace(), o.GetName())
		c.enqueueOwner(kindService, o)
		c.enqueueDomainMappings(o.GetNamespace())
	})
	if opts.Claims != nil {
		dmi := c.factory.Serving().V1beta1().DomainMappings()
		c.domainMappings = dmi.Lister()
		c.queues[kindDomainMapping] = workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), kindDomainMapping)
		c.watch(dmi.Informer(), func(o metaObject) {
			c.enqueue(kindDomainMapping, o.GetNamespace(), o.GetName())
			// A mapping of the same domain in another namespace may
			// take over the domain.
			c.enqueueSameDomain(o.GetName())
		})
		// A claim made, changed or deleted by hand decides which
		// namespace's mapping of its domain is served: wake them.
		c.netFactory = netinformers.NewSharedInformerFactoryWithOptions(opts.Claims, opts.Resync, netinformers.WithTransform(TrimForCache))
		c.watch(c.netFactory.Networking().V1alpha1().ClusterDomainClaims().Informer(), func(o metaObject) {
			c.enqueueSameDomain(o.GetName())
		})
	}
	if opts.Builds != nil {
		c.watchBuilds()
	}
	opts.Runtime.Subscribe(func(namespace, name string) { c.enqueue(kindRevision, namespace, name) })
	opts.Scaler.Subscribe(func(namespace, name string) { c.enqueue(kindRevision, namespace, name) })
	return c, nil
}

type metaObject interface {
	GetNamespace() string
	GetName() string
	GetLabels() map[string]string
	GetOwnerReferences() []metav1.OwnerReference
}

func (c *Controller) watch(inf cache.SharedIndexInformer, f func(metaObject)) {
	handle := func(obj interface{}) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metaObject); ok {
			f(m)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, n interface{}) { handle(n) },
		DeleteFunc: handle,
	})
	c.synced = append(c.synced, inf.HasSynced)
}

func (c *Controller) enqueue(kind, namespace, name string) {
	c.queues[kind].Add(namespace + "/" + name)
}

func (c *Controller) enqueueOwner(kind string, o metaObject) {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == kind && ref.Controller != nil && *ref.Controller {
			c.enqueue(kind, o.GetNamespace(), ref.Name)
		}
	}
}

// enqueueRoutes wakes every route in namespace (routes read
// configurations and revisions by name, so any of them may care).
func (c *Controller) enqueueRoutes(namespace string) {
	rts, err := c.routes.Routes(namespace).List(everything())
	if err != nil {
		return
	}
	for _, r := range rts {
		c.enqueue(kindRoute, r.Namespace, r.Name)
	}
}

// Run starts the informers and reconcilers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers <= 0 {
		workers = 2
	}
	c.factory.Start(ctx.Done())
	if c.netFactory != nil {
		c.netFactory.Start(ctx.Done())
	}
	if c.buildInformer != nil {
		go c.buildInformer.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("controller: informers did not sync")
	}
	c.firstPass(ctx)
	reconcilers := map[string]func(context.Context, string, string) error{
		kindService:       c.reconcileService,
		kindConfiguration: c.reconcileConfiguration,
		kindRevision:      c.reconcileRevision,
		kindRoute:         c.reconcileRoute,
	}
	if c.domainMappings != nil {
		reconcilers[kindDomainMapping] = c.reconcileDomainMapping
	}
	var wg sync.WaitGroup
	for kind, rec := range reconcilers {
		q := c.queues[kind]
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func(kind string, rec func(context.Context, string, string) error) {
				defer wg.Done()
				for c.process(ctx, kind, q, rec) {
				}
			}(kind, rec)
		}
	}
	// Garbage collection of old revisions runs on a timer too, because its
	// rules depend on time passing.
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) { c.collectAll(ctx) }, time.Minute)
	}()
	<-ctx.Done()
	for _, q := range c.queues {
		q.ShutDown()
	}
	wg.Wait()
	return nil
}

// firstPass reconciles every Revision, then every Route, once, before the
// workers start: the runtime has every revision (and claims what an earlier
// run left running) and the routing table is whole when Initialized is
// closed. Failures are left to the workers, which have the same keys
// queued.
func (c *Controller) firstPass(ctx context.Context) {
	defer close(c.initialized)
	revs, err := c.revisions.List(everything())
	if err != nil {
		return
	}
	keep := make([]string, 0, len(revs))
	for _, r := range revs {
		keep = append(keep, r.Namespace+"/"+r.Name)
		if err := c.reconcileRevision(ctx, r.Namespace, r.Name); err != nil && ctx.Err() == nil {
			c.log.Debug("first pass: revision", "namespace", r.Namespace, "revision", r.Name, "err", err)
		}
	}
	c.opts.Runtime.Retain(keep)
	rts, err := c.routes.List(everything())
	if err != nil {
		return
	}
	for _, r := range rts {
		if err := c.reconcileRoute(ctx, r.Namespace, r.Name); err != nil && ctx.Err() == nil {
			c.log.Debug("first pass: route", "namespace", r.Namespace, "route", r.Name, "err", err)
		}
	}
	if c.domainMappings == nil {
		return
	}
	dms, err := c.domainMappings.List(everything())
	if err != nil {
		return
	}
	for _, d := range dms {
		if err := c.reconcileDomainMapping(ctx, d.Namespace, d.Name); err != nil && ctx.Err() == nil {
			c.log.Debug("first pass: domain mapping", "namespace", d.Namespace, "domainMapping", d.Name, "err", err)
		}
	}
}

// SetDomain replaces config-domain and reconciles every Route (and so
// every DomainMapping) with it: a change applies without a restart.
func (c *Controller) SetDomain(d *routecfg.Domain) {
	c.domain.Store(d)
	rts, err := c.routes.List(everything())
	if err != nil {
		return
	}
	for _, r := range rts {
		c.enqueue(kindRoute, r.Namespace, r.Name)
	}
}

// Initialized is closed once Run has reconciled every Revision and Route it
// found at start once: the routing table is restored.
func (c *Controller) Initialized() <-chan struct{} { return c.initialized }

func (c *Controller) process(ctx context.Context, kind string, q workqueue.RateLimitingInterface, rec func(context.Context, string, string) error) bool {
	item, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(item)
	key := item.(string)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		q.Forget(item)
		return true
	}
	if err := rec(ctx, ns, name); err != nil {
		if apierrors.IsConflict(err) {
			c.log.Debug("reconcile conflict, retrying", "kind", kind, "key", key)
		} else if ctx.Err() == nil {
			c.log.Warn("reconcile failed", "kind", kind, "key", key, "err", err)
		}
		q.AddRateLimited(item)
		return true
	}
	q.Forget(item)
	return true
}

func everything() labels.Selector { return labels.Everything() }
