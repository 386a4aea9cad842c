package apiserver_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// TestRootCAPublished: with Options.RootCA, every namespace has the
// ConfigMap kube-root-ca.crt holding it under ca.crt (a new namespace
// too), and one deleted or changed is put back, as on a cluster.
func TestRootCAPublished(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	e := startEnvFrom(t, apiservertest.StartWith(t, apiservertest.Options{Server: func(o *apiserver.Options) { o.RootCA = []byte(ca) }}))
	ctx := context.Background()
	has := func(ns string) func() bool {
		return func() bool {
			cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(ctx, apiserver.RootCAConfigMap, metav1.GetOptions{})
			return err == nil && cm.Data[apiserver.RootCAKey] == ca && len(cm.Data) == 1
		}
	}
	eventually(t, 30*time.Second, "kube-root-ca.crt in default", has("default"))
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kube-root-ca.crt in a new namespace", has("team-a"))

	cms := e.kube.CoreV1().ConfigMaps("team-a")
	cm, err := cms.Get(ctx, apiserver.RootCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{apiserver.RootCAKey: "forged", "extra": "x"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kube-root-ca.crt put back after an update", has("team-a"))
	if err := cms.Delete(ctx, apiserver.RootCAConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "kube-root-ca.crt made again after a delete", has("team-a"))
}
