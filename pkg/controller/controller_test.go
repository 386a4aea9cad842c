package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func ksvc(name, image string) *servingv1.Service {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
	return s
}

func (e *env) svc(name string) *servingv1.Service {
	e.t.Helper()
	s, err := e.client.ServingV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// readyAt waits for the Service to be Ready with the given latest revision.
func (e *env) readyAt(name, rev string) *servingv1.Service {
	e.t.Helper()
	var s *servingv1.Service
	eventually(e.t, fmt.Sprintf("service %s ready at %s", name, rev), func() error {
		var err error
		s, err = e.client.ServingV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Status.ObservedGeneration != s.Generation || !s.IsReady() || s.Status.LatestReadyRevisionName != rev || s.Status.LatestCreatedRevisionName != rev {
			return fmt.Errorf("status %+v", s.Status)
		}
		return nil
	})
	return s
}

func (e *env) update(name string, mutate func(*servingv1.Service)) {
	e.t.Helper()
	for i := 0; i < 10; i++ {
		s := e.svc(name)
		mutate(s)
		_, err := e.client.ServingV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		return
	}
	e.t.Fatal("update kept conflicting")
}

func TestServiceBecomesReadyWithRevisionsPerGeneration(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("hello", "example.com/hello:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := e.readyAt("hello", "hello-00001")
	if got := s.Status.URL.String(); got != "http://hello.default.localhost:8080" {
		t.Errorf("url %s", got)
	}
	if s.Status.Address == nil || s.Status.Address.URL.String() != "http://hello.default.svc.cluster.local" {
		t.Errorf("address %+v", s.Status.Address)
	}
	if len(s.Status.Traffic) != 1 || s.Status.Traffic[0].RevisionName != "hello-00001" || *s.Status.Traffic[0].Percent != 100 {
		t.Errorf("traffic %+v", s.Status.Traffic)
	}
	for _, c := range []apis.ConditionType{servingv1.ServiceConditionConfigurationsReady, servingv1.ServiceConditionRoutesReady, apis.ConditionReady} {
		if !s.Status.GetCondition(c).IsTrue() {
			t.Errorf("condition %s: %+v", c, s.Status.GetCondition(c))
		}
	}
	rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "hello-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"serving.knative.dev/configuration": "hello", "serving.knative.dev/configurationGeneration": "1", "serving.knative.dev/service": "hello"} {
		if rev.Labels[k] != v {
			t.Errorf("revision label %s=%q, want %q", k, rev.Labels[k], v)
		}
	}
	if d := rev.Status.ContainerStatuses; len(d) != 1 || !strings.Contains(d[0].ImageDigest, "@sha256:") {
		t.Errorf("imageDigest %+v", d)
	}
	for _, c := range []apis.ConditionType{servingv1.RevisionConditionResourcesAvailable, servingv1.RevisionConditionContainerHealthy, servingv1.RevisionConditionActive, apis.ConditionReady} {
		if !rev.Status.GetCondition(c).IsTrue() {
			t.Errorf("revision condition %s: %+v", c, rev.Status.GetCondition(c))
		}
	}
	if rev.Status.LogURL == "" || rev.Status.ActualReplicas == nil || *rev.Status.ActualReplicas != 1 {
		t.Errorf("revision status %+v", rev.Status)
	}
	if r, ok := e.routes.Get("default", "hello"); !ok || r.Host != "hello.default.localhost" || len(r.Traffic) != 1 || r.Traffic[0].Revision != "hello-00001" {
		t.Errorf("routing table: %+v", r)
	}

	// Image change: generation 2, new revision.
	e.update("hello", func(s *servingv1.Service) { s.Spec.Template.Spec.Containers[0].Image = "example.com/hello:v2" })
	e.readyAt("hello", "hello-00002")
	// Template label change: generation 3, new revision.
	e.update("hello", func(s *servingv1.Service) { s.Spec.Template.Labels = map[string]string{"tier": "web"} })
	e.readyAt("hello", "hello-00003")
	cfg, _ := e.client.ServingV1().Configurations("default").Get(ctx, "hello", metav1.GetOptions{})
	if cfg.Generation != 3 {
		t.Errorf("configuration generation %d, want 3", cfg.Generation)
	}
	// The Service's own labels and annotations make no revision, but
	// propagate to Configuration and Route, removals too.
	e.update("hello", func(s *servingv1.Service) {
		s.Labels = map[string]string{"team": "a"}
		s.Annotations["note"] = "x"
	})
	eventually(t, "labels and annotations on configuration and route", func() error {
		cfg, _ := e.client.ServingV1().Configurations("default").Get(ctx, "hello", metav1.GetOptions{})
		rt, _ := e.client.ServingV1().Routes("default").Get(ctx, "hello", metav1.GetOptions{})
		if cfg.Labels["team"] != "a" || rt.Labels["team"] != "a" || cfg.Annotations["note"] != "x" || rt.Annotations["note"] != "x" {
			return fmt.Errorf("cfg %v %v route %v %v", cfg.Labels, cfg.Annotations, rt.Labels, rt.Annotations)
		}
		return nil
	})
	e.update("hello", func(s *servingv1.Service) {
		delete(s.Labels, "team")
		delete(s.Annotations, "note")
	})
	eventually(t, "removals to propagate", func() error {
		cfg, _ := e.client.ServingV1().Configurations("default").Get(ctx, "hello", metav1.GetOptions{})
		rt, _ := e.client.ServingV1().Routes("default").Get(ctx, "hello", metav1.GetOptions{})
		if _, ok := cfg.Labels["team"]; ok {
			return fmt.Errorf("cfg labels %v", cfg.Labels)
		}
		if _, ok := rt.Annotations["note"]; ok {
			return fmt.Errorf("route annotations %v", rt.Annotations)
		}
		return nil
	})
	revs, _ := e.client.ServingV1().Revisions("default").List(ctx, metav1.ListOptions{})
	if len(revs.Items) != 3 {
		t.Errorf("%d revisions, want 3 (labels of the Service itself make none)", len(revs.Items))
	}

	// Deleting the Service removes Configuration, Route and Revisions.
	if err := e.client.ServingV1().Services("default").Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cascade", func() error {
		revs, _ := e.client.ServingV1().Revisions("default").List(ctx, metav1.ListOptions{})
		_, errC := e.client.ServingV1().Configurations("default").Get(ctx, "hello", metav1.GetOptions{})
		_, errR := e.client.ServingV1().Routes("default").Get(ctx, "hello", metav1.GetOptions{})
		if len(revs.Items) != 0 || !apierrors.IsNotFound(errC) || !apierrors.IsNotFound(errR) {
			return fmt.Errorf("%d revisions, cfg %v, route %v", len(revs.Items), errC, errR)
		}
		if _, ok := e.routes.Get("default", "hello"); ok {
			return fmt.Errorf("route still published")
		}
		return nil
	})
}

func TestBringYourOwnRevisionName(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	s := ksvc("byo", "img:1")
	s.Spec.Template.Name = "byo-first"
	if _, err := e.client.ServingV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("byo", "byo-first")
	// Changing the template but keeping the name is refused.
	cur := e.svc("byo")
	cur.Spec.Template.Spec.Containers[0].Image = "img:2"
	_, err := e.client.ServingV1().Services("default").Update(ctx, cur, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.metadata.name") {
		t.Errorf("template change under the same name: %v", err)
	}
	// A new name with the change is fine.
	e.update("byo", func(s *servingv1.Service) {
		s.Spec.Template.Name = "byo-second"
		s.Spec.Template.Spec.Containers[0].Image = "img:2"
	})
	e.readyAt("byo", "byo-second")
}

func TestTrafficSplitWithTags(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("split", "img:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("split", "split-00001")
	e.update("split", func(s *servingv1.Service) { s.Spec.Template.Spec.Containers[0].Image = "img:2" })
	e.readyAt("split", "split-00002")
	setTraffic := func(cur, cand int64) {
		e.update("split", func(s *servingv1.Service) {
			s.Spec.Traffic = []servingv1.TrafficTarget{
				{Tag: "current", RevisionName: "split-00001", Percent: ptr.To(cur)},
				{Tag: "candidate", RevisionName: "split-00002", Percent: ptr.To(cand)},
				{Tag: "latest", LatestRevision: ptr.To(true), Percent: ptr.To[int64](0)},
			}
		})
	}
	for _, split := range [][2]int64{{100, 0}, {50, 50}} {
		setTraffic(split[0], split[1])
		eventually(t, fmt.Sprintf("traffic %v", split), func() error {
			s := e.svc("split")
			if s.Status.ObservedGeneration != s.Generation || !s.IsReady() || len(s.Status.Traffic) != 3 {
				return fmt.Errorf("status %+v", s.Status)
			}
			want := []string{
				fmt.Sprintf("current split-00001 %d http://current-split.default.localhost:8080", split[0]),
				fmt.Sprintf("candidate split-00002 %d http://candidate-split.default.localhost:8080", split[1]),
				"latest split-00002 0 http://latest-split.default.localhost:8080",
			}
			for i, tt := range s.Status.Traffic {
				got := fmt.Sprintf("%s %s %d %s", tt.Tag, tt.RevisionName, *tt.Percent, tt.URL)
				if got != want[i] {
					return fmt.Errorf("traffic[%d] = %q, want %q", i, got, want[i])
				}
			}
			return nil
		})
	}
	r, _ := e.routes.Get("default", "split")
	if len(r.Traffic) != 2 || r.Tags["latest-split.default.localhost"] != "split-00002" || r.Tags["current-split.default.localhost"] != "split-00001" {
		t.Errorf("routing table %+v", r)
	}
}

func TestFailuresSurfaceWithReasons(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for name, img := range map[string]string{"nope": "example.com/missing:v1", "boom": "example.com/crash:v1"} {
		if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc(name, img), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, reason := range map[string]string{"nope": "ContainerMissing", "boom": "ExitCode1"} {
		eventually(t, name+" failed", func() error {
			s := e.svc(name)
			c := s.Status.GetCondition(apis.ConditionReady)
			if c == nil || !c.IsFalse() || c.Reason == "" || c.Message == "" {
				return fmt.Errorf("service ready %+v", c)
			}
			cfg, _ := e.client.ServingV1().Configurations("default").Get(ctx, name, metav1.GetOptions{})
			cc := cfg.Status.GetCondition(apis.ConditionReady)
			if cc == nil || !cc.IsFalse() || cc.Reason != "RevisionFailed" {
				return fmt.Errorf("configuration ready %+v", cc)
			}
			rev, _ := e.client.ServingV1().Revisions("default").Get(ctx, name+"-00001", metav1.GetOptions{})
			rc := rev.Status.GetCondition(apis.ConditionReady)
			if rc == nil || !rc.IsFalse() || rc.Reason != reason {
				return fmt.Errorf("revision ready %+v", rc)
			}
			rt, _ := e.client.ServingV1().Routes("default").Get(ctx, name, metav1.GetOptions{})
			if rc := rt.Status.GetCondition(apis.ConditionReady); rc == nil || !rc.IsFalse() || rc.Reason == "" {
				return fmt.Errorf("route ready %+v", rc)
			}
			return nil
		})
	}
	// A route that names a missing revision: AllTrafficAssigned False.
	rt := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "dangling", Namespace: "default"}}
	rt.Spec.Traffic = []servingv1.TrafficTarget{{RevisionName: "ghost-00001", Percent: ptr.To[int64](100)}}
	if _, err := e.client.ServingV1().Routes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt2 := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "dangling-cfg", Namespace: "default"}}
	rt2.Spec.Traffic = []servingv1.TrafficTarget{{ConfigurationName: "ghost", Percent: ptr.To[int64](100)}}
	if _, err := e.client.ServingV1().Routes("default").Create(ctx, rt2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, reason := range map[string]string{"dangling": "RevisionMissing", "dangling-cfg": "ConfigurationMissing"} {
		eventually(t, name, func() error {
			r, _ := e.client.ServingV1().Routes("default").Get(ctx, name, metav1.GetOptions{})
			c := r.Status.GetCondition(servingv1.RouteConditionAllTrafficAssigned)
			if c == nil || !c.IsFalse() || c.Reason != reason || c.Message == "" {
				return fmt.Errorf("%+v", c)
			}
			return nil
		})
	}
}

func TestClusterLocalRoute(t *testing.T) {
	e := newEnv(t, nil)
	s := ksvc("private", "img")
	s.Labels = map[string]string{"networking.knative.dev/visibility": "cluster-local"}
	latest := true
	s.Spec.Traffic = []servingv1.TrafficTarget{{LatestRevision: &latest, Percent: ptr.To[int64](100), Tag: "canary"}}
	if _, err := e.client.ServingV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.readyAt("private", "private-00001")
	if got.Status.URL.String() != "http://private.default.svc.cluster.local" {
		t.Errorf("url %s", got.Status.URL)
	}
	if got.Status.Address == nil || got.Status.Address.URL.String() != "http://private.default.svc.cluster.local" {
		t.Errorf("address %+v", got.Status.Address)
	}
	// A tag of a cluster-local Route: its cluster-local host on port 80,
	// where instances call it.
	if len(got.Status.Traffic) != 1 || got.Status.Traffic[0].URL.String() != "http://canary-private.default.svc.cluster.local" {
		t.Errorf("traffic %+v", got.Status.Traffic)
	}
	if r, _ := e.routes.Get("default", "private"); !r.ClusterLocal {
		t.Errorf("not cluster-local in the routing table: %+v", r)
	}
}

func TestRestartConverges(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("again", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.readyAt("again", "again-00001")
	e.stopCtl()
	e.routes = nil
	e.routes = newTableForRestart()
	e.startController()
	eventually(t, "the new controller to republish the route", func() error {
		if _, ok := e.routes.Get("default", "again"); !ok {
			return fmt.Errorf("not published")
		}
		return nil
	})
	after := e.svc("again")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a restart changed a converged service: rv %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
	revs, _ := e.client.ServingV1().Revisions("default").List(ctx, metav1.ListOptions{})
	if len(revs.Items) != 1 {
		t.Errorf("%d revisions after restart", len(revs.Items))
	}
}

// TestSidecarDigests: a Revision with a sidecar gets one containerStatus
// per container, by name and in the containers' order, each with its own
// image's digest, as Knative records them; a sidecar image that cannot be
// resolved fails the Revision naming that image.
func TestSidecarDigests(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	withSidecar := func(name, sidecarImage string) *servingv1.Service {
		s := ksvc(name, "example.com/app:v1")
		s.Spec.Template.Spec.Containers = []corev1.Container{
			{Name: "side", Image: sidecarImage},
			{Name: "app", Image: "example.com/app:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}},
		}
		return s
	}
	for _, s := range []*servingv1.Service{withSidecar("two", "example.com/side:v1"), withSidecar("gone", "example.com/missing-side:v1")} {
		if _, err := e.client.ServingV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.readyAt("two", "two-00001")
	rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "two-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sts := rev.Status.ContainerStatuses
	if len(sts) != 2 || sts[0].Name != "side" || !strings.HasPrefix(sts[0].ImageDigest, "example.com/side@sha256:") ||
		sts[1].Name != "app" || !strings.HasPrefix(sts[1].ImageDigest, "example.com/app@sha256:") {
		t.Errorf("containerStatuses %+v, want side's then app's digest", sts)
	}
	eventually(t, "gone failed", func() error {
		rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "gone-00001", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := rev.Status.GetCondition(servingv1.RevisionConditionContainerHealthy)
		if c == nil || !c.IsFalse() || c.Reason != "ContainerMissing" || !strings.Contains(c.Message, "example.com/missing-side:v1") {
			return fmt.Errorf("container healthy %+v", c)
		}
		return nil
	})
}

// TestClusterDomain: a cluster-local Route's URLs, and every Route's
// address, follow the configured cluster domain, as does config-domain's
// svc.<cluster domain> entry (Knative's way to make every Route local).
func TestClusterDomain(t *testing.T) {
	e := prepareEnv(t, map[string]string{})
	e.clusterDomain = "corp.internal"
	e.cfg.ConfigMaps["config-domain"] = map[string]string{"svc.corp.internal": "selector:\n  app: secret\n", "example.com": ""}
	e.startController()
	s := ksvc("private", "img")
	s.Labels = map[string]string{"networking.knative.dev/visibility": "cluster-local"}
	if _, err := e.client.ServingV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.readyAt("private", "private-00001")
	if got.Status.URL.String() != "http://private.default.svc.corp.internal" {
		t.Errorf("url %s", got.Status.URL)
	}
	if r, _ := e.routes.Get("default", "private"); !r.ClusterLocal || r.Host != "private.default.svc.corp.internal" {
		t.Errorf("routing table: %+v", r)
	}
	s = ksvc("secret", "img")
	s.Labels = map[string]string{"app": "secret"}
	if _, err := e.client.ServingV1().Services("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = e.readyAt("secret", "secret-00001")
	if got.Status.URL.String() != "http://secret.default.svc.corp.internal" {
		t.Errorf("config-domain's svc.<cluster domain>: url %s", got.Status.URL)
	}
	if _, err := e.client.ServingV1().Services("default").Create(context.Background(), ksvc("public", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = e.readyAt("public", "public-00001")
	if got.Status.Address == nil || got.Status.Address.URL.String() != "http://public.default.svc.corp.internal" {
		t.Errorf("address %+v", got.Status.Address)
	}
	if !strings.HasPrefix(got.Status.URL.String(), "http://public.default.example.com") {
		t.Errorf("public url %s", got.Status.URL)
	}
}

// TestDrainingRevisionsHoldNoWorker: a deleted revision whose instances
// take minutes to stop does not keep the workers (two here) from the other
// revisions (seen running Knative's conformance tests: new Services waited
// for old ones' grace periods).
func TestDrainingRevisionsHoldNoWorker(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	svcs := e.client.ServingV1().Services("default")
	for _, n := range []string{"draining-a", "draining-b", "draining-c"} {
		if _, err := svcs.Create(ctx, ksvc(n, "example.com/hello:v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.readyAt(n, n+"-00001")
	}
	for _, n := range []string{"draining-a", "draining-b", "draining-c"} {
		if err := svcs.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the deleted revisions handed to the runtime", func() error {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		for _, n := range []string{"draining-a", "draining-b", "draining-c"} {
			if !e.rt.removed["default/"+n+"-00001"] {
				return fmt.Errorf("%s not removed", n)
			}
		}
		return nil
	})
	if _, err := svcs.Create(ctx, ksvc("after", "example.com/hello:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("after", "after-00001")
}
