package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/store"
)

// TestListByLabel: lists by every kind of selector, whole and paged, in a
// namespace and across them, give what filtering the full list gives,
// also when labels change between pages (the later pages show the labels
// of the first page's revision).
func TestListByLabel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apps, tiers := []string{"a", "b", "c"}, []string{"web", "db"}
	for i := range 24 {
		ns := "default"
		if i%3 == 0 {
			ns = "other"
		}
		l := map[string]string{"app": apps[i%3], "n": fmt.Sprint(i)}
		if i%4 != 0 {
			l["tier"] = tiers[i%2]
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%02d", i), Labels: l}}
		if _, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := e.kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, selector := range []string{
		"app=a", "app==b", "app in (a,c)", "app=a,tier=web", "app in (a,b),tier!=db",
		"app=b,!tier", "app=c,tier", "tier notin (web)", "app=zzz", "app in (a),app in (b)",
	} {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"", "default"} {
			var want []string
			for _, cm := range all.Items {
				if (ns == "" || cm.Namespace == ns) && sel.Matches(labels.Set(cm.Labels)) {
					want = append(want, cm.Namespace+"/"+cm.Name)
				}
			}
			for _, limit := range []int64{0, 2} {
				var got []string
				tok := ""
				for range 50 {
					l, err := e.kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: limit, Continue: tok})
					if err != nil {
						t.Fatalf("%q: %v", selector, err)
					}
					for _, cm := range l.Items {
						got = append(got, cm.Namespace+"/"+cm.Name)
					}
					if tok = l.Continue; tok == "" {
						break
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%q in %q, limit %d: got %v, want %v", selector, ns, limit, got, want)
				}
			}
		}
	}

	// Labels changed after the first page: the later pages are read at
	// the first page's revision, labels included.
	cms := e.kube.CoreV1().ConfigMaps("default")
	first, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=b", Limit: 1})
	if err != nil || first.Continue == "" {
		t.Fatalf("first page: %v, continue %q", err, first.Continue)
	}
	var want []string
	for _, cm := range all.Items {
		if cm.Namespace == "default" && cm.Labels["app"] == "b" {
			want = append(want, cm.Name)
		}
	}
	// Move the last one out of app=b, one other into it, delete one.
	moved, err := cms.Get(ctx, want[len(want)-1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Labels["app"] = "c"
	if _, err := cms.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cms.Get(ctx, "cm02", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in.Labels["app"] = "b"
	if _, err := cms.Update(ctx, in, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, want[1], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := []string{first.Items[0].Name}
	for tok := first.Continue; tok != ""; {
		l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=b", Limit: 1, Continue: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range l.Items {
			if rv(t, cm.ResourceVersion) > rv(t, first.ResourceVersion) {
				t.Errorf("%s at resourceVersion %s, after the first page's %s", cm.Name, cm.ResourceVersion, first.ResourceVersion)
			}
			got = append(got, cm.Name)
		}
		tok = l.Continue
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged across label changes: got %v, want %v", got, want)
	}
	now, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app=b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(now.Items) != len(want)-1 || !slices.ContainsFunc(now.Items, func(cm corev1.ConfigMap) bool { return cm.Name == "cm02" }) {
		t.Errorf("app=b now: %d items, want %d with cm02", len(now.Items), len(want)-1)
	}
}

func rv(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// BenchmarkListByLabel lists the 5 Services labelled team=a among 500,
// through the API, with and without the store's label index.
func BenchmarkListByLabel(b *testing.B) {
	for _, indexed := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", indexed), func(b *testing.B) {
			env := apiservertest.StartWith(b, apiservertest.Options{NoLabelIndex: !indexed})
			cfg := *env.Config
			cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: measure the server
			c, err := servingclient.NewForConfig(&cfg)
			if err != nil {
				b.Fatal(err)
			}
			svcs := c.ServingV1().Services("default")
			ctx := context.Background()
			for i := range 500 {
				s := ksvc(fmt.Sprintf("s%03d", i), "127.0.0.1:1/app:v1")
				s.Labels = map[string]string{"team": "b"}
				if i%100 == 0 {
					s.Labels["team"] = "a"
				}
				if _, err := svcs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				l, err := svcs.List(ctx, metav1.ListOptions{LabelSelector: "team=a"})
				if err != nil || len(l.Items) != 5 {
					b.Fatalf("%v, %d items", err, len(l.Items))
				}
			}
		})
	}
}

func FuzzStoredLabels(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"labels":{"a":"b"}}}`, `{"metadata":{}}`, `{}`, `null`, `[]`, ``,
		`{"metadata":{"labels":{"a":1}}}`, `{"metadata":{"labels":null}}`, `{"metadata":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		l, err := apiserver.StoredLabels(store.Key{Resource: "r", Name: "n"}, value)
		if err != nil && l != nil {
			t.Fatalf("labels %v with error %v", l, err)
		}
	})
}

// TestDeleteCollectionByLabel: deletecollection with a label selector
// deletes what the selector matches and reads only the objects the label
// index names: an object of other labels that cannot even be decoded is
// never read (a full scan would fail on it).
func TestDeleteCollectionByLabel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cms := e.kube.CoreV1().ConfigMaps("default")
	for i := range 6 {
		app := []string{"a", "b"}[i%2]
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("del%d", i), Labels: map[string]string{"app": app}}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// data must be a map: decoding this object fails.
	bad := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"unreadable","namespace":"default","labels":{"app":"c"}},"data":5}`)
	if _, err := e.store.Create(store.Key{Resource: "configmaps", Namespace: "default", Name: "unreadable"}, func(int64) ([]byte, error) { return bad, nil }); err != nil {
		t.Fatal(err)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app in (a,x)"}); err != nil {
		t.Fatalf("deletecollection app in (a,x): %v", err)
	}
	left, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "app in (a,b)"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range left.Items {
		names = append(names, cm.Name)
	}
	if want := []string{"del1", "del3", "del5"}; !slices.Equal(names, want) {
		t.Errorf("left after deleting app=a: %v, want %v", names, want)
	}
	// A selector the index cannot narrow reads every object, the
	// unreadable one included: an error, as before.
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app!=zzz"}); err == nil {
		t.Error("deletecollection app!=zzz read past the unreadable object")
	}
}
