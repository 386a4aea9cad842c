// Command api measures knbox's API server: the cost of a write and a read
// through the whole HTTPS + admission + store path, next to the store
// alone (the baseline, measured in the same run), the same read by a user
// whom RBAC authorizes (among a hundred other bindings) rather than
// system:masters, a server-side apply that changes the object and one that
// does not, and how fast a watch delivers a change. It prints one
// table. Run: go run ./bench/api [-n N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
	"github.com/knbox/knbox/pkg/store"
)

type result struct {
	name    string
	samples []time.Duration
}

func (r result) pct(p float64) time.Duration {
	s := append([]time.Duration(nil), r.samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func timeN(n int, f func(i int) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := f(i); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func main() {
	n := flag.Int("n", 200, "operations per measurement (bounded)")
	flag.Parse()
	if *n < 10 || *n > 10000 {
		fmt.Fprintln(os.Stderr, "-n must be within 10..10000")
		os.Exit(2)
	}
	// apiservertest wants a testing.TB; a benchmark's B works outside go test.
	var results []result
	testing.Benchmark(func(b *testing.B) {
		b.StopTimer()
		if b.N > 1 {
			b.SkipNow() // one pass is enough: we time each operation ourselves
		}
		results = run(b, *n)
	})
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "benchmark failed")
		os.Exit(1)
	}
	base := results[0].pct(0.5)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "operation\tn\tp50\tp95\tp99\tp50 / store create\t\n")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%d\t%v\t%v\t%v\t%.1fx\t\n", r.name, len(r.samples), r.pct(0.5).Round(time.Microsecond),
			r.pct(0.95).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), float64(r.pct(0.5))/float64(base))
	}
	w.Flush()
}

func run(b *testing.B, n int) []result {
	ctx := context.Background()
	fail := func(err error) []result {
		fmt.Fprintln(os.Stderr, err)
		return nil
	}
	// Baseline: the store alone (bbolt, fsync per commit).
	st, err := store.Open(filepath.Join(b.TempDir(), "base.db"), store.Options{})
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	val := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)
	storeCreate, err := timeN(n, func(i int) error {
		_, err := st.Create(store.Key{Resource: "configmaps", Namespace: "default", Name: strconv.Itoa(i)}, func(int64) ([]byte, error) { return val, nil })
		return err
	})
	if err != nil {
		return fail(err)
	}

	env := apiservertest.StartWith(b, apiservertest.Options{Users: map[string]admission.User{"editor": {Name: "editor"}}})
	cfg := *env.Config
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cl, err := servingclient.NewForConfig(&cfg)
	if err != nil {
		return fail(err)
	}
	svcs := cl.ServingV1().Services("default")
	mk := func(i int) *servingv1.Service {
		s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%05d", i)}}
		s.Spec.Template.Spec.Containers = []corev1.Container{{Image: "127.0.0.1:1/app:v1"}}
		return s
	}
	apiCreate, err := timeN(n, func(i int) error { _, err := svcs.Create(ctx, mk(i), metav1.CreateOptions{}); return err })
	if err != nil {
		return fail(err)
	}
	apiGet, err := timeN(n, func(i int) error { _, err := svcs.Get(ctx, fmt.Sprintf("s%05d", i), metav1.GetOptions{}); return err })
	if err != nil {
		return fail(err)
	}
	// The same reads by a user whom RBAC authorizes: bound to edit in
	// default among 100 other RoleBindings and 20 ClusterRoleBindings.
	kube, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		return fail(err)
	}
	bind := func(i int) error {
		user := fmt.Sprintf("user-%d", i)
		if i < 0 {
			user = "editor"
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b-" + user}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		_, err := kube.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{})
		return err
	}
	for i := 0; i < 100; i++ {
		if err := bind(i); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < 20; i++ {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("group-%d", i)}}}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			return fail(err)
		}
	}
	if err := bind(-1); err != nil {
		return fail(err)
	}
	ecfg := *env.ConfigFor("editor")
	ecfg.QPS, ecfg.Burst = 1e6, 1e6
	ecl, err := servingclient.NewForConfig(&ecfg)
	if err != nil {
		return fail(err)
	}
	esvcs := ecl.ServingV1().Services("default")
	editorGet, err := timeN(n, func(i int) error { _, err := esvcs.Get(ctx, fmt.Sprintf("s%05d", i), metav1.GetOptions{}); return err })
	if err != nil {
		return fail(err)
	}
	// Server-side apply of the Services created above: first with a change
	// (a label: the field manager merges and a write is stored), then the
	// same configuration again (merged, found unchanged, nothing stored).
	applyCfg := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"s%05d","labels":{"applied":"yes"}},"spec":{"template":{"spec":{"containers":[{"image":"127.0.0.1:1/app:v1"}]}}}}`, i))
	}
	force := true // takes the containers over from the creator, as GitOps tools do
	apply := func(i int) error {
		_, err := svcs.Patch(ctx, fmt.Sprintf("s%05d", i), types.ApplyPatchType, applyCfg(i), metav1.PatchOptions{FieldManager: "bench", Force: &force})
		return err
	}
	apiApply, err := timeN(n, apply)
	if err != nil {
		return fail(err)
	}
	apiApplyNoop, err := timeN(n, apply)
	if err != nil {
		return fail(err)
	}
	apiList, err := timeN(20, func(int) error { _, err := svcs.List(ctx, metav1.ListOptions{}); return err })
	if err != nil {
		return fail(err)
	}
	w, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: "", LabelSelector: "bench=watch"})
	if err != nil {
		return fail(err)
	}
	defer w.Stop()
	watchLatency, err := timeN(n/4, func(i int) error {
		s := mk(100000 + i)
		s.Labels = map[string]string{"bench": "watch"}
		if _, err := svcs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added {
				return fmt.Errorf("watch event %s", ev.Type)
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("watch event did not arrive")
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return []result{
		{"store create (baseline, fsync)", storeCreate},
		{"API create ksvc (HTTPS+admission+store)", apiCreate},
		{"API get ksvc (system:masters)", apiGet},
		{"API get ksvc (RBAC: edit, 120 bindings)", editorGet},
		{"API server-side apply ksvc (a change)", apiApply},
		{"API server-side apply ksvc (unchanged)", apiApplyNoop},
		{fmt.Sprintf("API list %d ksvc", n), apiList},
		{"create -> watch event", watchLatency},
	}
}
