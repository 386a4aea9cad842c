package autoscaler

import (
	"strings"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	autoscalerconfig "knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"
)

// Revisions is the Autoscaler seen by its Knative clients, with revisions
// named by namespace and name: the Revision reconciler (Upsert, Delete,
// Scale, Subscribe: controller.Scaler) and the revision manager (Desired,
// Subscribe: replicas.Scale). It holds no state of its own.
type Revisions struct {
	a   *Autoscaler
	cfg *autoscalerconfig.Config
}

// Revisions returns the Autoscaler's view for Knative revisions, whose
// annotations are read against cfg (config-autoscaler).
func (a *Autoscaler) Revisions(cfg *autoscalerconfig.Config) *Revisions {
	return &Revisions{a: a, cfg: cfg}
}

// Key is how the Autoscaler names a revision: "namespace/name".
func Key(namespace, name string) string { return namespace + "/" + name }

// SplitKey is the inverse of Key.
func SplitKey(key string) (namespace, name string) {
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}

// Upsert adds or updates a revision with the Spec its annotations and
// containerConcurrency give (annotations in error are ignored, each
// falling back to config-autoscaler, as SpecFor says).
func (r *Revisions) Upsert(rev *servingv1.Revision, reachable bool) {
	var cc int64
	if rev.Spec.ContainerConcurrency != nil {
		cc = *rev.Spec.ContainerConcurrency
	}
	spec, _ := SpecFor(r.cfg, rev.Annotations, cc)
	r.a.Upsert(Key(rev.Namespace, rev.Name), spec, reachable)
}

// Delete forgets a revision.
func (r *Revisions) Delete(namespace, name string) { r.a.Delete(Key(namespace, name)) }

// Scale returns the last decision on a revision: desired scale and
// activity; ok is false while the revision is unknown.
func (r *Revisions) Scale(namespace, name string) (desired int32, active, ok bool) {
	d, ok := r.a.Status(Key(namespace, name))
	return d.Desired, d.Active, ok
}

// Desired is a revision's desired scale; false while it is unknown.
func (r *Revisions) Desired(namespace, name string) (int32, bool) {
	d, ok := r.a.Status(Key(namespace, name))
	return d.Desired, ok
}

// Subscribe registers f, called when a revision's desired scale or
// activity changes; see Autoscaler.Subscribe.
func (r *Revisions) Subscribe(f func(namespace, name string)) {
	r.a.Subscribe(func(rev string) { f(SplitKey(rev)) })
}
