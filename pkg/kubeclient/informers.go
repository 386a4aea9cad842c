package kubeclient

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

// InformerOptions configures Informers; the zero value of each field is a
// documented default.
type InformerOptions struct {
	// Resync is every informer's resync period; 0: no resyncs.
	Resync time.Duration
	// Namespace limits the namespaced kinds to one namespace; "": all.
	// RuntimeClasses, cluster-scoped, ignore it.
	Namespace string
	// Transform changes each object before it is cached (knbox's
	// controller.TrimForCache); nil: objects are cached as listed.
	Transform cache.TransformFunc
	// Tweak changes the options of every list and watch (a label or field
	// selector); nil: all objects.
	Tweak func(*metav1.ListOptions)
}

// Informers hands out one shared informer per kind, as client-go's
// SharedInformerFactory does, for the kinds knbox reads as a client: its
// users ask for a kind's informer (registering it) before Start, and share
// its cache and its watch of the API.
type Informers struct {
	client Interface
	opts   InformerOptions

	mu           sync.Mutex
	informers    map[schema.GroupResource]cache.SharedIndexInformer
	started      map[schema.GroupResource]bool
	shuttingDown bool
	wg           sync.WaitGroup // the informers' Run
}

// Interface is where Informers list and watch: a Clientset; in tests,
// kubeclienttest.Typed adapts client-go's fake clientset.
type Interface interface {
	// ListerWatcher lists and watches resource in namespace ("": in all,
	// or a cluster-scoped resource).
	ListerWatcher(resource schema.GroupResource, namespace string) cache.ListerWatcher
}

// NewInformers returns the Informers that list and watch through client.
func NewInformers(client Interface, opts InformerOptions) *Informers {
	return &Informers{client: client, opts: opts, informers: map[schema.GroupResource]cache.SharedIndexInformer{},
		started: map[schema.GroupResource]bool{}}
}

// Informer is the shared informer of one kind and the lister of its cache.
type Informer[L any] struct {
	informer cache.SharedIndexInformer
	lister   L
}

// Informer is the kind's shared informer.
func (i Informer[L]) Informer() cache.SharedIndexInformer { return i.informer }

// Lister reads the informer's cache.
func (i Informer[L]) Lister() L { return i.lister }

// Secrets is the shared informer of Secrets.
func (f *Informers) Secrets() Informer[corelisters.SecretLister] {
	inf := f.informerFor(corev1.Resource("secrets"), &corev1.Secret{})
	return Informer[corelisters.SecretLister]{inf, corelisters.NewSecretLister(inf.GetIndexer())}
}

// ConfigMaps is the shared informer of ConfigMaps.
func (f *Informers) ConfigMaps() Informer[corelisters.ConfigMapLister] {
	inf := f.informerFor(corev1.Resource("configmaps"), &corev1.ConfigMap{})
	return Informer[corelisters.ConfigMapLister]{inf, corelisters.NewConfigMapLister(inf.GetIndexer())}
}

// ServiceAccounts is the shared informer of ServiceAccounts.
func (f *Informers) ServiceAccounts() Informer[corelisters.ServiceAccountLister] {
	inf := f.informerFor(corev1.Resource("serviceaccounts"), &corev1.ServiceAccount{})
	return Informer[corelisters.ServiceAccountLister]{inf, corelisters.NewServiceAccountLister(inf.GetIndexer())}
}

// ResourceQuotas is the shared informer of ResourceQuotas.
func (f *Informers) ResourceQuotas() Informer[corelisters.ResourceQuotaLister] {
	inf := f.informerFor(corev1.Resource("resourcequotas"), &corev1.ResourceQuota{})
	return Informer[corelisters.ResourceQuotaLister]{inf, corelisters.NewResourceQuotaLister(inf.GetIndexer())}
}

// RuntimeClasses is the shared informer of RuntimeClasses.
func (f *Informers) RuntimeClasses() Informer[nodelisters.RuntimeClassLister] {
	inf := f.informerFor(nodev1.Resource("runtimeclasses"), &nodev1.RuntimeClass{})
	return Informer[nodelisters.RuntimeClassLister]{inf, nodelisters.NewRuntimeClassLister(inf.GetIndexer())}
}

// informerFor returns the informer of resource, whose objects are obj's
// type, making it the first time.
func (f *Informers) informerFor(resource schema.GroupResource, obj runtime.Object) cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[resource]; ok {
		return inf
	}
	ns := f.opts.Namespace
	if resource.Group != corev1.GroupName {
		ns = "" // RuntimeClasses are cluster-scoped
	}
	lw := f.client.ListerWatcher(resource, ns)
	if tweak, all := f.opts.Tweak, lw; tweak != nil {
		lw = &cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				tweak(&o)
				return all.List(o)
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				tweak(&o)
				return all.Watch(o)
			},
		}
	}
	// The namespace index, as client-go's generated informers have.
	inf := cache.NewSharedIndexInformer(lw, obj, f.opts.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(f.opts.Transform) // fails only once started
	f.informers[resource] = inf
	return inf
}

// Start runs, until stop is closed, the informers asked for and not
// started yet; after Shutdown it does nothing.
func (f *Informers) Start(stop <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shuttingDown {
		return
	}
	for r, inf := range f.informers {
		if f.started[r] {
			continue
		}
		f.started[r] = true
		f.wg.Go(func() { inf.Run(stop) })
	}
}

// WaitForCacheSync waits until the started informers have synced, and
// reports whether they all did before stop was closed.
func (f *Informers) WaitForCacheSync(stop <-chan struct{}) bool {
	f.mu.Lock()
	var synced []cache.InformerSynced
	for r, inf := range f.informers {
		if f.started[r] {
			synced = append(synced, inf.HasSynced)
		}
	}
	f.mu.Unlock()
	return cache.WaitForCacheSync(stop, synced...)
}

// Shutdown waits for the started informers to stop (their stop channel
// must be closed for it to return); Start does nothing after it.
func (f *Informers) Shutdown() {
	f.mu.Lock()
	f.shuttingDown = true
	f.mu.Unlock()
	f.wg.Wait()
}
