package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	autoscalerconfig "knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"

	"github.com/knbox/knbox/pkg/autoscaler"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/instance"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci"
	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/routing"
	"github.com/knbox/knbox/pkg/runtime"
)

// dataPlane is the instance manager, the autoscaler and the router, wired
// together: the router reports exact in-flight counts to the autoscaler,
// the autoscaler sets the manager's scale, the manager tells the router
// which instances are ready.
type dataPlane struct {
	images *image.Store
	mgr    *instance.Manager
	as     *autoscaler.Autoscaler
	router *router.Router
	routes *routing.Table
	ascfg  *autoscalerconfig.Config
	apiURL string // for the revisions' logUrl
}

func revKey(ns, name string) string { return ns + "/" + name }

func splitKey(k string) (ns, name string) {
	ns, name, _ = strings.Cut(k, "/")
	return ns, name
}

func newDataPlane(ctx context.Context, cfg *config.Config, ascfg *autoscalerconfig.Config, kube kubernetes.Interface,
	handlers map[string]runtime.Handler, routes *routing.Table, log *slog.Logger) (*dataPlane, error) {
	images, err := image.Open(image.Options{Root: filepath.Join(cfg.DataDir, "images"), Insecure: cfg.InsecureRegistries})
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	dep, err := cfg.Deployment()
	if err != nil {
		return nil, err
	}
	// runc cannot give a container more open files than its own hard limit.
	openFiles := uint64(oci.DefaultOpenFiles)
	if m := oci.MaxOpenFiles(); m < openFiles {
		openFiles = m
	}
	egress, err := setupEgress(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	var nameservers []string
	if egress != nil {
		nameservers = cfg.Egress.Nameservers
		log.Info("egress on: instances reach the outside through NAT", "bridge", egress.Bridge(), "subnet", egress.Subnet(), "nameservers", nameservers)
	}
	mgr, err := instance.New(instance.Options{
		Images:              images,
		Handlers:            handlers,
		DefaultRuntimeClass: cfg.DefaultRuntimeClass,
		RuntimeClassHandler: func(name string) (string, bool) {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rc, err := kube.NodeV1().RuntimeClasses().Get(c, name, metav1.GetOptions{})
			if err != nil {
				return "", false
			}
			return rc.Handler, true
		},
		Lookup:           kubeLookup{kube},
		StateDir:         filepath.Join(cfg.DataDir, "instances"),
		ProgressDeadline: dep.ProgressDeadline,
		Policy:           oci.Policy{OpenFiles: openFiles},
		Egress:           egress,
		Nameservers:      nameservers,
		Logger:           log.With("component", "instance"),
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Recover(ctx); err != nil {
		log.Warn("recovering instances of a previous run", "err", err)
	}
	dp := &dataPlane{images: images, mgr: mgr, routes: routes, ascfg: ascfg}
	dp.as = autoscaler.New(autoscaler.Options{
		Logger: log.With("component", "autoscaler"),
		Ready: func(rev string) int32 {
			ns, name := splitKey(rev)
			return mgr.Ready(ns, name)
		},
		SetScale: func(rev string, desired int32) {
			ns, name := splitKey(rev)
			mgr.SetScale(ns, name, desired)
		},
	})
	dp.router, err = router.New(router.Options{
		Table:     routes,
		Instances: mgr,
		Stats: func(ns, rev string, at time.Time, concurrency, requests float64) {
			dp.as.Record(revKey(ns, rev), at, concurrency, requests)
		},
		Poke:     func(ns, rev string) { dp.as.Poke(revKey(ns, rev)) },
		External: true,
		Logger:   log.With("component", "router"),
	})
	if err != nil {
		return nil, err
	}
	return dp, nil
}

// run drives the router's statistics and the autoscaler until ctx ends.
func (dp *dataPlane) run(ctx context.Context) {
	go dp.router.Run(ctx)
	_ = dp.as.Run(ctx)
}

// runtime is what the Revision reconciler talks to: the instance manager,
// with every revision registered with the autoscaler.
func (dp *dataPlane) runtime() controller.Runtime { return scaledRuntime{dp} }

type scaledRuntime struct{ dp *dataPlane }

func (s scaledRuntime) Resolve(ctx context.Context, rev *servingv1.Revision, image string) (string, error) {
	return s.dp.mgr.Resolve(ctx, rev, image)
}

func (s scaledRuntime) Ensure(ctx context.Context, rev *servingv1.Revision) (controller.RevisionState, error) {
	var cc int64
	if rev.Spec.ContainerConcurrency != nil {
		cc = *rev.Spec.ContainerConcurrency
	}
	// SpecFor always returns a usable spec; its error lists what it ignored.
	spec, _ := autoscaler.SpecFor(s.dp.ascfg, rev.Annotations, cc)
	s.dp.as.Upsert(revKey(rev.Namespace, rev.Name), spec, s.dp.routed(rev.Namespace, rev.Name))
	st, err := s.dp.mgr.Ensure(ctx, rev)
	if s.dp.apiURL != "" {
		// The logs are served by the API: `knbox logs` and any client
		// with the token read them there.
		st.LogURL = s.dp.apiURL + "/apis/serving.knative.dev/v1/namespaces/" + rev.Namespace + "/revisions/" + rev.Name + "/log"
	}
	return st, err
}

func (s scaledRuntime) Remove(ctx context.Context, ns, name string) error {
	s.dp.as.Delete(revKey(ns, name))
	return s.dp.mgr.Remove(ctx, ns, name)
}

func (s scaledRuntime) Subscribe(f func(ns, name string)) { s.dp.mgr.Subscribe(f) }

// routed reports whether any route sends traffic (or a tag) to a revision:
// min-scale applies only to those, as in Knative.
func (dp *dataPlane) routed(ns, name string) bool {
	for _, r := range dp.routes.Routes() {
		if r.Namespace != ns {
			continue
		}
		for _, s := range r.Traffic {
			if s.Revision == name {
				return true
			}
		}
		for _, rev := range r.Tags {
			if rev == name {
				return true
			}
		}
	}
	return false
}

// kubeLookup reads Secrets and ConfigMaps through the API.
type kubeLookup struct{ kube kubernetes.Interface }

func (l kubeLookup) Secret(ns, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (l kubeLookup) ConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// setupEgress returns the egress bridge's handle when egress is on. When it
// is off but an earlier run left attachments (it was on then), those are
// detached and the bridge removed: turning egress off leaves nothing behind.
func setupEgress(ctx context.Context, cfg *config.Config, log *slog.Logger) (*network.Egress, error) {
	ecfg := network.EgressConfig{
		Bridge:     cfg.Egress.Bridge,
		Subnet:     cfg.EgressSubnet(),
		PluginDirs: cfg.Egress.CNIPluginDirs,
		StateDir:   filepath.Join(cfg.DataDir, "cni"),
	}
	if cfg.Egress.Enabled {
		eg, err := network.NewEgress(ecfg)
		if err != nil {
			return nil, fmt.Errorf("egress.enabled: %w", err)
		}
		return eg, nil
	}
	if _, err := os.Stat(ecfg.StateDir); err != nil {
		return nil, nil
	}
	eg, err := network.NewEgress(ecfg)
	if err != nil {
		log.Warn("egress is off, and what an earlier run attached cannot be detached", "err", err)
		return nil, nil
	}
	ids, err := eg.Attached()
	if err != nil {
		log.Warn("egress is off; listing earlier attachments", "err", err)
	}
	for _, id := range ids {
		ns := &network.NS{Name: id, Path: filepath.Join(network.DefaultRoot, id)}
		if err := eg.Detach(ctx, ns); err != nil {
			log.Warn("egress is off; detaching an earlier attachment", "netns", id, "err", err)
		}
	}
	if err := eg.Remove(); err != nil {
		log.Warn("egress is off; removing the bridge", "err", err)
	}
	if err := os.RemoveAll(ecfg.StateDir); err != nil {
		log.Warn("egress is off; removing its state", "err", err)
	}
	return nil, nil
}
