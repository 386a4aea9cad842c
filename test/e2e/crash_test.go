package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func clientFor(t *testing.T, dir string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 5 * time.Second
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestKillNineKeepsAcknowledgedWrites writes objects as fast as the server
// acknowledges them, kills the server with SIGKILL in the middle, restarts
// it on the same data dir and checks that every acknowledged write is back
// with its resourceVersion, and that the sequence continues.
func TestKillNineKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "")
	c := clientFor(t, dir)

	type ack struct {
		name string
		rv   int64
	}
	acks := make(chan ack, 10000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Bounded: at most 5000 writes or 60 s; the kill ends it sooner.
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"i": strconv.Itoa(i)}}
			got, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), cm, metav1.CreateOptions{})
			if err != nil {
				return // the server is gone
			}
			rv, _ := strconv.ParseInt(got.ResourceVersion, 10, 64)
			acks <- ack{got.Name, rv}
		}
	}()
	// Kill once a good number of writes were acknowledged.
	var got []ack
	for len(got) < 150 {
		select {
		case a := <-acks:
			got = append(got, a)
		case <-done:
			t.Fatalf("writer stopped after %d writes:\n%s", len(got), srv.logs())
		}
	}
	srv.kill()
	<-done
	close(acks)
	for a := range acks {
		got = append(got, a)
	}
	t.Logf("%d writes acknowledged before SIGKILL", len(got))

	startServer(t, dir, "")
	c = clientFor(t, dir)
	var maxRV int64
	for _, a := range got {
		cm, err := c.CoreV1().ConfigMaps("default").Get(context.Background(), a.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("acknowledged write %s lost: %v", a.name, err)
		}
		if cm.ResourceVersion != strconv.FormatInt(a.rv, 10) {
			t.Errorf("%s: resourceVersion %s after restart, %d when acknowledged", a.name, cm.ResourceVersion, a.rv)
		}
		if a.rv > maxRV {
			maxRV = a.rv
		}
	}
	next, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv, _ := strconv.ParseInt(next.ResourceVersion, 10, 64); rv <= maxRV {
		t.Errorf("resourceVersion after restart %d is not above the last acknowledged %d", rv, maxRV)
	}
}
