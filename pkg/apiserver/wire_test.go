package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
	"sigs.k8s.io/yaml"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/store"
)

var v1alpha1Services = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1alpha1", Resource: "services"}

func fromYAML(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestV1alpha1ReadableInBothVersions writes the seed API's forms and reads
// them back in v1alpha1 (unchanged) and in v1 (converted).
func TestV1alpha1ReadableInBothVersions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.dyn.Resource(v1alpha1Services).Namespace("default")
	runLatest := fromYAML(t, `
apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: legacy
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          concurrencyModel: Single
          container:
            image: example.com/app:v1
`)
	created, err := c.Create(ctx, runLatest, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetAPIVersion() != "serving.knative.dev/v1alpha1" {
		t.Errorf("created apiVersion %s", created.GetAPIVersion())
	}
	img, _, _ := unstructured.NestedString(created.Object, "spec", "runLatest", "configuration", "revisionTemplate", "spec", "container", "image")
	if img != "example.com/app:v1" {
		t.Errorf("v1alpha1 view lost the image: %v", created.Object["spec"])
	}
	// The same object through v1 and Knative's clientset.
	v1, err := e.serving.ServingV1().Services("default").Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := v1.Spec.Template.Spec
	if spec.Containers[0].Image != "example.com/app:v1" || spec.ContainerConcurrency == nil || *spec.ContainerConcurrency != 1 {
		t.Errorf("v1 view: %+v", spec)
	}
	if len(v1.Spec.Traffic) != 1 || v1.Spec.Traffic[0].LatestRevision == nil || !*v1.Spec.Traffic[0].LatestRevision {
		t.Errorf("runLatest traffic: %+v", v1.Spec.Traffic)
	}
	if v1.ResourceVersion != created.GetResourceVersion() || v1.UID != created.GetUID() {
		t.Errorf("one object, two views: rv %s/%s", v1.ResourceVersion, created.GetResourceVersion())
	}

	// Switch to release with a v1alpha1 update.
	got, err := c.Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec0 := got.Object["spec"].(map[string]interface{})
	cfg := spec0["runLatest"].(map[string]interface{})["configuration"]
	got.Object["spec"] = map[string]interface{}{"release": map[string]interface{}{
		"revisions": []interface{}{"legacy-00001", "@latest"}, "rolloutPercent": int64(20), "configuration": cfg}}
	upd, err := c.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rel, _, _ := unstructured.NestedMap(upd.Object, "spec", "release")
	if rel == nil || fmt.Sprint(rel["rolloutPercent"]) != "20" {
		t.Errorf("release view: %v", upd.Object["spec"])
	}
	v1, _ = e.serving.ServingV1().Services("default").Get(ctx, "legacy", metav1.GetOptions{})
	var tags []string
	for _, tt := range v1.Spec.Traffic {
		tags = append(tags, fmt.Sprintf("%s:%d", tt.Tag, *tt.Percent))
	}
	if strings.Join(tags, ",") != "current:80,candidate:20,latest:0" {
		t.Errorf("release as v1 traffic: %v", tags)
	}
	if v1.Generation != 2 {
		t.Errorf("generation %d after changing traffic", v1.Generation)
	}

	// Lists in v1alpha1.
	l, err := c.List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.GetResourceVersion() == "" {
		t.Fatalf("v1alpha1 list: %v %v", err, l)
	}

	// Shape errors name v1alpha1 fields.
	both := fromYAML(t, `
apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: both
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          container:
            image: img
  manual: {}
`)
	_, err = c.Create(ctx, both, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.") {
		t.Errorf("two modes: %v", err)
	}
	noImage := fromYAML(t, `
apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: noimage
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          container:
            env: [{name: A, value: b}]
`)
	_, err = c.Create(ctx, noImage, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.runLatest.configuration.revisionTemplate.spec.container.image") {
		t.Errorf("missing image in v1alpha1 terms: %v", err)
	}
	// Errors found by Knative's v1 validation after conversion are named in
	// v1alpha1 terms too.
	tooMany := fromYAML(t, `
apiVersion: serving.knative.dev/v1alpha1
kind: Service
metadata:
  name: toomany
spec:
  runLatest:
    configuration:
      revisionTemplate:
        spec:
          containerConcurrency: 5000
          container:
            image: img
`)
	_, err = c.Create(ctx, tooMany, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.runLatest.configuration.revisionTemplate.spec.containerConcurrency") {
		t.Errorf("v1 validation error in v1alpha1 terms: %v", err)
	}
}

func TestServerSideTable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("tbl", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	accept := "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	for _, path := range []string{svcPath, svcPath + "/tbl", "/apis/serving.knative.dev/v1/services"} {
		code, body := e.do("GET", path, "", nil, "Accept", accept)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(body, &tbl); err != nil || tbl.Kind != "Table" {
			t.Fatalf("%s: not a table: %v %s", path, err, body)
		}
		var names []string
		for _, c := range tbl.ColumnDefinitions {
			names = append(names, c.Name)
		}
		if strings.Join(names, ",") != "Name,URL,LatestCreated,LatestReady,Ready,Reason,Age" {
			t.Errorf("columns %v", names)
		}
		if len(tbl.Rows) != 1 || tbl.Rows[0].Cells[0] != "tbl" {
			t.Errorf("rows %+v", tbl.Rows)
		}
		var pom metav1.PartialObjectMetadata
		if err := json.Unmarshal(tbl.Rows[0].Object.Raw, &pom); err != nil || pom.Name != "tbl" || pom.Namespace != "default" {
			t.Errorf("row object: %v %s", err, tbl.Rows[0].Object.Raw)
		}
	}
}

func TestDiscovery(t *testing.T) {
	e := newEnv(t)
	dc, err := discovery.NewDiscoveryClientForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil || v.Major != "1" {
		t.Fatalf("version: %v %+v", err, v)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]metav1.APIResource{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			found[l.GroupVersion+"/"+r.Name] = r
		}
	}
	want := map[string][]string{
		"serving.knative.dev/v1/services":       {"kservice", "ksvc"},
		"serving.knative.dev/v1/configurations": {"config", "cfg"},
		"serving.knative.dev/v1/revisions":      {"rev"},
		"serving.knative.dev/v1/routes":         {"rt"},
		"serving.knative.dev/v1alpha1/services": {"kservice", "ksvc"},
		"node.k8s.io/v1/runtimeclasses":         nil,
		"v1/namespaces":                         {"ns"},
		"v1/secrets":                            nil,
		"v1/configmaps":                         {"cm"},
	}
	for k, short := range want {
		r, ok := found[k]
		if !ok {
			t.Errorf("discovery lacks %s", k)
			continue
		}
		if strings.Join(r.ShortNames, ",") != strings.Join(short, ",") {
			t.Errorf("%s short names %v, want %v", k, r.ShortNames, short)
		}
	}
	if c := found["serving.knative.dev/v1/services"].Categories; strings.Join(c, ",") != "all,knative,serving" {
		t.Errorf("categories %v", c)
	}
	if _, ok := found["serving.knative.dev/v1/services/status"]; !ok {
		t.Error("no status subresource in discovery")
	}
	if found["node.k8s.io/v1/runtimeclasses"].Namespaced {
		t.Error("runtimeclasses must be cluster-scoped")
	}
	// OpenAPI v3 declares server-side field validation for each kind.
	code, body := e.do("GET", "/openapi/v3", "", nil)
	if code != 200 || !bytes.Contains(body, []byte("apis/serving.knative.dev/v1")) {
		t.Errorf("openapi v3 index: %d %s", code, body)
	}
}

// TestWatchGone: a watch from a revision the event log no longer holds gets
// one ERROR event with a 410 Expired Status, which makes clients relist.
func TestWatchGone(t *testing.T) {
	e := startEnv(t, t.TempDir(), store.Options{EventLogSize: 5})
	ctx := context.Background()
	first, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("g0", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 40; i++ {
		if _, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc(fmt.Sprintf("g%d", i), "img"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest("GET", e.url+svcPath+"?watch=true&resourceVersion="+first.ResourceVersion+"&timeoutSeconds=5", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Type   string        `json:"type"`
		Object metav1.Status `json:"object"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "ERROR" || ev.Object.Code != http.StatusGone || ev.Object.Reason != metav1.StatusReasonExpired {
		t.Errorf("want ERROR 410 Expired, got %s %d %s", ev.Type, ev.Object.Code, ev.Object.Reason)
	}
	// A client-go watch sees it as an error event too.
	w, err := e.serving.ServingV1().Services("default").Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case got := <-w.ResultChan():
		if st, ok := got.Object.(*metav1.Status); got.Type != "ERROR" || !ok || st.Code != 410 {
			t.Errorf("client-go event %s %T", got.Type, got.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// TestInformer: Knative's generated informers (list, then watch from the
// list's resourceVersion, with bookmarks allowed) see creations, updates
// and deletions.
func TestInformer(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(e.serving, 0)
	inf := factory.Serving().V1().Services()
	events := make(chan string, 100)
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { events <- "add " + o.(*servingv1.Service).Name },
		UpdateFunc: func(_, o interface{}) { events <- "update " + o.(*servingv1.Service).Name },
		DeleteFunc: func(o interface{}) {
			if s, ok := o.(*servingv1.Service); ok {
				events <- "delete " + s.Name
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("before", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	s, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("after", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = map[string]string{"a": "b"}
	if _, err := e.serving.ServingV1().Services("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.serving.ServingV1().Services("default").Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add before", "add after", "update after", "delete after"}
	for _, w := range want {
		select {
		case got := <-events:
			if got != w {
				t.Fatalf("event %q, want %q", got, w)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %q", w)
		}
	}
}

// TestWatchBookmarksOnlyNews: a watch that allows bookmarks gets one when
// the store went past revisions its client does not know of (changes its
// field selector filters out, writes to other resources), and none while
// nothing changes, so a server at rest does no work for its watches.
func TestWatchBookmarksOnlyNews(t *testing.T) {
	const every = 50 * time.Millisecond
	defer apiserver.SetBookmarkInterval(every)()
	e := newEnv(t)
	ctx := context.Background()
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	}
	first, err := e.kube.CoreV1().ConfigMaps("default").Create(ctx, cm("watched"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.url+cmPath+"?watch=true&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dwatched&resourceVersion="+first.ResourceVersion+"&timeoutSeconds=30", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type event struct {
		Type   string `json:"type"`
		Object struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"object"`
	}
	events := make(chan event, 10)
	go func() {
		defer close(events)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev event
			if dec.Decode(&ev) != nil {
				return
			}
			events <- ev
		}
	}()
	quiet := func(when string) {
		t.Helper()
		select { // ten intervals: a bookmark each interval would have come
		case ev := <-events:
			t.Fatalf("%s: got %s at %s, want nothing", when, ev.Type, ev.Object.Metadata.ResourceVersion)
		case <-time.After(10 * every):
		}
	}
	// bookmark expects the next event to be a BOOKMARK at rv or later.
	bookmark := func(when, rv string) {
		t.Helper()
		min, _ := strconv.ParseInt(rv, 10, 64)
		select {
		case ev := <-events:
			got, err := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
			if ev.Type != "BOOKMARK" || err != nil || got < min {
				t.Fatalf("%s: got %s at %s, want BOOKMARK at %s or later", when, ev.Type, ev.Object.Metadata.ResourceVersion, rv)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no bookmark", when)
		}
	}
	quiet("nothing changed")
	other, err := e.kube.CoreV1().ConfigMaps("default").Create(ctx, cm("other"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bookmark("after a change filtered out", other.ResourceVersion)
	quiet("after the bookmark")
	svc, err := e.serving.ServingV1().Services("default").Create(ctx, ksvc("elsewhere", "img"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bookmark("after another resource's write", svc.ResourceVersion)
}
