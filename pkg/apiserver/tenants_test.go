package apiserver_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/store"
)

// TestResourceQuotaStatus: the server keeps status.hard and status.used of
// a ResourceQuota up to date (object counts from the store, instances from
// the Ledger), and refuses creates beyond hard with Kubernetes' message.
func TestResourceQuotaStatus(t *testing.T) {
	api := apiservertest.StartWith(t, apiservertest.Options{Store: store.Options{}})
	e := startEnvFrom(t, api)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"configmaps": resource.MustParse("2"), "pods": resource.MustParse("3"), "limits.cpu": resource.MustParse("2"), "requests.storage": resource.MustParse("1Gi"),
	}}}
	if _, err := e.kube.CoreV1().ResourceQuotas("team").Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	used := func(name string) string {
		got, err := e.kube.CoreV1().ResourceQuotas("team").Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Status.Hard[corev1.ResourceName(name)]; !ok {
			return "<no hard>"
		}
		q, ok := got.Status.Used[corev1.ResourceName(name)]
		if !ok {
			return "<unset>"
		}
		return q.String()
	}
	waitUsed := func(name, want string) {
		t.Helper()
		eventually(t, 10*time.Second, name+" used "+want, func() bool { return used(name) == want })
	}
	waitUsed("configmaps", "0")
	waitUsed("requests.storage", "0")
	for _, name := range []string{"a", "b"} {
		if _, err := e.kube.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.kube.CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: q, requested: configmaps=1, used: configmaps=2, limited: configmaps=2") {
		t.Fatalf("third configmap: %v", err)
	}
	waitUsed("configmaps", "2")
	if err := e.kube.CoreV1().ConfigMaps("team").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed("configmaps", "1")

	// Instances count through the Ledger the runtime reserves with.
	pod := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("1500m")}}}}}
	_, release, err := api.Server.Ledger().Reserve(ctx, "team", pod)
	if err != nil {
		t.Fatal(err)
	}
	waitUsed("limits.cpu", "1500m")
	waitUsed("pods", "1")
	if _, _, err := api.Server.Ledger().Reserve(ctx, "team", pod); err == nil || !strings.Contains(err.Error(), "limited: limits.cpu=2") {
		t.Fatalf("second instance: %v", err)
	}
	release()
	waitUsed("limits.cpu", "0")

	// A user's status write is put right again.
	got, err := e.kube.CoreV1().ResourceQuotas("team").Get(ctx, "q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Used["configmaps"] = resource.MustParse("0")
	if _, err := e.kube.CoreV1().ResourceQuotas("team").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed("configmaps", "1")

	// kubectl get quota: Request and Limit columns with used/hard.
	code, body := e.do("GET", "/api/v1/namespaces/team/resourcequotas", "", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if code != 200 || !strings.Contains(string(body), "configmaps: 1/2") || !strings.Contains(string(body), "limits.cpu: 0/2") {
		t.Errorf("table: %d %s", code, body)
	}
}

// TestObjectCountQuotaUnderConcurrency: concurrent creates never take more
// than hard.
func TestObjectCountQuotaUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/secrets": resource.MustParse("3")}}}
	if _, err := e.kube.CoreV1().ResourceQuotas("default").Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		created  int
		refusals int
	)
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-"}}, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case apierrors.IsForbidden(err):
				refusals++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if created != 3 || refusals != 9 {
		t.Errorf("%d created, %d refused; want 3 and 9", created, refusals)
	}
}

// TestQuotaAndLimitRangeBadInput: what Kubernetes refuses, refused alike.
func TestQuotaAndLimitRangeBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/api/v1/namespaces/default/resourcequotas", `{"metadata":{"name":"q"},"spec":{"hard":{"cpu":"two"}}}`, 400, "quantities must match the regular expression"},
		{"/api/v1/namespaces/default/resourcequotas", `{"metadata":{"name":"q"},"spec":{"hard":{"cpus":"2"}}}`, 422, "spec.hard[cpus]: Invalid value: \\\"cpus\\\": must be a standard resource for quota"},
		{"/api/v1/namespaces/default/resourcequotas", `{"metadata":{"name":"q"},"spec":{"hard":{"memory":"-1Gi"}}}`, 422, "must be greater than or equal to 0"},
		{"/api/v1/namespaces/default/limitranges", `{"metadata":{"name":"l"},"spec":{"limits":[{"type":"Container","max":{"cpu":"1"},"min":{"cpu":"2"}}]}}`, 422, "min value 2 is greater than max value 1"},
		{"/api/v1/namespaces", `{"metadata":{"name":"n","labels":{"pod-security.kubernetes.io/enforce":"strict"}}}`, 422, "pod-security.kubernetes.io/enforce"},
	} {
		code, body := e.do("POST", tt.path, "application/json", []byte(tt.body))
		if code != tt.code || !strings.Contains(string(body), tt.want) {
			t.Errorf("POST %s %s: %d %s\nwant %d with %q", tt.path, tt.body, code, body, tt.code, tt.want)
		}
	}
}

// TestQuotaCountsRuntimeClassOverhead: admission counts a RuntimeClass's
// overhead.podFixed in an instance's quota usage (PodOverhead), and the
// refusal names the total.
func TestQuotaCountsRuntimeClassOverhead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "runsc", Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{"cpu": resource.MustParse("300m")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Handler: "runc"},
	} {
		if _, err := e.kube.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"limits.cpu": resource.MustParse("1")}}}
	if _, err := e.kube.CoreV1().ResourceQuotas("default").Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := func(name, class string) *servingv1.Service {
		s := ksvc(name, "img")
		s.Spec.Template.Spec.RuntimeClassName = &class
		s.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"cpu": resource.MustParse("800m")}
		return s
	}
	if _, err := e.serving.ServingV1().Services("default").Create(ctx, svc("plain", "plain"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("800m without overhead under 1: %v", err)
	}
	_, err := e.serving.ServingV1().Services("default").Create(ctx, svc("sandboxed", "sandboxed"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: q, requested: limits.cpu=1100m") {
		t.Fatalf("800m plus 300m overhead under 1: %v", err)
	}
}
