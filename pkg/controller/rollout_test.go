package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

var alphaServices = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1alpha1", Resource: "services"}

func (e *env) applyAlpha(doc string) {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		e.t.Fatal(err)
	}
	c := e.dyn.Resource(alphaServices).Namespace("default")
	for i := 0; i < 10; i++ {
		cur, err := c.Get(context.Background(), u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if _, err := c.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return
		}
		if err != nil {
			e.t.Fatal(err)
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		u.SetAnnotations(cur.GetAnnotations()) // a PUT that dropped creator would be refused
		_, err = c.Update(context.Background(), u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		return
	}
	e.t.Fatal("kept conflicting")
}

func (e *env) alphaStatus(name string) map[string]interface{} {
	e.t.Helper()
	u, err := e.dyn.Resource(alphaServices).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	st, _ := u.Object["status"].(map[string]interface{})
	return st
}

func alpha(mode, image string) string {
	cfg := `
    configuration:
      revisionTemplate:
        spec:
          container:
            image: ` + image
	return `apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: legacy
spec:
  ` + mode + cfg + "\n"
}

// TestV1alpha1RolloutStyles drives the seed API's four styles end to end.
func TestV1alpha1RolloutStyles(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()

	// runLatest: all traffic to the latest ready revision.
	e.applyAlpha(alpha("runLatest:", "img:1"))
	e.readyAt("legacy", "legacy-00001")
	st := e.alphaStatus("legacy")
	if st["domain"] != "legacy.default.localhost:8080" || st["domainInternal"] != "legacy.default.svc.cluster.local" {
		t.Errorf("v1alpha1 status domain %v internal %v", st["domain"], st["domainInternal"])
	}
	if addr, _ := st["address"].(map[string]interface{}); addr["hostname"] != "legacy.default.svc.cluster.local" {
		t.Errorf("address.hostname %v", st["address"])
	}
	e.applyAlpha(alpha("runLatest:", "img:2"))
	e.readyAt("legacy", "legacy-00002")

	// pinned: all traffic to one revision, whatever is latest.
	e.applyAlpha(alpha("pinned:\n    revisionName: legacy-00001", "img:3"))
	eventually(t, "pinned to legacy-00001", func() error {
		s := e.svc("legacy")
		if s.Status.LatestCreatedRevisionName != "legacy-00003" || len(s.Status.Traffic) != 1 || s.Status.Traffic[0].RevisionName != "legacy-00001" || !s.IsReady() {
			return fmt.Errorf("%+v", s.Status)
		}
		return nil
	})

	// release: current and candidate with rolloutPercent, plus a latest tag.
	e.applyAlpha(alpha("release:\n    revisions: [legacy-00001, \"@latest\"]\n    rolloutPercent: 30", "img:3"))
	eventually(t, "release 70/30", func() error {
		s := e.svc("legacy")
		var got []string
		for _, tt := range s.Status.Traffic {
			got = append(got, fmt.Sprintf("%s=%s:%d", tt.Tag, tt.RevisionName, *tt.Percent))
		}
		want := "current=legacy-00001:70,candidate=legacy-00003:30,latest=legacy-00003:0"
		if strings.Join(got, ",") != want || !s.IsReady() {
			return fmt.Errorf("traffic %v", got)
		}
		return nil
	})
	st = e.alphaStatus("legacy")
	tr, _ := st["traffic"].([]interface{})
	if len(tr) != 3 || tr[0].(map[string]interface{})["name"] != "current" {
		t.Errorf("v1alpha1 status traffic %v", tr)
	}

	// manual: the Service stops managing its Route; a direct edit sticks.
	e.applyAlpha(`apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: legacy
spec:
  manual: {}
`)
	eventually(t, "manual mode recorded", func() error {
		s := e.svc("legacy")
		if s.Annotations["serving.knbox.dev/v1alpha1-mode"] != "manual" {
			return fmt.Errorf("annotations %v", s.Annotations)
		}
		return nil
	})
	for i := 0; i < 10; i++ {
		rt, err := e.client.ServingV1().Routes("default").Get(ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rt.Spec.Traffic = []servingv1.TrafficTarget{{RevisionName: "legacy-00002", Percent: ptr.To[int64](100)}}
		if _, err = e.client.ServingV1().Routes("default").Update(ctx, rt, metav1.UpdateOptions{}); err == nil {
			break
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	eventually(t, "the hand-edited route to be served and reported", func() error {
		s := e.svc("legacy")
		if len(s.Status.Traffic) != 1 || s.Status.Traffic[0].RevisionName != "legacy-00002" {
			return fmt.Errorf("service traffic %+v", s.Status.Traffic)
		}
		return nil
	})
	// The controller does not fight the edit.
	time.Sleep(1500 * time.Millisecond) // one resync period (1s) passes: a fight would show
	rt, _ := e.client.ServingV1().Routes("default").Get(ctx, "legacy", metav1.GetOptions{})
	if len(rt.Spec.Traffic) != 1 || rt.Spec.Traffic[0].RevisionName != "legacy-00002" {
		t.Errorf("manual route was reverted: %+v", rt.Spec.Traffic)
	}
}

// TestRevisionGC: with config-gc allowing it, old non-active revisions are
// collected; routed ones, the latest and no-gc ones stay.
func TestRevisionGC(t *testing.T) {
	e := newEnv(t, map[string]string{
		"retain-since-create-time":      "disabled",
		"retain-since-last-active-time": "disabled",
		"min-non-active-revisions":      "1",
		"max-non-active-revisions":      "1",
	})
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("gc", "img:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("gc", "gc-00001")
	// Keep gc-00001 routed through a tag, and protect gc-00002.
	e.update("gc", func(s *servingv1.Service) {
		s.Spec.Template.Spec.Containers[0].Image = "img:2"
		s.Spec.Template.Annotations = map[string]string{"serving.knative.dev/no-gc": "true"}
		s.Spec.Traffic = []servingv1.TrafficTarget{
			{LatestRevision: ptr.To(true), Percent: ptr.To[int64](100)},
			{Tag: "old", RevisionName: "gc-00001", Percent: ptr.To[int64](0)},
		}
	})
	e.readyAt("gc", "gc-00002")
	for i := 3; i <= 6; i++ {
		img := fmt.Sprintf("img:%d", i)
		e.update("gc", func(s *servingv1.Service) {
			s.Spec.Template.Spec.Containers[0].Image = img
			s.Spec.Template.Annotations = nil
		})
		e.readyAt("gc", fmt.Sprintf("gc-%05d", i))
	}
	// Non-active: 00003, 00004, 00005 (00002 is no-gc, 00001 routed,
	// 00006 latest). max-non-active 1 keeps the newest of them.
	eventually(t, "collection", func() error {
		revs, _ := e.client.ServingV1().Revisions("default").List(ctx, metav1.ListOptions{})
		var names []string
		for _, r := range revs.Items {
			names = append(names, r.Name)
		}
		if strings.Join(names, ",") != "gc-00001,gc-00002,gc-00005,gc-00006" {
			return fmt.Errorf("revisions %v", names)
		}
		return nil
	})
}
