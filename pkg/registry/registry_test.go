package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/knbox/knbox/pkg/image"
)

// Tokens of the test: alice may push and pull in team-a, viewer may pull
// in team-a.
const (
	aliceToken  = "alice-token"
	viewerToken = "viewer-token"
)

type fixture struct {
	store *image.Store
	h     *Handler
	srv   *httptest.Server
	host  string
	now   time.Time
}

func newFixture(t testing.TB, mod func(*Options)) *fixture {
	t.Helper()
	f := &fixture{now: time.Unix(1_700_000_000, 0)}
	srv := httptest.NewUnstartedServer(nil)
	f.host = srv.Listener.Addr().String()
	st, err := image.Open(image.Options{Root: t.TempDir(), LocalRegistries: []string{f.host, "registry.knbox.local"}, BlobGrace: time.Nanosecond, Limits: image.Limits{MinFreeBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	f.store = st
	opts := Options{
		Store: st,
		Authenticate: func(token string) (user.Info, bool) {
			switch token {
			case aliceToken:
				return &user.DefaultInfo{Name: "alice"}, true
			case viewerToken:
				return &user.DefaultInfo{Name: "viewer"}, true
			}
			return nil, false
		},
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetAPIGroup() != APIGroup || a.GetResource() != Resource || a.GetNamespace() != "team-a" {
				return authorizer.DecisionNoOpinion, "", nil
			}
			switch a.GetUser().GetName() {
			case "alice":
				return authorizer.DecisionAllow, "", nil
			case "viewer":
				if a.GetVerb() == "get" {
					return authorizer.DecisionAllow, "", nil
				}
			}
			return authorizer.DecisionNoOpinion, "", nil
		}),
		Now: func() time.Time { return f.now },
	}
	if mod != nil {
		mod(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	f.srv = srv
	return f
}

func (f *fixture) ref(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(f.host + "/" + s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func basic(token string) authn.Authenticator {
	return &authn.Basic{Username: "anyone", Password: token}
}

// do sends a raw request with alice's token.
func (f *fixture) do(t *testing.T, method, path string, body []byte, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var body struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &body); err != nil || len(body.Errors) == 0 {
		t.Fatalf("status %d, body %q: not a registry error", resp.StatusCode, raw)
	}
	t.Logf("%d %s: %s", resp.StatusCode, body.Errors[0].Code, body.Errors[0].Message)
	return body.Errors[0].Code
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestPushThenPullWithoutNetwork pushes with go-containerregistry's
// remote.Write (Basic authentication, any user, the token as password),
// reads it back, then stops the registry and has the image cache resolve
// and pull the pushed tag: from the local blobs, with no network.
func TestPushThenPullWithoutNetwork(t *testing.T) {
	f := newFixture(t, nil)
	img, err := random.Image(2048, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := f.ref(t, "team-a/app:v1")
	if err := remote.Write(ref, img, remote.WithAuth(basic(aliceToken))); err != nil {
		t.Fatalf("push: %v", err)
	}
	want, _ := img.Digest()
	// Pulled back over the protocol, by the viewer, with a Bearer token.
	got, err := remote.Image(ref, remote.WithAuth(&authn.Bearer{Token: viewerToken}))
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if d, _ := got.Digest(); d != want {
		t.Fatalf("pulled %s, pushed %s", d, want)
	}
	layers, _ := got.Layers()
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil { // the digest is checked at EOF
			t.Fatalf("layer: %v", err)
		}
		rc.Close()
	}
	tags, err := remote.List(ref.Context(), remote.WithAuth(basic(aliceToken)))
	if err != nil || len(tags) != 1 || tags[0] != "v1" {
		t.Fatalf("tags: %v %v", tags, err)
	}

	f.srv.Close() // no network from here on
	for _, r := range []string{f.host + "/team-a/app:v1", "registry.knbox.local/team-a/app:v1"} {
		resolved, err := f.store.Resolve(context.Background(), r, nil)
		if err != nil {
			t.Fatalf("resolve %s: %v", r, err)
		}
		if !strings.HasSuffix(resolved, "@"+want.String()) {
			t.Fatalf("resolve %s = %s, want digest %s", r, resolved, want)
		}
		pulled, err := f.store.Pull(context.Background(), resolved, nil)
		if err != nil {
			t.Fatalf("pull %s: %v", resolved, err)
		}
		if pulled.Digest != want.String() || len(pulled.Layers) != 3 {
			t.Fatalf("pulled %+v", pulled)
		}
	}
	if _, err := f.store.Resolve(context.Background(), "registry.knbox.local/team-a/app:nope", nil); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("resolve of a tag never pushed: %v, want ErrNotFound", err)
	}
}

// TestAuthentication: no token or a wrong one gets 401 with the Basic
// challenge docker expects; another namespace 403; the viewer cannot push.
func TestAuthentication(t *testing.T) {
	f := newFixture(t, nil)
	resp, err := http.Get(f.srv.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm=") {
		t.Fatalf("GET /v2/ without a token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp := f.do(t, http.MethodGet, "/v2/", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/ with a token: %d", resp.StatusCode)
	}
	img, _ := random.Image(100, 1)
	status := func(err error) int {
		var te *transport.Error
		if !errors.As(err, &te) {
			t.Fatalf("want a registry error, got %v", err)
		}
		t.Log(err)
		return te.StatusCode
	}
	if err := remote.Write(f.ref(t, "team-a/app:v1"), img); status(err) != http.StatusUnauthorized {
		t.Fatalf("anonymous push: %v", err)
	}
	if err := remote.Write(f.ref(t, "team-a/app:v1"), img, remote.WithAuth(basic("wrong"))); status(err) != http.StatusUnauthorized {
		t.Fatalf("push with a wrong token: %v", err)
	}
	if err := remote.Write(f.ref(t, "team-b/app:v1"), img, remote.WithAuth(basic(aliceToken))); status(err) != http.StatusForbidden {
		t.Fatalf("push to another namespace: %v", err)
	}
	if err := remote.Write(f.ref(t, "team-a/app:v1"), img, remote.WithAuth(basic(viewerToken))); status(err) != http.StatusForbidden {
		t.Fatalf("push by a viewer: %v", err)
	}
}

// TestHostileInput: wrong digests, manifests that are malformed or name
// blobs never pushed, sizes over the limits, names that are not names.
func TestHostileInput(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBlobBytes = 1024; o.MaxManifestBytes = 4096 })
	blob := []byte("hello")
	d := digestOf(blob)
	cases := []struct {
		name, method, path string
		body               []byte
		hdr                map[string]string
		status             int
		code               string
	}{
		{"wrong digest, monolithic", "POST", "/v2/team-a/app/blobs/uploads/?digest=" + digestOf([]byte("other")), blob, nil, 400, "DIGEST_INVALID"},
		{"not a digest", "POST", "/v2/team-a/app/blobs/uploads/?digest=md5:abc", blob, nil, 400, "DIGEST_INVALID"},
		{"blob over the limit", "POST", "/v2/team-a/app/blobs/uploads/?digest=" + d, bytes.Repeat([]byte("x"), 1025), nil, 413, "SIZE_INVALID"},
		{"manifest over the limit", "PUT", "/v2/team-a/app/manifests/v1", bytes.Repeat([]byte(" "), 4097), nil, 413, "SIZE_INVALID"},
		{"manifest not JSON", "PUT", "/v2/team-a/app/manifests/v1", []byte("{"), nil, 400, "MANIFEST_INVALID"},
		{"manifest of an unknown type", "PUT", "/v2/team-a/app/manifests/v1", []byte(`{"schemaVersion":2,"mediaType":"text/plain"}`), nil, 400, "MANIFEST_INVALID"},
		{"manifest without config", "PUT", "/v2/team-a/app/manifests/v1", []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`), nil, 400, "MANIFEST_INVALID"},
		{"manifest naming a missing blob", "PUT", "/v2/team-a/app/manifests/v1", []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + digestOf([]byte("{}")) + `","size":2},"layers":[]}`), nil, 400, "MANIFEST_BLOB_UNKNOWN"},
		{"manifest by a digest it is not", "PUT", "/v2/team-a/app/manifests/" + d, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), nil, 400, "DIGEST_INVALID"},
		{"dot-dot repository", "GET", "/v2/team-a/../etc/manifests/v1", nil, nil, 400, "NAME_INVALID"},
		{"repository without namespace", "GET", "/v2/app/manifests/v1", nil, nil, 400, "NAME_INVALID"},
		{"uppercase repository", "GET", "/v2/Team-a/app/manifests/v1", nil, nil, 400, "NAME_INVALID"},
		{"namespace not a label", "GET", "/v2/team.a/app/manifests/v1", nil, nil, 400, "NAME_INVALID"},
		{"tag with a slash-free traversal", "GET", "/v2/team-a/app/manifests/..", nil, nil, 400, "TAG_INVALID"},
		{"upload id with slashes", "PATCH", "/v2/team-a/app/blobs/uploads/..%2f..%2fx", nil, nil, 404, "NAME_UNKNOWN"},
		{"upload id not ours", "PATCH", "/v2/team-a/app/blobs/uploads/..", nil, nil, 404, "BLOB_UPLOAD_UNKNOWN"},
		{"unknown upload", "PATCH", "/v2/team-a/app/blobs/uploads/0123456789abcdef0123456789abcdef", nil, nil, 404, "BLOB_UPLOAD_UNKNOWN"},
		{"unknown blob", "GET", "/v2/team-a/app/blobs/" + d, nil, nil, 404, "BLOB_UNKNOWN"},
		{"unknown manifest", "GET", "/v2/team-a/app/manifests/v9", nil, nil, 404, "MANIFEST_UNKNOWN"},
		{"unknown repository's tags", "GET", "/v2/team-a/nothing/tags/list", nil, nil, 404, "NAME_UNKNOWN"},
		{"bad page size", "GET", "/v2/team-a/nothing/tags/list?n=-1", nil, nil, 404, "NAME_UNKNOWN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := f.do(t, c.method, c.path, c.body, c.hdr)
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d", resp.StatusCode, c.status)
			}
			if code := errorCode(t, resp); code != c.code {
				t.Errorf("code %s, want %s", code, c.code)
			}
		})
	}
	// A blob pushed to team-a/app is not reachable through team-a/other,
	// nor usable by its manifests.
	if resp := f.do(t, "POST", "/v2/team-a/app/blobs/uploads/?digest="+d, blob, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("push blob: %d", resp.StatusCode)
	}
	if resp := f.do(t, "GET", "/v2/team-a/other/blobs/"+d, nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("blob through another repository: %d", resp.StatusCode)
	}
	// A mount needs get on the source: alice has it in team-a.
	if resp := f.do(t, "POST", "/v2/team-a/other/blobs/uploads/?mount="+d+"&from=team-a/app", nil, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("mount: %d", resp.StatusCode)
	}
	if resp := f.do(t, "GET", "/v2/team-a/other/blobs/"+d, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("mounted blob: %d", resp.StatusCode)
	}
}

// TestChunkedUpload sends a blob in chunks, checks out-of-order chunks are
// refused, and that a chunk over the limit ends the session with 413.
func TestChunkedUpload(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxBlobBytes = 64 })
	resp := f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	loc := resp.Header.Get("Location")
	if resp := f.do(t, "PATCH", loc, []byte("hello "), map[string]string{"Content-Range": "0-5"}); resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-5" {
		t.Fatalf("chunk 1: %d %q", resp.StatusCode, resp.Header.Get("Range"))
	}
	if resp := f.do(t, "PATCH", loc, []byte("x"), map[string]string{"Content-Range": "0-0"}); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("chunk out of order: %d", resp.StatusCode)
	}
	if resp := f.do(t, "PATCH", loc, []byte("world"), nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("chunk 2: %d", resp.StatusCode)
	}
	if resp := f.do(t, "PUT", loc+"?digest="+digestOf([]byte("hello world")), nil, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("finish: %d %s", resp.StatusCode, errorCode(t, resp))
	}
	resp = f.do(t, "GET", "/v2/team-a/app/blobs/"+digestOf([]byte("hello world")), nil, nil)
	if b, _ := io.ReadAll(resp.Body); string(b) != "hello world" {
		t.Fatalf("blob %q", b)
	}
	// Over the limit in two chunks.
	resp = f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil)
	loc = resp.Header.Get("Location")
	f.do(t, "PATCH", loc, bytes.Repeat([]byte("a"), 40), nil)
	resp = f.do(t, "PATCH", loc, bytes.Repeat([]byte("a"), 40), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the limit: %d", resp.StatusCode)
	}
	if resp := f.do(t, "PATCH", loc, []byte("a"), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session after 413: %d", resp.StatusCode)
	}
	// Over the limit in a body of unknown length: counted as it streams.
	resp = f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil)
	req, _ := http.NewRequest("PATCH", f.srv.URL+resp.Header.Get("Location"), io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("b"), 100))))
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	streamed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	streamed.Body.Close()
	if req.ContentLength != 0 || streamed.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("streamed over the limit: length %d, status %d", req.ContentLength, streamed.StatusCode)
	}
}

// TestUploadSessionsBounded: MaxUploads sessions at once (429 beyond),
// and idle sessions expire after UploadTTL.
func TestUploadSessionsBounded(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxUploads = 2; o.UploadTTL = time.Minute })
	var locs []string
	for range 2 {
		resp := f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("start: %d", resp.StatusCode)
		}
		locs = append(locs, resp.Header.Get("Location"))
	}
	if resp := f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third session: %d", resp.StatusCode)
	}
	f.now = f.now.Add(2 * time.Minute)
	if resp := f.do(t, "PATCH", locs[0], []byte("x"), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("expired session: %d", resp.StatusCode)
	}
	if resp := f.do(t, "POST", "/v2/team-a/app/blobs/uploads/", nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("session after expiry: %d", resp.StatusCode)
	}
}

// TestPruneKeepsTagged: the cache's Prune keeps what tags reference and
// removes an overwritten tag's image and its blobs (past the grace).
func TestPruneKeepsTagged(t *testing.T) {
	f := newFixture(t, nil)
	old, _ := random.Image(512, 1)
	cur, _ := random.Image(512, 1)
	ref := f.ref(t, "team-a/app:v1")
	for _, img := range []v1.Image{old, cur} {
		if err := remote.Write(ref, img, remote.WithAuth(basic(aliceToken))); err != nil {
			t.Fatal(err)
		}
	}
	// Pulled into the cache too (unpacked), as a Revision would.
	if _, err := f.store.Pull(context.Background(), ref.String(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Prune(nil); err != nil {
		t.Fatal(err)
	}
	layerOf := func(img v1.Image) string {
		ls, _ := img.Layers()
		d, _ := ls[0].Digest()
		return d.String()
	}
	oldD, _ := old.Digest()
	curD, _ := cur.Digest()
	for _, c := range []struct {
		path string
		want int
	}{
		{"/v2/team-a/app/manifests/" + oldD.String(), http.StatusNotFound},
		{"/v2/team-a/app/blobs/" + layerOf(old), http.StatusNotFound},
		{"/v2/team-a/app/manifests/" + curD.String(), http.StatusOK},
		{"/v2/team-a/app/manifests/v1", http.StatusOK},
		{"/v2/team-a/app/blobs/" + layerOf(cur), http.StatusOK},
	} {
		if resp := f.do(t, "GET", c.path, nil, nil); resp.StatusCode != c.want {
			t.Errorf("GET %s after prune: %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}
	infos, _ := f.store.List()
	if len(infos) != 1 || infos[0].Digest != curD.String() {
		t.Errorf("cached images after prune: %+v, want only %s", infos, curD)
	}
}

// BenchmarkPush: remote.Write of an image with one 16 MiB layer (random,
// so gzip does not shrink it) into the registry, each push a new image.
func BenchmarkPush(b *testing.B) {
	f := newFixture(b, nil)
	const size = 16 << 20
	b.SetBytes(size)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		img, err := random.Image(size, 1)
		if err != nil {
			b.Fatal(err)
		}
		ref, _ := name.ParseReference(f.host + "/team-a/bench:v1")
		b.StartTimer()
		if err := remote.Write(ref, img, remote.WithAuth(basic(aliceToken))); err != nil {
			b.Fatal(err)
		}
	}
}
