package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	serving "knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	servinginformers "knative.dev/serving/pkg/client/informers/externalversions"
	servinglisters "knative.dev/serving/pkg/client/listers/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/autoscaler"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/console"
	"github.com/knbox/knbox/pkg/metrics"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/router"
	"github.com/knbox/knbox/pkg/tracing"
)

// openAccessLog returns where the access log goes: nil when it is off,
// knbox's standard error, or the configured file (appended to, 0600);
// close closes the file.
func openAccessLog(c config.AccessLog) (w io.Writer, close func(), err error) {
	if !c.Enabled {
		return nil, func() {}, nil
	}
	if c.Path == "" {
		return os.Stderr, func() {}, nil
	}
	f, err := os.OpenFile(c.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("observability.accessLog.path: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}

// revisionLabels gives the metrics each revision's Service and
// Configuration, from an informer on Revisions started once the API
// serves, and tells them when a revision is deleted.
type revisionLabels struct {
	lister atomic.Pointer[servinglisters.RevisionLister]
}

func (l *revisionLabels) labels(namespace, revision string) (service, configuration string) {
	p := l.lister.Load()
	if p == nil {
		return "", ""
	}
	rev, err := (*p).Revisions(namespace).Get(revision)
	if err != nil {
		return "", ""
	}
	return rev.Labels[serving.ServiceLabelKey], rev.Labels[serving.ConfigurationLabelKey]
}

// revisionNames is the transform of revisionLabels' informer: of a
// Revision it keeps what labels and Forget read (namespace, name, labels)
// and what the informer itself needs (resourceVersion, uid), not the spec
// and status that the controllers' own informer already caches. It never
// writes to its argument: client-go v0.29 passes cached objects to it again
// on every resync.
func revisionNames(obj any) (any, error) {
	rev, ok := obj.(*servingv1.Revision)
	if !ok { // a cache.DeletedFinalStateUnknown: its object was trimmed
		return obj, nil
	}
	return &servingv1.Revision{TypeMeta: rev.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: rev.Namespace, Name: rev.Name,
		UID: rev.UID, ResourceVersion: rev.ResourceVersion, Labels: rev.Labels}}, nil
}

// start runs the informer until ctx ends; deleted revisions are forgotten
// by m.
func (l *revisionLabels) start(ctx context.Context, client servingclient.Interface, m *metrics.Metrics) (servinginformers.SharedInformerFactory, error) {
	f := servinginformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, servinginformers.WithTransform(revisionNames))
	revs := f.Serving().V1().Revisions()
	if _, err := revs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if rev, ok := obj.(*servingv1.Revision); ok {
				m.Forget(ctx, rev.Namespace, rev.Name)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("revision informer: %w", err)
	}
	lister := revs.Lister()
	l.lister.Store(&lister)
	f.Start(ctx.Done())
	return f, nil
}

// observeAPI passes the API server's request records to the metrics.
func observeAPI(m *metrics.Metrics) func(apiserver.RequestRecord) {
	return func(r apiserver.RequestRecord) { m.ObserveAPIRequest(metrics.APIRequest(r)) }
}

// addCollectors registers what the metrics read from the router, the
// autoscaler and the pod runtime when scraped, and follows the pods for
// their cold starts.
func addCollectors(m *metrics.Metrics, rt *router.Router, as *autoscaler.Autoscaler, mgr *replicas.Manager, pods *pod.Runtime) error {
	if err := m.Register(rt.Collector()); err != nil {
		return err
	}
	// The prepared sandboxes (limits.preparedSandboxes) are not instances:
	// they show only as these two gauges, read when scraped.
	for _, g := range []struct {
		name, help string
		read       func() float64
	}{
		{"knbox_prepared_sandboxes", "Sandboxes prepared ahead of a request (containers created, not started).",
			func() float64 { n, _ := mgr.PreparedSandboxes(); return float64(n) }},
		{"knbox_prepared_sandboxes_memory_bytes", "Measured memory (PSS) of the prepared sandboxes, as limits.preparedSandboxes.memory counts it.",
			func() float64 { _, b := mgr.PreparedSandboxes(); return float64(b) }},
	} {
		if err := m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, g.read)); err != nil {
			return err
		}
	}
	if err := m.AddQueues(func() []metrics.Queue {
		var out []metrics.Queue
		rt.Load(func(ns, rev string, inflight, _, _ int) {
			out = append(out, metrics.Queue{Namespace: ns, Revision: rev, Depth: inflight})
		})
		return out
	}); err != nil {
		return err
	}
	if err := m.AddAutoscaler(func() []metrics.Scale {
		var out []metrics.Scale
		as.Each(func(key string, spec autoscaler.Spec, d autoscaler.Decision) {
			ns, rev := autoscaler.SplitKey(key)
			out = append(out, metrics.Scale{Namespace: ns, Revision: rev, Desired: d.Desired, Requested: d.Desired,
				StableConcurrency: d.ObservedStable, PanicConcurrency: d.ObservedPanic, TargetConcurrency: spec.Target, Panic: d.Panic})
		})
		// Ready instances are the manager's; asked outside the
		// autoscaler's lock.
		for i := range out {
			out[i].Actual = mgr.Ready(out[i].Namespace, out[i].Revision)
		}
		return out
	}); err != nil {
		return err
	}
	if err := m.AddInstances(func() []metrics.Instance {
		sts := pods.List()
		out := make([]metrics.Instance, 0, len(sts))
		for _, st := range sts {
			ns, rev := st.Labels[replicas.LabelNamespace], st.Labels[replicas.LabelRevision]
			if ns == "" || rev == "" {
				continue
			}
			out = append(out, metrics.Instance{ID: st.ID, Namespace: ns, Revision: rev, Restarts: st.Restarts})
		}
		return out
	}, metrics.Cgroups{}); err != nil {
		return err
	}
	pods.Subscribe(func(id string) {
		st, ok := pods.Status(id)
		s := metrics.InstanceStatus{ID: id, Gone: !ok}
		if ok {
			s.Namespace, s.Revision = st.Labels[replicas.LabelNamespace], st.Labels[replicas.LabelRevision]
			s.Created, s.Ready = st.Created, st.Ready
			if s.Namespace == "" || s.Revision == "" {
				return
			}
		}
		m.InstanceChanged(s)
	})
	return nil
}

// metricsServer serves /metrics over plain HTTP (observability.metricsAddr).
func metricsServer(m *metrics.Metrics) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
}

// consoleTotals gives the console's graphs the metrics' totals.
func consoleTotals(m *metrics.Metrics) func() ([]console.Totals, error) {
	return func() ([]console.Totals, error) {
		ts, err := m.Totals()
		out := make([]console.Totals, len(ts))
		for i, t := range ts {
			out[i] = console.Totals{Namespace: t.Namespace, Revision: t.Revision, Requests: t.Requests, Latency: t.Latency, Instances: t.Instances}
		}
		return out, err
	}
}

// newTracer returns the tracer that config-tracing asks for, nil when its
// backend is none (the default).
func newTracer(cfg *config.Config) (*tracing.Tracer, error) {
	tc, err := cfg.Tracing()
	if err != nil {
		return nil, err
	}
	return tracing.New(tracing.Config{Backend: string(tc.Backend), ZipkinEndpoint: tc.ZipkinEndpoint, SampleRate: tc.SampleRate, Debug: tc.Debug})
}
