package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TestLogURLAndReachability: the reconciler writes the revision's logUrl
// (the API's log subresource) itself, and tells the scaler whether a Route
// reaches the revision from its routingState label: reachable while the
// route names it, unreachable once it no longer does.
func TestLogURLAndReachability(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("reach", "example.com/reach:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("reach", "reach-00001")
	rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "reach-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://api.example/apis/serving.knative.dev/v1/namespaces/default/revisions/reach-00001/log"; rev.Status.LogURL != want {
		t.Errorf("logUrl %q, want %q", rev.Status.LogURL, want)
	}
	eventually(t, "reach-00001 reachable", func() error {
		if r, known := e.scaler.isReachable("default", "reach-00001"); !known || !r {
			return fmt.Errorf("reachable %v, known %v", r, known)
		}
		return nil
	})
	// All traffic to a second revision: the first is no longer routed.
	e.update("reach", func(s *servingv1.Service) { s.Spec.Template.Spec.Containers[0].Image = "example.com/reach:v2" })
	e.readyAt("reach", "reach-00002")
	eventually(t, "reach-00001 unreachable", func() error {
		if r, known := e.scaler.isReachable("default", "reach-00001"); !known || r {
			return fmt.Errorf("reachable %v, known %v", r, known)
		}
		if r, _ := e.scaler.isReachable("default", "reach-00002"); !r {
			return fmt.Errorf("reach-00002 not reachable")
		}
		return nil
	})
	// Pinned to the first again (a tag on the second keeps it routed).
	e.update("reach", func(s *servingv1.Service) {
		s.Spec.Traffic = []servingv1.TrafficTarget{
			{RevisionName: "reach-00001", Percent: ptr.To[int64](100)},
			{RevisionName: "reach-00002", Percent: ptr.To[int64](0), Tag: "next"},
		}
	})
	eventually(t, "both reachable", func() error {
		r1, _ := e.scaler.isReachable("default", "reach-00001")
		r2, _ := e.scaler.isReachable("default", "reach-00002")
		if !r1 || !r2 {
			return fmt.Errorf("reachable: 00001 %v, 00002 %v", r1, r2)
		}
		return nil
	})
}

// TestDigestResolution: a resolution that fails for a while (a registry
// that is down) is tried again with backoff and the revision becomes ready
// once it works; one that hangs is cut at digest-resolution-timeout and
// reported, not left to block a worker.
func TestDigestResolution(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for name, img := range map[string]string{"flaky": "example.com/flaky:v1", "slow": "example.com/slow:v1"} {
		if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc(name, img), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.readyAt("flaky", "flaky-00001")
	eventually(t, "slow reported", func() error {
		rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "slow-00001", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := rev.Status.GetCondition(servingv1.RevisionConditionContainerHealthy)
		if c == nil || !c.IsFalse() || c.Reason != "ContainerMissing" || !strings.Contains(c.Message, "deadline exceeded") {
			return fmt.Errorf("revision ContainerHealthy %+v", c)
		}
		return nil
	})
	e.rt.mu.Lock()
	n := e.rt.resolves["example.com/slow:v1"]
	e.rt.mu.Unlock()
	if n < 1 {
		t.Errorf("slow resolved %d times", n)
	}
}

// TestImageMissingAtOnce: the first failed resolution of an image shows
// at once, as Knative shows it (Revision ContainerHealthy and Ready False,
// ContainerMissing, a message naming the image and the registry's error;
// the Configuration and the Service failed, the Service's
// ConfigurationsReady with that message), not after the retries: the
// second resolution is still waiting while the test sees all of it. Once
// the image appears the retry succeeds and the Revision becomes Ready.
func TestImageMissingAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	var once sync.Once
	appear := func() { once.Do(func() { close(e.rt.appear) }) }
	t.Cleanup(appear) // before the controller stops (cleanups run last first)
	ctx := context.Background()
	const img = "example.com/late:v1"
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("late", img), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "late reported missing", func() error {
		rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "late-00001", metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := fmt.Sprintf("Unable to fetch image %q: ", img)
		for _, typ := range []apis.ConditionType{servingv1.RevisionConditionContainerHealthy, servingv1.RevisionConditionReady} {
			c := rev.Status.GetCondition(typ)
			if c == nil || !c.IsFalse() || c.Reason != "ContainerMissing" || !strings.Contains(c.Message, want) || !strings.Contains(c.Message, "MANIFEST_UNKNOWN") {
				return fmt.Errorf("revision %s %+v", typ, c)
			}
		}
		cfg, err := e.client.ServingV1().Configurations("default").Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := cfg.Status.GetCondition(servingv1.ConfigurationConditionReady); c == nil || !c.IsFalse() || c.Reason != "RevisionFailed" || !strings.Contains(c.Message, want) {
			return fmt.Errorf("configuration ready %+v", c)
		}
		svc := e.svc("late")
		if c := svc.Status.GetCondition(servingv1.ServiceConditionReady); c == nil || !c.IsFalse() {
			return fmt.Errorf("service ready %+v", c)
		}
		if c := svc.Status.GetCondition(servingv1.ServiceConditionConfigurationsReady); c == nil || !c.IsFalse() || !strings.Contains(c.Message, want) {
			return fmt.Errorf("service configurations ready %+v", c)
		}
		if c := svc.Status.GetCondition(servingv1.ServiceConditionRoutesReady); c == nil || !c.IsFalse() {
			return fmt.Errorf("service routes ready %+v", c)
		}
		return nil
	})
	e.rt.mu.Lock()
	n := e.rt.resolves[img]
	e.rt.mu.Unlock()
	if n > 2 {
		t.Errorf("%d resolutions before the failure showed, want it after the first", n)
	}
	appear()
	e.readyAt("late", "late-00001")
}
