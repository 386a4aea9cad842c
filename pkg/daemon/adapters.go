package daemon

import (
	"context"
	"errors"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/router"
)

// routerInstances shows the revision manager to the router: the same
// facts in the router's types.
type routerInstances struct{ m *replicas.Manager }

func (a routerInstances) Config(namespace, revision string) (router.RevisionConfig, bool) {
	c, ok := a.m.Config(namespace, revision)
	return router.RevisionConfig(c), ok
}

func (a routerInstances) Endpoints(namespace, revision string) []router.Endpoint {
	eps := a.m.Endpoints(namespace, revision)
	out := make([]router.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = router.Endpoint(ep)
	}
	return out
}

func (a routerInstances) Subscribe(f func(namespace, revision string)) { a.m.Subscribe(f) }

func (a routerInstances) Drained(namespace, revision, endpointID string) {
	a.m.Drained(namespace, revision, endpointID)
}

var _ router.Instances = routerInstances{}

// controllerRuntime shows the revision manager to the Revision reconciler.
type controllerRuntime struct{ *replicas.Manager }

func (a controllerRuntime) Ensure(ctx context.Context, rev *servingv1.Revision) (controller.RevisionState, error) {
	st, err := a.Manager.Ensure(ctx, rev)
	return controller.RevisionState{Ready: st.Ready, Failed: st.Failed, Reason: st.Reason, Message: st.Message,
		ResourcesFailed: st.ResourcesFailed, Actual: st.Actual, HeldReason: st.HeldReason, HeldMessage: st.HeldMessage}, err
}

// Remove begins the removal and returns at once (Retire): the reconciler's
// worker is not held while instances drain and stop.
func (a controllerRuntime) Remove(namespace, name string) error {
	a.Manager.Retire(namespace, name)
	return nil
}

var _ controller.Runtime = controllerRuntime{}

// podSource shows the revision manager's instances to the API as Pods.
type podSource struct{ m *replicas.Manager }

func (a podSource) Pods() []*corev1.Pod { return a.m.Pods() }

func (a podSource) Pod(namespace, name string) (*corev1.Pod, bool) { return a.m.Pod(namespace, name) }

func (a podSource) SubscribePods(f func(namespace, name string)) { a.m.SubscribePods(f) }

// DeletePod: an instance that is gone already is deleted.
func (a podSource) DeletePod(namespace, name string) error {
	if err := a.m.DeletePod(namespace, name); err != nil && !errors.Is(err, replicas.ErrNoInstance) {
		return err
	}
	return nil
}

// OwnerGone: an instance that is gone already is deleted.
func (a podSource) OwnerGone(namespace, name string, owner types.UID) error {
	if err := a.m.OwnerGone(namespace, name, owner); err != nil && !errors.Is(err, replicas.ErrNoInstance) {
		return err
	}
	return nil
}

var _ apiserver.PodSource = podSource{}

// instanceEvents records the revision manager's instance events as the
// kubelet records a pod's: source component "kubelet" and this host.
func instanceEvents(b record.EventBroadcaster) func(corev1.ObjectReference, string, string, string) {
	host, _ := os.Hostname()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: host})
	return func(about corev1.ObjectReference, typ, reason, message string) {
		rec.Event(&about, typ, reason, message)
	}
}
