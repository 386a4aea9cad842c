package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"knative.dev/serving/pkg/client/clientset/versioned/fake"
	listers "knative.dev/serving/pkg/client/listers/serving/v1"
	gcconfig "knative.dev/serving/pkg/gc"
)

// TestCollectAllGroupsByConfiguration: the timer's pass, which reads the
// revisions once for all configurations, collects each configuration's
// own: here the same configuration name in two namespaces, and a revision
// of another configuration in the first, which the bound of one
// non-active revision would collect if it counted there.
func TestCollectAllGroupsByConfiguration(t *testing.T) {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	cfgs, revs := idx(), idx()
	client := fake.NewSimpleClientset()
	created := time.Now().Add(-time.Hour)
	addRev := func(ns, cfg string, n int) {
		r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%05d", cfg, n),
			Labels:            map[string]string{serving.ConfigurationLabelKey: cfg},
			CreationTimestamp: metav1.NewTime(created.Add(time.Duration(n) * time.Minute))}}
		if err := revs.Add(r); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ServingV1().Revisions(ns).Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"a", "b"} {
		cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
		cfg.Status.LatestCreatedRevisionName, cfg.Status.LatestReadyRevisionName = "web-00003", "web-00003"
		if err := cfgs.Add(cfg); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 3; n++ {
			addRev(ns, "web", n)
		}
	}
	addRev("a", "other", 1) // its configuration is gone: not this pass's
	c := &Controller{
		opts: Options{GC: &gcconfig.Config{RetainSinceCreateTime: gcconfig.Disabled, RetainSinceLastActiveTime: gcconfig.Disabled,
			MinNonActiveRevisions: 0, MaxNonActiveRevisions: 1}},
		client: client, log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: clock.RealClock{},
		configs: listers.NewConfigurationLister(cfgs), revisions: listers.NewRevisionLister(revs),
	}
	c.collectAll(context.Background())
	for ns, want := range map[string][]string{"a": {"other-00001", "web-00002", "web-00003"}, "b": {"web-00002", "web-00003"}} {
		list, err := client.ServingV1().Revisions(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range list.Items {
			got = append(got, r.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("namespace %s: revisions %v, want %v", ns, got, want)
		}
	}
}
