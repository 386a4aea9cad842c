package registry

import (
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/image"
)

// FuzzParseRoute: any path parses to a route whose repository, reference
// and upload id are safe to use as file names, or to an error.
func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{
		"/v2/", "/v2", "/v2/_catalog", "/v2/ns/app/tags/list", "/v2/ns/app/blobs/uploads/",
		"/v2/ns/app/blobs/uploads/0123456789abcdef0123456789abcdef",
		"/v2/ns/a/b/manifests/v1", "/v2/ns/app/manifests/sha256:" + strings.Repeat("a", 64),
		"/v2/ns/app/blobs/sha256:" + strings.Repeat("0", 64), "/v2/ns/../x/manifests/v1",
		"/v2/ns/blobs/blobs/uploads/", "/v2/ns/manifests/manifests/manifests", "/v2//manifests/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r, err := parseRoute(p)
		if err != nil {
			return
		}
		if r.kind == routeBase || r.kind == routeCatalog {
			return
		}
		if !image.ValidRepository(r.repo) || r.namespace == "" || r.name == "" {
			t.Fatalf("%q: repository %q accepted", p, r.repo)
		}
		for _, seg := range strings.Split(r.repo, "/") {
			if seg == "." || seg == ".." || seg == "" {
				t.Fatalf("%q: repository %q has segment %q", p, r.repo, seg)
			}
		}
		if strings.ContainsAny(r.ref, "/\\\x00") || r.ref == ".." || r.ref == "." {
			t.Fatalf("%q: reference %q accepted", p, r.ref)
		}
		switch r.kind {
		case routeBlob:
			if !image.ValidDigest(r.ref) {
				t.Fatalf("%q: digest %q", p, r.ref)
			}
		case routeUpload:
			if !validUploadID(r.ref) {
				t.Fatalf("%q: upload id %q", p, r.ref)
			}
		}
	})
}

// FuzzRangeStart: never panics, never negative.
func FuzzRangeStart(f *testing.F) {
	for _, s := range []string{"0-5", "bytes 10-20/*", "-", "", "x-y", "99999999999999999999-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ok := rangeStart(s); ok && n < 0 {
			t.Fatalf("%q: %d", s, n)
		}
	})
}
