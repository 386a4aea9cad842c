package registry

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/knbox/knbox/pkg/image"
)

// kind is what a request path names.
type kind int

const (
	routeBase     kind = iota // /v2/
	routeBlob                 // /v2/<repo>/blobs/<digest>
	routeUploads              // /v2/<repo>/blobs/uploads/
	routeUpload               // /v2/<repo>/blobs/uploads/<id>
	routeManifest             // /v2/<repo>/manifests/<reference>
	routeTags                 // /v2/<repo>/tags/list
	routeCatalog              // /v2/_catalog
)

// route is a parsed request path.
type route struct {
	kind kind
	repo string // "<namespace>/<name>"
	// namespace and name split repo at its first "/".
	namespace, name string
	// ref is the digest, the upload id or the manifest reference.
	ref string
}

// errNameInvalid and the others carry the distribution API's error code.
type pathError struct {
	code, msg string
}

func (e *pathError) Error() string { return e.msg }

// parseRoute parses the path of a registry request. Repository names
// follow the distribution spec's grammar (so no "." or ".." component and
// nothing a file path could escape with), their first component is a
// knbox namespace (a DNS label) and there is at least one more; digests are
// sha256, tags the spec's, upload ids what this registry hands out.
func parseRoute(p string) (route, error) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		if p == "/v2" {
			return route{kind: routeBase}, nil
		}
		return route{}, &pathError{"NAME_UNKNOWN", "not a registry path"}
	}
	if rest == "" {
		return route{kind: routeBase}, nil
	}
	if rest == "_catalog" {
		return route{kind: routeCatalog}, nil
	}
	var r route
	switch {
	case strings.HasSuffix(rest, "/tags/list"):
		r.kind, r.repo = routeTags, strings.TrimSuffix(rest, "/tags/list")
	case strings.HasSuffix(rest, "/blobs/uploads/") || strings.HasSuffix(rest, "/blobs/uploads"):
		r.kind = routeUploads
		r.repo = strings.TrimSuffix(strings.TrimSuffix(rest, "/"), "/blobs/uploads")
	default:
		if i := strings.LastIndex(rest, "/blobs/uploads/"); i >= 0 && !strings.Contains(rest[i+len("/blobs/uploads/"):], "/") {
			r.kind, r.repo, r.ref = routeUpload, rest[:i], rest[i+len("/blobs/uploads/"):]
			if !validUploadID(r.ref) {
				return route{}, &pathError{"BLOB_UPLOAD_UNKNOWN", fmt.Sprintf("upload %q is not one this registry gave out", r.ref)}
			}
		} else if i := strings.LastIndex(rest, "/manifests/"); i >= 0 && !strings.Contains(rest[i+len("/manifests/"):], "/") {
			r.kind, r.repo, r.ref = routeManifest, rest[:i], rest[i+len("/manifests/"):]
			if !image.ValidDigest(r.ref) && !image.ValidTag(r.ref) {
				if strings.Contains(r.ref, ":") {
					return route{}, &pathError{"DIGEST_INVALID", fmt.Sprintf("reference %q is not a sha256 digest", r.ref)}
				}
				return route{}, &pathError{"TAG_INVALID", fmt.Sprintf("reference %q is not a tag ([A-Za-z0-9_][A-Za-z0-9._-]{0,127}) or a sha256 digest", r.ref)}
			}
		} else if i := strings.LastIndex(rest, "/blobs/"); i >= 0 && !strings.Contains(rest[i+len("/blobs/"):], "/") {
			r.kind, r.repo, r.ref = routeBlob, rest[:i], rest[i+len("/blobs/"):]
			if !image.ValidDigest(r.ref) {
				return route{}, &pathError{"DIGEST_INVALID", fmt.Sprintf("digest %q is not a sha256 digest", r.ref)}
			}
		} else {
			return route{}, &pathError{"NAME_UNKNOWN", "not a registry path"}
		}
	}
	if err := checkRepo(r.repo); err != nil {
		return route{}, err
	}
	r.namespace, r.name, _ = strings.Cut(r.repo, "/")
	return r, nil
}

// checkRepo checks a repository name: the spec's grammar, a namespace
// first, then a name.
func checkRepo(repo string) error {
	if !image.ValidRepository(repo) {
		return &pathError{"NAME_INVALID", fmt.Sprintf("repository %q is not a valid name (lowercase letters, digits and separators, components joined by /, at most %d characters)", repo, image.MaxRepositoryLength)}
	}
	ns, name, ok := strings.Cut(repo, "/")
	if !ok || name == "" {
		return &pathError{"NAME_INVALID", fmt.Sprintf("repository %q has no namespace: name it <namespace>/<name>, e.g. default/%s", repo, repo)}
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return &pathError{"NAME_INVALID", fmt.Sprintf("repository %q: its first component %q must be a namespace: %s", repo, ns, strings.Join(errs, "; "))}
	}
	return nil
}

// validUploadID: 32 lowercase hex digits.
func validUploadID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
