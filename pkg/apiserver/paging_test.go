package apiserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"

	"github.com/knbox/knbox/pkg/store"
)

func configMap(ns, name, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"v": v}},
		Data: map[string]string{"v": v}}
}

// TestPagedListIsOneSnapshot: pages after the first show the objects as
// they were when the first page was read, whatever was written since.
func TestPagedListIsOneSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := e.kube.CoreV1().ConfigMaps("default")
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if _, err := cms.Create(ctx, configMap("default", n, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.kube.CoreV1().ConfigMaps("other").Create(ctx, configMap("other", "a", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first, err := cms.List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 2 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != 3 {
		t.Fatalf("first page: %d items, continue %q, remaining %v", len(first.Items), first.Continue, first.RemainingItemCount)
	}
	// Writes after the first page: none of them shows in the later pages.
	c, err := cms.Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Data["v"] = "2"
	if _, err := cms.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, configMap("default", "cc", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{first.Items[0].Name, first.Items[1].Name}
	tok := first.Continue
	for range 10 {
		page, err := cms.List(ctx, metav1.ListOptions{Limit: 2, Continue: tok})
		if err != nil {
			t.Fatal(err)
		}
		if page.ResourceVersion != first.ResourceVersion {
			t.Errorf("page at resourceVersion %s, the first at %s", page.ResourceVersion, first.ResourceVersion)
		}
		for _, cm := range page.Items {
			names = append(names, cm.Name)
			if cm.Name == "c" && cm.Data["v"] != "1" {
				t.Errorf("c in a later page: %v, want its value at the first page", cm.Data)
			}
		}
		if tok = page.Continue; tok == "" {
			break
		}
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(names, want) {
		t.Errorf("paged list = %v, want %v", names, want)
	}

	// client-go's pager, across namespaces, with a label selector.
	var all []string
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return e.kube.CoreV1().ConfigMaps("").List(ctx, opts)
	})
	p.PageSize = 1
	err = p.EachListItem(ctx, metav1.ListOptions{LabelSelector: "v=1"}, func(o runtime.Object) error {
		cm := o.(*corev1.ConfigMap)
		all = append(all, cm.Namespace+"/"+cm.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"default/a", "default/b", "default/c", "default/cc", "default/e", "other/a"}; !slices.Equal(all, want) {
		t.Errorf("pager = %v, want %v", all, want)
	}
	// A selector hides the count of what remains.
	sel, err := e.kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: "v=1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Items) != 1 || sel.Continue == "" || sel.RemainingItemCount != nil {
		t.Errorf("selected page: %d items, continue %q, remaining %v", len(sel.Items), sel.Continue, sel.RemainingItemCount)
	}
	// A cluster-scoped kind.
	nss, err := e.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for tok := nss.Continue; tok != "" && n < 100; n++ {
		page, err := e.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1, Continue: tok})
		if err != nil {
			t.Fatal(err)
		}
		tok = page.Continue
	}
	whole, err := e.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(whole.Items) || whole.Continue != "" {
		t.Errorf("namespaces: %d pages of 1, %d in one list", n, len(whole.Items))
	}
}

// TestPagedListExpired: a token whose revision the store's log no longer
// covers is 410 Expired with a token that continues at the latest revision.
func TestPagedListExpired(t *testing.T) {
	e := startEnv(t, t.TempDir(), store.Options{EventLogSize: 8})
	ctx := context.Background()
	cms := e.kube.CoreV1().ConfigMaps("default")
	for i := range 3 {
		if _, err := cms.Create(ctx, configMap("default", fmt.Sprint("cm", i), "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := cms.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := cms.Create(ctx, configMap("default", fmt.Sprint("new", i), "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = cms.List(ctx, metav1.ListOptions{Limit: 1, Continue: first.Continue})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("continue after compaction: %v, want 410 Expired", err)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Code != http.StatusGone || st.ListMeta.Continue == "" {
		t.Fatalf("status %+v, want 410 with a continue token", st)
	}
	page, err := cms.List(ctx, metav1.ListOptions{Limit: 100, Continue: st.ListMeta.Continue})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 12 || page.Items[0].Name != "cm1" {
		t.Errorf("inconsistent continuation: %d items from %s", len(page.Items), page.Items[0].Name)
	}
	// An exact resourceVersion the log no longer covers.
	_, err = cms.List(ctx, metav1.ListOptions{Limit: 1, ResourceVersion: first.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("exact list at a compacted revision: %v, want 410", err)
	}
}

func TestPagedListBadInput(t *testing.T) {
	e := newEnv(t)
	tok := func(v string) string {
		b, _ := json.Marshal(map[string]any{"v": "meta.k8s.io/v1", "rv": 1, "start": v})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	const cms = "/api/v1/namespaces/default/configmaps"
	for _, q := range []string{
		"limit=x",
		"continue=!!!",
		"continue=bm90IGpzb24",
		"continue=" + tok("../x"),
		"continue=" + tok(""),
		"continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":0,"start":"a"}`)),
		"continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":"other","rv":1,"start":"a"}`)),
		"continue=" + tok("a") + "&resourceVersion=5",
		"resourceVersion=x&limit=1",
		"resourceVersionMatch=Exact",
		"resourceVersionMatch=Sometimes&resourceVersion=1",
	} {
		code, body := e.do("GET", cms+"?"+q, "", nil)
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	code, body := e.do("GET", cms+"?limit=1&resourceVersion=999999&resourceVersionMatch=Exact", "", nil)
	if code != http.StatusGatewayTimeout {
		t.Errorf("list at a future revision: %d %s, want 504 (too large resource version)", code, body)
	}
	if code, body := e.do("GET", cms+"?limit=-3", "", nil); code != http.StatusOK {
		t.Errorf("negative limit: %d %s, want the whole list", code, body)
	}
}
