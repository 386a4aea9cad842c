package apiserver_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/test/ingress"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

func ingressSvc(port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "knative-serving", Name: "knbox-ingress", Labels: map[string]string{"app.kubernetes.io/name": "knbox"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{
			Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: port}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}}},
	}
}

// TestIngressService: the Service describing knbox's ingress is stored at
// start (with its namespace), brought up to date at the next start, read
// as Knative's test framework reads a cluster's ingress, and refused to
// every write.
func TestIngressService(t *testing.T) {
	api := apiservertest.StartWith(t, apiservertest.Options{Server: func(o *apiserver.Options) { o.Ingress = ingressSvc(31080) }})
	e := startEnvFrom(t, api)
	ctx := context.Background()
	svcs := e.kube.CoreV1().Services("knative-serving")

	t.Setenv("GATEWAY_OVERRIDE", "knbox-ingress")
	t.Setenv("GATEWAY_NAMESPACE_OVERRIDE", "knative-serving")
	addr, portMap, err := ingress.GetIngressEndpoint(ctx, e.kube, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1" || portMap("80") != "31080" {
		t.Errorf("GetIngressEndpoint: %s, port 80 -> %s; want 127.0.0.1, 31080", addr, portMap("80"))
	}
	if addr, _, err := ingress.GetIngressEndpoint(ctx, e.kube, ""); err != nil || addr != "127.0.0.1" {
		t.Errorf("GetIngressEndpoint without override: %q, %v; want the load balancer's 127.0.0.1", addr, err)
	}
	if list, err := e.kube.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("list services: %v, %v", list, err)
	}

	// Writes, of every kind, are refused.
	next := ingressSvc(1)
	next.Name = "other"
	_, err = svcs.Create(ctx, next, metav1.CreateOptions{})
	checkNotSupported(t, "create", err)
	cur, err := svcs.Get(ctx, "knbox-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ports[0].NodePort = 1
	_, err = svcs.Update(ctx, cur, metav1.UpdateOptions{})
	checkNotSupported(t, "update", err)
	_, err = svcs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	checkNotSupported(t, "update status", err)
	_, err = svcs.Patch(ctx, "knbox-ingress", types.MergePatchType, []byte(`{"spec":{"type":"ClusterIP"}}`), metav1.PatchOptions{})
	checkNotSupported(t, "patch", err)
	checkNotSupported(t, "delete", svcs.Delete(ctx, "knbox-ingress", metav1.DeleteOptions{}))
	checkNotSupported(t, "deletecollection", e.kube.CoreV1().RESTClient().Delete().Namespace("knative-serving").Resource("services").Do(ctx).Error())

	// The listener moved: the next start says so, keeping the object.
	srv, err := apiserver.New(apiserver.Options{Store: api.Store, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: apiservertest.ServingConfig(t)}, Ingress: ingressSvc(31081)})
	if err != nil {
		t.Fatal(err)
	}
	restart, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := srv.Start(restart); err != nil {
		t.Fatal(err)
	}
	got, err := svcs.Get(ctx, "knbox-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != cur.UID || got.Spec.Ports[0].NodePort != 31081 {
		t.Errorf("after restart: uid %s (was %s), nodePort %d; want the same object with 31081", got.UID, cur.UID, got.Spec.Ports[0].NodePort)
	}
}

func checkNotSupported(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsMethodNotSupported(err) {
		t.Errorf("%s of the ingress service: %v, want 405 MethodNotSupported", what, err)
	}
}
