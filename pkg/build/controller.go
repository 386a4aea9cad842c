package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/kubeclient"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
)

// Pod labels of a build's pod.
const (
	// LabelNamespace and LabelBuild name the Build a pod runs.
	LabelNamespace = "build.knative.dev/namespace"
	LabelBuild     = "build.knative.dev/buildName"
)

// BuildLogGroup is the log store group of a Build's steps' output: no
// Revision has this name (a Revision's name cannot start with "_").
func BuildLogGroup(name string) string { return "_build." + name }

// DefaultHandler is the runtime handler of builds when knbox has no
// default RuntimeClass.
const DefaultHandler = "runc"

// Pods is what the controller needs of the pod runtime.
type Pods interface {
	Run(ctx context.Context, spec pod.Spec) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	Status(id string) (pod.Status, bool)
	Subscribe(f func(id string))
	Handler(name string) (pod.HandlerInfo, bool)
}

// Logs lays out the steps' log files, and removes a deleted Build's.
type Logs interface {
	Path(namespace, name, id string) (string, error)
	Remove(namespace, name string) error
}

// Options configure a Controller.
type Options struct {
	// Client reads and writes Builds (and their status).
	Client dynamic.Interface
	// Informers are the shared informers of the core and node APIs:
	// Secrets, ConfigMaps, ServiceAccounts and RuntimeClasses come from their
	// caches. New registers its informers; start them after that.
	Informers *kubeclient.Informers
	Pods      Pods
	Logs      Logs
	// DefaultRuntimeClass is the RuntimeClass whose handler runs the steps
	// of a Build that names none (buildv1alpha1.RuntimeClassAnnotation;
	// "": DefaultHandler).
	DefaultRuntimeClass string
	// Sources keeps uploaded source archives (nil: Builds with
	// source.upload wait forever and uploads are refused).
	Sources *Sources
	// SourceLimits bound what an archive unpacks to in the workspace.
	SourceLimits image.ArchiveLimits
	// Git bounds the clone of a Build's source.git (into the workspace,
	// with the build pod's network view, before the first step; its
	// checkout is bounded by SourceLimits).
	Git GitLimits
	// Registry, when set, gives the steps credentials for knbox's embedded
	// registry (see RegistryAccess).
	Registry *RegistryAccess
	// StopGrace is the grace period of a step stopped at the timeout (0:
	// DefaultStopGrace).
	StopGrace time.Duration
	Logger    *slog.Logger
}

// DefaultStopGrace is the time between SIGTERM and SIGKILL of a step that
// is stopped.
const DefaultStopGrace = 5 * time.Second

// GVR is the Build resource.
var GVR = buildv1alpha1.SchemeGroupVersion.WithResource("builds")

// Controller runs Builds.
type Controller struct {
	opts     Options
	log      *slog.Logger
	queue    workqueue.RateLimitingInterface
	informer cache.SharedIndexInformer
	secrets  corelisters.SecretLister
	cms      corelisters.ConfigMapLister
	sas      corelisters.ServiceAccountLister
	rcs      nodelisters.RuntimeClassLister

	mu   sync.Mutex
	pods map[string]string // pod id -> namespace/name of builds this process runs
	// ended holds the pods of builds this process ended, so that an
	// informer that has not seen the end yet does not start them again.
	ended map[string]string // pod id -> namespace/name
}

// New builds a Controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Informers == nil || opts.Pods == nil || opts.Logs == nil {
		return nil, errors.New("build: Client, Informers, Pods and Logs are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = DefaultStopGrace
	}
	c := &Controller{
		opts:    opts,
		log:     opts.Logger,
		queue:   workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), "Build"),
		secrets: opts.Informers.Secrets().Lister(),
		cms:     opts.Informers.ConfigMaps().Lister(),
		sas:     opts.Informers.ServiceAccounts().Lister(),
		rcs:     opts.Informers.RuntimeClasses().Lister(),
		pods:    map[string]string{},
		ended:   map[string]string{},
	}
	c.informer = kubeclient.NewDynamicInformer(opts.Client, GVR, 10*time.Minute)
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok && opts.Sources != nil {
				opts.Sources.remove(u.GetUID())
			}
			enqueue(obj)
		},
	})
	opts.Pods.Subscribe(func(id string) {
		c.mu.Lock()
		key, ok := c.pods[id]
		c.mu.Unlock()
		if ok {
			c.queue.Add(key)
		}
	})
	return c, nil
}

// Run serves until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	go c.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return errors.New("build: informer did not sync")
	}
	if c.opts.Sources != nil {
		uids := map[types.UID]bool{}
		for _, o := range c.informer.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				uids[u.GetUID()] = true
			}
		}
		c.opts.Sources.keep(uids)
	}
	var wg sync.WaitGroup
	for i := 0; i < max(workers, 1); i++ {
		wg.Go(func() {
			for c.process(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) process(ctx context.Context) bool {
	item, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(item)
	key := item.(string)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.queue.Forget(item)
		return true
	}
	after, err := c.reconcile(ctx, ns, name)
	switch {
	case err != nil:
		if ctx.Err() == nil && !apierrors.IsConflict(err) {
			c.log.Warn("reconcile build", "namespace", ns, "build", name, "err", err)
		}
		c.queue.AddRateLimited(item)
	case after > 0:
		c.queue.Forget(item)
		c.queue.AddAfter(item, after)
	default:
		c.queue.Forget(item)
	}
	return true
}

// PodID is the pod a Build's steps run in: named after its UID, so that a
// Build deleted and made again under its name gets a pod of its own.
func PodID(b *buildv1alpha1.Build) string { return "build-" + strings.ToLower(string(b.UID)) }

func (c *Controller) get(ns, name string) (*buildv1alpha1.Build, error) {
	obj, exists, err := c.informer.GetStore().GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return nil, err
	}
	b := &buildv1alpha1.Build{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, b); err != nil {
		return nil, fmt.Errorf("decode build %s/%s: %w", ns, name, err)
	}
	return b, nil
}

// reconcile converges one Build; after > 0 asks to be called again then
// (the timeout).
func (c *Controller) reconcile(ctx context.Context, ns, name string) (after time.Duration, err error) {
	cur, err := c.get(ns, name)
	if err != nil {
		return 0, err
	}
	if cur == nil || cur.DeletionTimestamp != nil {
		c.stopBuildPods(ctx, ns, name)
		if cur == nil {
			if err := c.opts.Logs.Remove(ns, BuildLogGroup(name)); err != nil {
				c.log.Warn("remove a deleted build's logs", "namespace", ns, "build", name, "err", err)
			}
		}
		return 0, nil
	}
	id := PodID(cur)
	b := cur.DeepCopy()
	if b.Status.IsDone() {
		c.mu.Lock()
		delete(c.ended, id) // the informer shows the end now
		c.mu.Unlock()
		c.stop(ctx, id)
		if c.opts.Sources != nil {
			c.opts.Sources.remove(b.UID)
		}
		return 0, nil
	}
	b.Status.InitializeConditions()
	timeout := buildv1alpha1.DefaultTimeout
	if b.Spec.Timeout != nil && b.Spec.Timeout.Duration > 0 {
		timeout = b.Spec.Timeout.Duration
	}
	st, running := c.opts.Pods.Status(id)
	c.mu.Lock()
	_, ours := c.pods[id]
	_, ended := c.ended[id]
	c.mu.Unlock()
	now := time.Now()
	switch {
	case !running && ended:
		// Ended by this process; the informer will show it.
		return time.Second, nil
	case !running && b.Status.StartTime != nil:
		// Started by an earlier knbox (or its pod vanished): builds are
		// not resumed.
		c.complete(b, now)
		b.Status.MarkFailed(buildv1alpha1.ReasonBuildInterrupted, "knbox stopped while the build ran; builds are not resumed: create the Build again")
		return 0, c.updateStatus(ctx, cur, b)
	case !running && waitsForSource(b) && (c.opts.Sources == nil || !c.opts.Sources.has(b.UID)):
		b.Status.MarkRunning(buildv1alpha1.ReasonWaitingForSource, fmt.Sprintf(
			"waiting for the source: PUT a tar or tar.gz archive to /apis/build.knative.dev/v1alpha1/namespaces/%s/builds/%s/source", ns, name))
		return 0, c.updateStatus(ctx, cur, b)
	case !running:
		spec, err := c.podSpec(b, id)
		if err == nil {
			c.registryCredentials(ctx, b, timeout, &spec)
		}
		if err == nil {
			c.mu.Lock()
			c.pods[id] = ns + "/" + name
			c.mu.Unlock()
			err = c.opts.Pods.Run(ctx, spec)
		}
		if err != nil {
			c.forget(id)
			b.Status.StartTime = &metav1.Time{Time: now}
			c.complete(b, now)
			b.Status.MarkFailed(buildv1alpha1.ReasonBuildCannotRun, err.Error())
			return 0, c.updateStatus(ctx, cur, b)
		}
		c.log.Info("build started", "namespace", ns, "build", name, "pod", id, "handler", spec.Handler, "steps", len(spec.Containers))
		b.Status.StartTime = &metav1.Time{Time: now}
		b.Status.PodName = id
		b.Status.StepStates = nil
		b.Status.MarkRunning(buildv1alpha1.ReasonBuilding, "the build's steps run")
		return timeout, c.updateStatus(ctx, cur, b)
	case !ours:
		// A pod of this build that this process did not start: not ours
		// to judge; stop it.
		c.stop(ctx, id)
		return time.Second, nil
	}

	c.stepStates(b, st)
	if b.Status.StartTime == nil {
		// Our pod runs, and the informer has not seen the status that
		// says so yet.
		b.Status.StartTime = &metav1.Time{Time: st.Created}
		b.Status.PodName = id
	}
	deadline := b.Status.StartTime.Add(timeout)
	switch {
	case st.Done && st.Succeeded:
		c.complete(b, now)
		b.Status.MarkSucceeded()
	case st.Done && st.LastFailure != nil && st.LastFailure.Reason == pod.ReasonSeedFailed && b.Spec.Source != nil && b.Spec.Source.Git != nil:
		c.complete(b, now)
		b.Status.MarkFailed(ReasonGitCloneFailed, strings.TrimPrefix(st.LastFailure.Message, "volume "+buildv1alpha1.WorkspaceVolume+": "))
	case st.Done:
		c.complete(b, now)
		b.Status.MarkFailed(buildv1alpha1.ReasonBuildFailed, failureMessage(b, st))
	case !now.Before(deadline):
		c.complete(b, now)
		b.Status.MarkFailed(buildv1alpha1.ReasonBuildTimeout, fmt.Sprintf("the build ran past its timeout of %v and was stopped", timeout))
		for i := range b.Status.StepStates {
			if b.Status.StepStates[i].Running != nil {
				b.Status.StepStates[i] = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: buildv1alpha1.ReasonBuildTimeout, Message: "stopped at the build's timeout",
					StartedAt: b.Status.StepStates[i].Running.StartedAt, FinishedAt: metav1.NewTime(now)}}
			}
		}
	default:
		if msg := runningMessage(b, st); msg != "" {
			b.Status.MarkRunning(buildv1alpha1.ReasonBuilding, msg)
		}
		return deadline.Sub(now), c.updateStatus(ctx, cur, b)
	}
	if err := c.updateStatus(ctx, cur, b); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.ended[id] = ns + "/" + name
	c.mu.Unlock()
	c.log.Info("build ended", "namespace", ns, "build", name, "succeeded", b.Status.Succeeded().Status, "reason", b.Status.Succeeded().Reason)
	c.stop(ctx, id)
	return 0, nil
}

// waitsForSource tells whether the Build's workspace is an upload.
func waitsForSource(b *buildv1alpha1.Build) bool {
	return b.Spec.Source != nil && b.Spec.Source.Upload != nil
}

// complete sets the completion time.
func (c *Controller) complete(b *buildv1alpha1.Build, now time.Time) {
	b.Status.CompletionTime = &metav1.Time{Time: now}
}

// stepStates copies the pod's containers' states into the Build.
func (c *Controller) stepStates(b *buildv1alpha1.Build, st pod.Status) {
	if len(st.Containers) == 0 {
		return
	}
	b.Status.StepStates = st.Containers
	b.Status.StepsCompleted = nil
	for i, cs := range st.Containers {
		if t := cs.Terminated; t != nil && t.ExitCode == 0 && t.Reason == pod.ReasonCompleted && i < len(b.Spec.Steps) {
			b.Status.StepsCompleted = append(b.Status.StepsCompleted, b.Spec.Steps[i].Name)
		}
	}
}

// failureMessage says which step failed and its termination message.
func failureMessage(b *buildv1alpha1.Build, st pod.Status) string {
	f := st.LastFailure
	if f == nil {
		return "the build failed"
	}
	if f.Container == "" {
		return fmt.Sprintf("%s: %s", f.Reason, f.Message)
	}
	how := fmt.Sprintf("exit code %d", f.ExitCode)
	if f.OOMKilled {
		how = "OOMKilled"
	}
	if f.Reason != pod.ReasonError {
		how = f.Reason
	}
	return fmt.Sprintf("step %q failed (%s): %s", f.Container, how, f.Message)
}

// runningMessage says which step runs.
func runningMessage(b *buildv1alpha1.Build, st pod.Status) string {
	if st.Pulling {
		return "pulling the steps' images"
	}
	if len(st.Containers) == 0 && b.Spec.Source != nil && b.Spec.Source.Git != nil {
		return "cloning " + b.Spec.Source.Git.URL
	}
	for i, cs := range st.Containers {
		if cs.Running != nil && i < len(b.Spec.Steps) {
			return fmt.Sprintf("step %q (%d of %d) runs", b.Spec.Steps[i].Name, i+1, len(b.Spec.Steps))
		}
	}
	return ""
}

func (c *Controller) updateStatus(ctx context.Context, cur, want *buildv1alpha1.Build) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	want.Status.ObservedGeneration = want.Generation
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(buildv1alpha1.SchemeGroupVersion.String())
	u.SetKind("Build")
	_, err = c.opts.Client.Resource(GVR).Namespace(want.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// stop removes a build's pod in the background (its log stays).
func (c *Controller) stop(ctx context.Context, id string) {
	if _, ok := c.opts.Pods.Status(id); !ok {
		c.forget(id)
		return
	}
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := c.opts.Pods.Stop(sctx, id, c.opts.StopGrace); err != nil {
			c.log.Warn("stop a build's pod", "pod", id, "err", err)
		}
		c.forget(id)
	}()
}

func (c *Controller) forget(id string) {
	c.mu.Lock()
	delete(c.pods, id)
	c.mu.Unlock()
}

// stopBuildPods stops the pods of a deleted Build.
func (c *Controller) stopBuildPods(ctx context.Context, ns, name string) {
	c.mu.Lock()
	var ids []string
	for id, key := range c.pods {
		if key == ns+"/"+name {
			ids = append(ids, id)
		}
	}
	for id, key := range c.ended {
		if key == ns+"/"+name {
			delete(c.ended, id)
		}
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.stop(ctx, id)
	}
}

// podSpec assembles a Build's pod: its steps in order, the workspace and
// its volumes, the handler of the default RuntimeClass.
func (c *Controller) podSpec(b *buildv1alpha1.Build, id string) (pod.Spec, error) {
	handler, err := c.handler(b)
	if err != nil {
		return pod.Spec{}, err
	}
	logPath, err := c.opts.Logs.Path(b.Namespace, BuildLogGroup(b.Name), id)
	if err != nil {
		return pod.Spec{}, err
	}
	spec := pod.Spec{
		ID:          id,
		Labels:      map[string]string{LabelNamespace: b.Namespace, LabelBuild: b.Name},
		Handler:     handler,
		LogPath:     logPath,
		Sequential:  true,
		GracePeriod: c.opts.StopGrace,
		Volumes:     []pod.Volume{{Name: buildv1alpha1.WorkspaceVolume, EmptyDir: true}},
	}
	switch src := b.Spec.Source; {
	case waitsForSource(b):
		spec.Volumes[0].Seed = &pod.Seed{Path: c.opts.Sources.path(b.UID), Limits: c.opts.SourceLimits}
	case src != nil && src.Git != nil:
		tmp := "" // os.TempDir
		if c.opts.Sources != nil {
			tmp = c.opts.Sources.dir
		}
		lim := c.opts.SourceLimits
		lim.What = "git checkout"
		spec.Volumes[0].Seed = &pod.Seed{Fill: gitSeed(*src.Git, c.opts.Git, lim, tmp)}
	}
	for i := range b.Spec.Steps {
		s := b.Spec.Steps[i].DeepCopy()
		mounted := false
		for _, m := range s.VolumeMounts {
			mounted = mounted || m.Name == buildv1alpha1.WorkspaceVolume
		}
		if !mounted {
			s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: buildv1alpha1.WorkspaceVolume, MountPath: buildv1alpha1.WorkspacePath})
		}
		if s.WorkingDir == "" {
			s.WorkingDir = buildv1alpha1.WorkspacePath
		}
		spec.Containers = append(spec.Containers, *s)
		spec.Images = append(spec.Images, s.Image)
	}
	if len(spec.Containers) > 1 {
		if info, ok := c.opts.Pods.Handler(handler); ok && !info.MultiContainer {
			return pod.Spec{}, fmt.Errorf("runtime handler %q runs one container per pod; a build of %d steps needs an OCI runtime such as runc or runsc", handler, len(spec.Containers))
		}
	}
	for _, v := range b.Spec.Volumes {
		pv, err := c.volume(b.Namespace, v)
		if err != nil {
			return pod.Spec{}, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		spec.Volumes = append(spec.Volumes, pv)
	}
	spec.PullSecrets = c.pullSecrets(b)
	return spec, nil
}

// handler resolves the Build's RuntimeClass (its annotation, which
// admission defaults and checks against the namespace's policy, else the
// server's default) to a runtime handler.
func (c *Controller) handler(b *buildv1alpha1.Build) (string, error) {
	class := b.Annotations[buildv1alpha1.RuntimeClassAnnotation]
	if class == "" {
		class = c.opts.DefaultRuntimeClass
	}
	name := DefaultHandler
	if class != "" {
		rc, err := c.rcs.Get(class)
		if err != nil {
			return "", fmt.Errorf("RuntimeClass %q: %w", class, err)
		}
		name = rc.Handler
	}
	if _, ok := c.opts.Pods.Handler(name); !ok {
		return "", fmt.Errorf("runtime handler %q is not available on this host", name)
	}
	return name, nil
}

func (c *Controller) volume(ns string, v corev1.Volume) (pod.Volume, error) {
	switch {
	case v.EmptyDir != nil:
		return pod.Volume{Name: v.Name, EmptyDir: true, Medium: v.EmptyDir.Medium, SizeLimit: v.EmptyDir.SizeLimit}, nil
	case v.Secret != nil:
		s, err := c.secrets.Secrets(ns).Get(v.Secret.SecretName)
		if err != nil {
			return pod.Volume{}, err
		}
		data := map[string][]byte{}
		maps.Copy(data, s.Data)
		files, err := keyFiles(data, v.Secret.Items, v.Secret.DefaultMode)
		return pod.Volume{Name: v.Name, Files: files}, err
	case v.ConfigMap != nil:
		cm, err := c.cms.ConfigMaps(ns).Get(v.ConfigMap.Name)
		if err != nil {
			return pod.Volume{}, err
		}
		data := map[string][]byte{}
		maps.Copy(data, cm.BinaryData)
		for k, d := range cm.Data {
			data[k] = []byte(d)
		}
		files, err := keyFiles(data, v.ConfigMap.Items, v.ConfigMap.DefaultMode)
		return pod.Volume{Name: v.Name, Files: files}, err
	}
	return pod.Volume{}, errors.New("not an emptyDir, secret or configMap volume")
}

// keyFiles lays out a Secret's or ConfigMap's keys (or the listed items)
// as files.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, defMode *int32) (map[string]pod.File, error) {
	mode := os.FileMode(0o644)
	if defMode != nil {
		mode = os.FileMode(*defMode & 0o777)
	}
	files := map[string]pod.File{}
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			files[k] = pod.File{Data: data[k], Mode: mode}
		}
		return files, nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("no key %q", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode & 0o777)
		}
		files[it.Path] = pod.File{Data: d, Mode: m}
	}
	return files, nil
}

// pullSecrets are the imagePullSecrets of the Build's ServiceAccount.
func (c *Controller) pullSecrets(b *buildv1alpha1.Build) []corev1.Secret {
	name := b.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	sa, err := c.sas.ServiceAccounts(b.Namespace).Get(name)
	if err != nil {
		return nil
	}
	var out []corev1.Secret
	for _, ref := range sa.ImagePullSecrets {
		if s, err := c.secrets.Secrets(b.Namespace).Get(ref.Name); err == nil {
			out = append(out, *s)
		}
	}
	return out
}

// Network returns the pod runtime's network hook for build pods: the
// registries forwarded into the pod's namespace; nil, nil for other pods.
func Network(registries []netip.AddrPort, log *slog.Logger) func(ctx context.Context, spec *pod.Spec, ns *network.NS) (io.Closer, error) {
	return func(_ context.Context, spec *pod.Spec, ns *network.NS) (io.Closer, error) {
		if !IsBuildPod(spec.Labels) || len(registries) == 0 {
			return nil, nil
		}
		return Forward(ns, registries, log.With("pod", spec.ID))
	}
}

// IsBuildPod tells whether a pod's labels are a build's.
func IsBuildPod(labels map[string]string) bool { return labels[LabelBuild] != "" }
