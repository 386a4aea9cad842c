package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/disk/disktest"
	"github.com/knbox/knbox/pkg/store"
)

const cmPath = "/api/v1/namespaces/default/configmaps"

// limitedServer is an API server over plain HTTP (the limits do not depend
// on TLS) whose clients are "tenant", allowed everything by RBAC (as a member
// of knbox's internal group, bound to cluster-admin) but not a member of
// system:masters, so limited; tweak adjusts its options.
type limitedServer struct {
	url   string
	store *store.Store
}

func startLimited(t *testing.T, dir string, so store.Options, tweak func(*apiserver.Options)) *limitedServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := store.Open(filepath.Join(dir, "knbox.db"), so)
	if err != nil {
		t.Fatal(err)
	}
	opts := apiserver.Options{
		Store: st, Kinds: apiserver.DefaultKinds(apiserver.SeedVersions()),
		Admitter: &admission.Admitter{Serving: servingConfig(t)},
		Authenticate: func(h string) (admission.User, bool) {
			if h == "Bearer "+testToken {
				return admission.User{Name: "tenant", Groups: []string{authz.InternalGroup}}, true
			}
			return admission.User{}, false
		},
	}
	if tweak != nil {
		tweak(&opts)
	}
	srv, err := apiserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		cancel()
		ts.Close()
		_ = st.Close()
	})
	return &limitedServer{url: ts.URL, store: st}
}

func (s *limitedServer) do(t *testing.T, method, path, ctype, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func statusOf(t *testing.T, body string) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" {
		t.Fatalf("not a Status: %s", body)
	}
	return st
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestJSONPatchCopyBomb is the finding: a JSON patch of "copy" operations
// that each double the object (1.7 KiB of patch) pushed the server to
// 1.65 GB. The copies may add at most the request body limit in all, as in
// Kubernetes: the patch gets 413, the object is unchanged and memory stays
// put.
func TestJSONPatchCopyBomb(t *testing.T) {
	s := startLimited(t, "", store.Options{}, nil)
	cm := `{"metadata":{"name":"bomb"},"data":{"a":"` + strings.Repeat("x", 1024) + `"}}`
	if code, _, body := s.do(t, "POST", cmPath, "application/json", cm); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	// Each pair of copies multiplies the object by 2.6: 100 MiB if applied
	// (and far more with a few pairs more).
	var ops []string
	for i := range 12 {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/metadata/annotations/k%d"}`, i),
			fmt.Sprintf(`{"op":"copy","from":"/metadata/annotations","path":"/data/d%d"}`, i))
	}
	patch := "[" + `{"op":"add","path":"/metadata/annotations","value":{}},` + strings.Join(ops, ",") + "]"
	before := heapAlloc()
	code, _, body := s.do(t, "PATCH", cmPath+"/bomb", "application/json-patch+json", patch)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(statusOf(t, body).Message, "copy") {
		t.Fatalf("patch bomb of %d bytes: %d %s", len(patch), code, body)
	}
	if grown := int64(heapAlloc()) - int64(before); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB", grown>>20)
	}
	// Read the data keys, not the body: its uid and managedFields may
	// hold "d0" by chance.
	_, _, body = s.do(t, "GET", cmPath+"/bomb", "", "")
	var got corev1.ConfigMap
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("get: %v %s", err, body)
	}
	if _, ok := got.Data["d0"]; ok || len(got.Annotations) != 0 {
		t.Errorf("the refused patch changed the object: data %d keys, annotations %v", len(got.Data), got.Annotations)
	}
}

// TestObjectSizeLimits: an object larger than its kind's limit is refused
// with 413 naming the limit (a create, and a merge patch that grows one);
// other kinds keep the general limit.
func TestObjectSizeLimits(t *testing.T) {
	s := startLimited(t, "", store.Options{MaxValueBytesByResource: map[string]int64{"configmaps": 8 << 10}}, nil)
	big := strings.Repeat("x", 16<<10)
	code, _, body := s.do(t, "POST", cmPath, "application/json", `{"metadata":{"name":"big"},"data":{"a":"`+big+`"}}`)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "the limit for configmaps is 8192 bytes") {
		t.Fatalf("create over the limit: %d %s", code, body)
	}
	if code, _, body := s.do(t, "POST", cmPath, "application/json", `{"metadata":{"name":"small"},"data":{"a":"b"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	code, _, body = s.do(t, "PATCH", cmPath+"/small", "application/merge-patch+json", `{"data":{"a":"`+big+`"}}`)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("patch over the limit: %d %s", code, body)
	}
	if code, _, body := s.do(t, "POST", "/api/v1/namespaces/default/secrets", "application/json",
		`{"metadata":{"name":"s"},"stringData":{"a":"`+big+`"}}`); code != 201 {
		t.Fatalf("a Secret under the general limit: %d %s", code, body)
	}
}

// TestTooManyRequests: requests over the in-flight limit of their class
// get 429 with Retry-After, as kube-apiserver answers; watches are not
// counted against reads; the exempt groups are never turned away.
func TestTooManyRequests(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	entered := make(chan struct{}, 8)
	s := startLimited(t, "", store.Options{}, func(o *apiserver.Options) {
		o.Limits = apiserver.Limits{MaxRequestsInFlight: 1, MaxMutatingRequestsInFlight: 1}
		o.Extensions = map[string]http.Handler{"block": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
		})}
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.do(t, "GET", "/knbox/v1/block", "", "") }()
	go func() { defer wg.Done(); s.do(t, "POST", "/knbox/v1/block", "", "") }()
	for range 2 {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the blocking requests did not reach their handler")
		}
	}
	code, hdr, body := s.do(t, "GET", cmPath, "", "")
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || statusOf(t, body).Reason != metav1.StatusReasonTooManyRequests {
		t.Errorf("a read over the limit: %d %v %s", code, hdr, body)
	}
	if code, _, body := s.do(t, "POST", cmPath, "application/json", `{"metadata":{"name":"c"}}`); code != http.StatusTooManyRequests {
		t.Errorf("a write over the limit: %d %s", code, body)
	}
	// A watch is long-running: it is served.
	req, _ := http.NewRequest("GET", s.url+cmPath+"?watch=true&timeoutSeconds=1", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a watch with reads at their limit: %d", resp.StatusCode)
	}
	free()
	wg.Wait()
	if code, _, body := s.do(t, "GET", cmPath, "", ""); code != 200 {
		t.Errorf("a read after the others ended: %d %s", code, body)
	}
}

// TestLowDisk is the finding: with the data dir's disk full, /readyz said
// "ok" while creates failed with 500, and deleting could not free space.
// Now /readyz fails naming the disk, creates get 507 with a message, and
// deletes (with foreground propagation, which marks the object first) go
// through.
func TestLowDisk(t *testing.T) {
	dir := disktest.SmallFS(t, 32<<20)
	s := startLimited(t, dir, store.Options{MinFreeBytes: 2 << 20, ReserveBytes: 4 << 20}, nil)
	for i := range 20 {
		body := fmt.Sprintf(`{"metadata":{"name":"c%d","finalizers":["example.com/keep"]},"data":{"a":"%s"}}`, i, strings.Repeat("x", 32<<10))
		if code, _, body := s.do(t, "POST", cmPath, "application/json", body); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	if code, _, body := s.do(t, "GET", "/readyz", "", ""); code != 200 || body != "ok" {
		t.Fatalf("readyz with room: %d %s", code, body)
	}
	freeDisk := disktest.Fill(t, dir)

	code, _, body := s.do(t, "GET", "/readyz?verbose", "", "")
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]store failed") || !strings.Contains(body, "minFreeBytes") {
		t.Errorf("readyz on a full disk: %d %s", code, body)
	}
	req, _ := http.NewRequest("GET", s.url+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	anon, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !bytes.Contains(anon, []byte("reason withheld")) {
		t.Errorf("readyz without a token: %d %s", resp.StatusCode, anon)
	}
	code, _, body = s.do(t, "POST", cmPath, "application/json", `{"metadata":{"name":"new"}}`)
	if code != http.StatusInsufficientStorage || !strings.Contains(statusOf(t, body).Message, "delete objects or free disk space") {
		t.Errorf("create on a full disk: %d %s", code, body)
	}
	for i := range 20 {
		name := fmt.Sprintf("c%d", i)
		if code, _, body := s.do(t, "DELETE", cmPath+"/"+name+"?propagationPolicy=Foreground", "", ""); code != 200 && code != 202 {
			t.Fatalf("delete %s on a full disk: %d %s", name, code, body)
		}
		// The finalizer goes as a client would remove it: a patch of an
		// object being deleted.
		if code, _, body := s.do(t, "PATCH", cmPath+"/"+name, "application/merge-patch+json", `{"metadata":{"finalizers":null}}`); code != 200 && code != 404 {
			t.Fatalf("remove the finalizer of %s on a full disk: %d %s", name, code, body)
		}
	}
	if code, _, body := s.do(t, "GET", cmPath, "", ""); code != 200 || strings.Contains(body, `"c1"`) {
		t.Errorf("objects left after the deletes: %d %s", code, body)
	}
	freeDisk()
	eventually(t, 10*time.Second, "ready again", func() bool {
		code, _, _ := s.do(t, "GET", "/readyz", "", "")
		return code == 200
	})
	if code, _, body := s.do(t, "POST", cmPath, "application/json", `{"metadata":{"name":"new"}}`); code != 201 {
		t.Errorf("create after freeing space: %d %s", code, body)
	}
}
