package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/knbox/knbox/pkg/disk"
)

// The embedded registry's storage. What is pushed lands in the cache's own
// content store: blobs (layers, configs, manifests) in Root/blobs/sha256
// beside those of pulled images, and for each repository an index of what
// was pushed to it:
//
//	Root/registry/<repository>/_index.json  blobs linked, manifests, tags
//	Root/uploads/<id>                       uploads in progress, emptied by Open
//
// A blob or manifest is reachable through a repository only once it was
// pushed (or mounted) to it, so knowing a digest of another namespace's
// repository gives nothing. Layers are unpacked when an image is first
// pulled (by a Revision), from the local blobs: no network.
//
// Prune keeps what the tags reference (for an index, its manifests), as it
// keeps what is in use; an untagged manifest that nothing uses is removed,
// and so are the pushed blobs no remaining manifest references, once they
// are older than BlobGrace (a push uploads its blobs before its manifest).

// Errors of the registry storage; pkg/registry maps them to the
// distribution API's error codes.
var (
	// ErrDigestMismatch: content does not match the digest it was given.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrInvalidManifest: a manifest that is not a well-formed OCI or
	// Docker v2 manifest or index, or breaks a limit.
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrBlobUnknown: a manifest references a blob (or manifest) that
	// was not pushed to its repository.
	ErrBlobUnknown = errors.New("blob unknown to the repository")
	// ErrTooLarge: an upload or manifest over its limit.
	ErrTooLarge = errors.New("too large")
	// ErrInvalidName: a repository name, tag or digest that is not one.
	ErrInvalidName = errors.New("invalid name")
)

// DefaultBlobGrace is how long a pushed blob that no manifest references
// is kept by Prune.
const DefaultBlobGrace = time.Hour

// maxIndexEntries bounds the manifests of a pushed image index.
const maxIndexEntries = 1024

var (
	// repoName is the distribution spec's repository grammar; no
	// component can be "." or "..", or start with "_".
	repoName = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagName  = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// MaxRepositoryLength bounds a repository name, as the distribution spec
// advises (255 with the registry's host).
const MaxRepositoryLength = 255

// ValidRepository reports whether repo is a repository name of the
// distribution spec (lowercase components separated by "/").
func ValidRepository(repo string) bool {
	return len(repo) <= MaxRepositoryLength && repoName.MatchString(repo)
}

// ValidTag reports whether tag is a tag of the distribution spec.
func ValidTag(tag string) bool { return tagName.MatchString(tag) }

// ValidDigest reports whether d is a sha256 digest, the only algorithm the
// registry accepts.
func ValidDigest(d string) bool { return bareDigest.MatchString(d) }

// repoIndex is what a repository holds.
type repoIndex struct {
	Blobs     map[string]int64  `json:"blobs,omitempty"`     // digest -> size
	Manifests map[string]string `json:"manifests,omitempty"` // digest -> media type
	Tags      map[string]string `json:"tags,omitempty"`      // tag -> digest
}

func (s *Store) registryDir() string { return filepath.Join(s.root, "registry") }
func (s *Store) uploadsDir() string  { return filepath.Join(s.root, "uploads") }

func (s *Store) indexPath(repo string) string {
	return filepath.Join(s.registryDir(), filepath.FromSlash(repo), "_index.json")
}

// readIndex reads a repository's index (empty if it has none). The caller
// holds s.meta.
func (s *Store) readIndex(repo string) (repoIndex, error) {
	var idx repoIndex
	if !ValidRepository(repo) {
		return idx, fmt.Errorf("repository %q: %w", repo, ErrInvalidName)
	}
	raw, err := os.ReadFile(s.indexPath(repo))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return idx, fmt.Errorf("index of repository %s: %w", repo, err)
	}
	return idx, nil
}

// writeIndex writes a repository's index, removing it when it is empty.
// The caller holds s.meta.
func (s *Store) writeIndex(repo string, idx repoIndex) error {
	p := s.indexPath(repo)
	if len(idx.Blobs) == 0 && len(idx.Manifests) == 0 && len(idx.Tags) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	raw, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return writeFileAtomic(p, raw)
}

// repositories lists the repositories that have an index. The caller holds
// s.meta.
func (s *Store) repositories() ([]string, error) {
	var repos []string
	root := s.registryDir()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && d.Name() == "_index.json" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err == nil && ValidRepository(filepath.ToSlash(rel)) {
				repos = append(repos, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	return repos, err
}

// BlobSize returns the size of a blob pushed to repo, or ErrNotFound.
func (s *Store) BlobSize(repo, digest string) (int64, error) {
	if !ValidDigest(digest) {
		return 0, fmt.Errorf("digest %q: %w", digest, ErrInvalidName)
	}
	s.meta.Lock()
	idx, err := s.readIndex(repo)
	s.meta.Unlock()
	if err != nil {
		return 0, err
	}
	size, ok := idx.Blobs[digest]
	if !ok {
		// A manifest is a blob of its repository too.
		if _, isManifest := idx.Manifests[digest]; !isManifest {
			return 0, fmt.Errorf("blob %s in %s: %w", digest, repo, ErrNotFound)
		}
		size = s.blobSize(digest)
	}
	return size, nil
}

// OpenBlob opens a blob pushed to repo for reading; the caller closes it.
func (s *Store) OpenBlob(repo, digest string) (*os.File, int64, error) {
	size, err := s.BlobSize(repo, digest)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(s.blobPath(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("blob %s in %s: %w", digest, repo, ErrNotFound)
	}
	return f, size, err
}

// MountBlob links a blob of repository from into repository to (the
// caller has checked that the pusher may pull from). It returns the blob's
// size, or ErrNotFound.
func (s *Store) MountBlob(from, to, digest string) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	size, err := s.BlobSize(from, digest)
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(s.blobPath(digest)); err != nil {
		return 0, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	return size, s.linkBlob(to, digest, size)
}

func (s *Store) linkBlob(repo, digest string, size int64) error {
	s.meta.Lock()
	defer s.meta.Unlock()
	idx, err := s.readIndex(repo)
	if err != nil {
		return err
	}
	if idx.Blobs == nil {
		idx.Blobs = map[string]int64{}
	}
	idx.Blobs[digest] = size
	// Mark the blob as new, for Prune's grace.
	now := time.Now()
	_ = os.Chtimes(s.blobPath(digest), now, now)
	return s.writeIndex(repo, idx)
}

// Upload is a blob upload in progress: its bytes are written to a file
// under Root/uploads and hashed as they arrive, so that Commit checks the
// digest without reading the file again. An Upload is not safe for
// concurrent use; the registry serialises the requests of one session.
type Upload struct {
	s    *Store
	f    *os.File
	h    hash.Hash
	n    int64
	done bool
}

// NewUpload starts a blob upload.
func (s *Store) NewUpload() (*Upload, error) {
	if err := s.checkDisk(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.uploadsDir(), "upload-")
	if err != nil {
		return nil, err
	}
	return &Upload{s: s, f: f, h: sha256.New()}, nil
}

// Size is the bytes received so far.
func (u *Upload) Size() int64 { return u.n }

// Append writes what r gives to the upload; the upload may not grow past
// max bytes in all (ErrTooLarge, and the upload is then unusable: the
// caller aborts it).
func (u *Upload) Append(ctx context.Context, r io.Reader, max int64) (int64, error) {
	if u.done {
		return 0, errors.New("upload already ended")
	}
	lr := &limitedReader{r: r, left: max - u.n + 1}
	guard := &layerBudget{checkDisk: u.s.checkDisk}
	n, err := io.Copy(io.MultiWriter(&diskGuard{w: u.f, b: guard}, u.h), &ctxReader{ctx: ctx, r: lr})
	u.n += n
	if u.n > max {
		return n, fmt.Errorf("the blob is over %s: %w", disk.Bytes(max), ErrTooLarge)
	}
	return n, err
}

// Commit checks that the upload's content has the given digest, moves it
// into the content store and links it to repo.
func (u *Upload) Commit(repo, digest string) (int64, error) {
	if u.done {
		return 0, errors.New("upload already ended")
	}
	if !ValidRepository(repo) {
		return 0, fmt.Errorf("repository %q: %w", repo, ErrInvalidName)
	}
	if !ValidDigest(digest) {
		return 0, fmt.Errorf("digest %q: %w", digest, ErrInvalidName)
	}
	if got := "sha256:" + hex.EncodeToString(u.h.Sum(nil)); got != digest {
		return 0, fmt.Errorf("the content is %s, not %s: %w", got, digest, ErrDigestMismatch)
	}
	if err := u.f.Sync(); err != nil {
		return 0, err
	}
	u.s.mu.RLock()
	defer u.s.mu.RUnlock()
	dst := u.s.blobPath(digest)
	if _, err := os.Stat(dst); err == nil {
		u.Abort()
	} else {
		if err := os.Rename(u.f.Name(), dst); err != nil {
			return 0, err
		}
		u.f.Close()
		u.done = true
		if err := syncDir(filepath.Dir(dst)); err != nil {
			return 0, err
		}
	}
	return u.n, u.s.linkBlob(repo, digest, u.n)
}

// Abort ends the upload and removes what it received.
func (u *Upload) Abort() {
	if u.done {
		return
	}
	u.done = true
	u.f.Close()
	os.Remove(u.f.Name())
}

// ManifestRef is a descriptor that a manifest references.
type ManifestRef struct {
	Digest string
	Size   int64
	// Manifest: an index's entry, which names a manifest of the same
	// repository rather than a blob.
	Manifest bool
}

// manifestDoc is the part of an OCI or Docker v2 manifest or index the
// registry reads.
type manifestDoc struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType,omitempty"`
	Config        *v1.Descriptor    `json:"config,omitempty"`
	Layers        []v1.Descriptor   `json:"layers,omitempty"`
	Manifests     []v1.Descriptor   `json:"manifests,omitempty"`
	Subject       *v1.Descriptor    `json:"subject,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// ParseManifest validates a pushed manifest: contentType (the request's
// Content-Type; empty or a generic JSON type: the manifest's own
// mediaType) must be one of the OCI and Docker v2 image manifest and index
// types and agree with the mediaType field, schemaVersion must be 2, every
// descriptor a sha256 digest with a size in the limits. It returns the
// media type and the descriptors the manifest references (a subject is not
// among them: it may be pushed later). Errors wrap ErrInvalidManifest.
func ParseManifest(raw []byte, contentType string, limits Limits) (string, []ManifestRef, error) {
	l := limits.withDefaults()
	bad := func(format string, args ...any) (string, []ManifestRef, error) {
		return "", nil, fmt.Errorf("%w: %s", ErrInvalidManifest, fmt.Sprintf(format, args...))
	}
	if int64(len(raw)) > l.MaxManifestBytes {
		return "", nil, fmt.Errorf("the manifest is %d bytes, more than %d (limits.images.maxManifestBytes): %w", len(raw), l.MaxManifestBytes, ErrTooLarge)
	}
	var doc manifestDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		return bad("not JSON: %v", err)
	}
	if dec.More() {
		return bad("data after the JSON document")
	}
	ct := strings.TrimSpace(strings.Split(contentType, ";")[0])
	if ct == "application/json" || ct == "application/octet-stream" {
		ct = ""
	}
	mt := doc.MediaType
	switch {
	case ct != "" && mt != "" && ct != mt:
		return bad("Content-Type %q and mediaType %q differ", ct, mt)
	case mt == "":
		mt = ct
	}
	if mt == "" && doc.Config != nil {
		mt = string(types.OCIManifestSchema1)
	} else if mt == "" && doc.Manifests != nil {
		mt = string(types.OCIImageIndex)
	}
	if doc.SchemaVersion != 2 {
		return bad("schemaVersion is %d, not 2", doc.SchemaVersion)
	}
	checkDesc := func(what string, d v1.Descriptor, maxSize int64) error {
		if !ValidDigest(d.Digest.String()) {
			return fmt.Errorf("%w: %s: digest %q is not a sha256 digest", ErrInvalidManifest, what, d.Digest.String())
		}
		if d.Size < 0 || d.Size > maxSize {
			return fmt.Errorf("%w: %s: size %d is not within 0..%d", ErrInvalidManifest, what, d.Size, maxSize)
		}
		if len(d.URLs) > 0 {
			return fmt.Errorf("%w: %s: foreign layers (urls) are not accepted: push the layer itself", ErrInvalidManifest, what)
		}
		return nil
	}
	var refs []ManifestRef
	switch types.MediaType(mt) {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		if doc.Manifests != nil {
			return bad("an image manifest has no manifests")
		}
		if doc.Config == nil {
			return bad("no config")
		}
		if err := checkDesc("config", *doc.Config, l.MaxConfigBytes); err != nil {
			return "", nil, err
		}
		if len(doc.Layers) > l.MaxLayers {
			return bad("%d layers, more than %d (limits.images.maxLayers)", len(doc.Layers), l.MaxLayers)
		}
		refs = append(refs, ManifestRef{Digest: doc.Config.Digest.String(), Size: doc.Config.Size})
		for i, d := range doc.Layers {
			if err := checkDesc(fmt.Sprintf("layers[%d]", i), d, l.MaxLayerBytes); err != nil {
				return "", nil, err
			}
			refs = append(refs, ManifestRef{Digest: d.Digest.String(), Size: d.Size})
		}
	case types.OCIImageIndex, types.DockerManifestList:
		if doc.Config != nil || doc.Layers != nil {
			return bad("an index has no config or layers")
		}
		if len(doc.Manifests) > maxIndexEntries {
			return bad("%d manifests, more than %d", len(doc.Manifests), maxIndexEntries)
		}
		for i, d := range doc.Manifests {
			if err := checkDesc(fmt.Sprintf("manifests[%d]", i), d, l.MaxManifestBytes); err != nil {
				return "", nil, err
			}
			refs = append(refs, ManifestRef{Digest: d.Digest.String(), Size: d.Size, Manifest: true})
		}
	default:
		return bad("unsupported media type %q (OCI or Docker v2 manifests and indexes only)", mt)
	}
	if doc.Subject != nil {
		if err := checkDesc("subject", *doc.Subject, l.MaxManifestBytes); err != nil {
			return "", nil, err
		}
	}
	return mt, refs, nil
}

// PutManifest stores a manifest pushed to repo under reference (a tag or
// its own digest), after ParseManifest and a check that every blob and
// manifest it references was pushed to repo with the size it says. It
// returns the manifest's digest.
func (s *Store) PutManifest(repo, reference string, raw []byte, contentType string) (string, error) {
	if !ValidRepository(repo) {
		return "", fmt.Errorf("repository %q: %w", repo, ErrInvalidName)
	}
	mt, refs, err := ParseManifest(raw, contentType, s.limits)
	if err != nil {
		return "", err
	}
	digest := "sha256:" + sha256Hex(raw)
	tag := ""
	switch {
	case ValidDigest(reference):
		if reference != digest {
			return "", fmt.Errorf("the manifest is %s, not %s: %w", digest, reference, ErrDigestMismatch)
		}
	case ValidTag(reference):
		tag = reference
	default:
		return "", fmt.Errorf("reference %q is neither a tag nor a sha256 digest: %w", reference, ErrInvalidName)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.meta.Lock()
	defer s.meta.Unlock()
	idx, err := s.readIndex(repo)
	if err != nil {
		return "", err
	}
	for _, r := range refs {
		if r.Manifest {
			if _, ok := idx.Manifests[r.Digest]; !ok {
				return "", fmt.Errorf("manifest %s: %w", r.Digest, ErrBlobUnknown)
			}
			continue
		}
		size, ok := idx.Blobs[r.Digest]
		if !ok {
			return "", fmt.Errorf("blob %s: %w", r.Digest, ErrBlobUnknown)
		}
		if _, err := os.Stat(s.blobPath(r.Digest)); err != nil {
			return "", fmt.Errorf("blob %s: %w", r.Digest, ErrBlobUnknown)
		}
		if size != r.Size {
			return "", fmt.Errorf("%w: blob %s is %d bytes, the manifest says %d", ErrInvalidManifest, r.Digest, size, r.Size)
		}
	}
	if err := s.writeBlob(digest, raw); err != nil {
		return "", err
	}
	if idx.Manifests == nil {
		idx.Manifests = map[string]string{}
	}
	idx.Manifests[digest] = mt
	if tag != "" {
		if idx.Tags == nil {
			idx.Tags = map[string]string{}
		}
		idx.Tags[tag] = digest
	}
	if err := s.writeIndex(repo, idx); err != nil {
		return "", err
	}
	return digest, nil
}

// GetManifest returns a manifest of repo by tag or digest: its content,
// media type and digest, or ErrNotFound.
func (s *Store) GetManifest(repo, reference string) ([]byte, string, string, error) {
	s.meta.Lock()
	idx, err := s.readIndex(repo)
	s.meta.Unlock()
	if err != nil {
		return nil, "", "", err
	}
	digest := reference
	if !ValidDigest(reference) {
		if !ValidTag(reference) {
			return nil, "", "", fmt.Errorf("reference %q: %w", reference, ErrInvalidName)
		}
		d, ok := idx.Tags[reference]
		if !ok {
			return nil, "", "", fmt.Errorf("manifest %s:%s: %w", repo, reference, ErrNotFound)
		}
		digest = d
	}
	mt, ok := idx.Manifests[digest]
	if !ok {
		return nil, "", "", fmt.Errorf("manifest %s@%s: %w", repo, digest, ErrNotFound)
	}
	raw, err := os.ReadFile(s.blobPath(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", "", fmt.Errorf("manifest %s@%s: %w", repo, digest, ErrNotFound)
	}
	if err != nil {
		return nil, "", "", err
	}
	return raw, mt, digest, nil
}

// DeleteManifest removes a manifest (by digest) and the tags that point to
// it from repo; its blobs go at the next Prune.
func (s *Store) DeleteManifest(repo, digest string) error {
	if !ValidDigest(digest) {
		return fmt.Errorf("digest %q: %w", digest, ErrInvalidName)
	}
	s.meta.Lock()
	defer s.meta.Unlock()
	idx, err := s.readIndex(repo)
	if err != nil {
		return err
	}
	if _, ok := idx.Manifests[digest]; !ok {
		return fmt.Errorf("manifest %s@%s: %w", repo, digest, ErrNotFound)
	}
	delete(idx.Manifests, digest)
	for t, d := range idx.Tags {
		if d == digest {
			delete(idx.Tags, t)
		}
	}
	return s.writeIndex(repo, idx)
}

// Tags lists repo's tags, sorted; ErrNotFound when the repository has none
// and no manifests.
func (s *Store) Tags(repo string) ([]string, error) {
	s.meta.Lock()
	idx, err := s.readIndex(repo)
	s.meta.Unlock()
	if err != nil {
		return nil, err
	}
	if len(idx.Manifests) == 0 && len(idx.Tags) == 0 && len(idx.Blobs) == 0 {
		return nil, fmt.Errorf("repository %s: %w", repo, ErrNotFound)
	}
	tags := make([]string, 0, len(idx.Tags))
	for t := range idx.Tags {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags, nil
}

// isLocal reports whether registry (host[:port]) is the embedded registry.
func (s *Store) isLocal(registry string) bool {
	return slices.Contains(s.local, strings.ToLower(registry))
}

// resolveLocal resolves a tag of the embedded registry to the digest of
// this platform's image, from the repository's index.
func (s *Store) resolveLocal(t name.Tag) (string, error) {
	repo := t.Context().RepositoryStr()
	raw, mt, digest, err := s.GetManifest(repo, t.TagStr())
	if err != nil {
		return "", fmt.Errorf("%w: push it to knbox's registry first", err)
	}
	for range 3 {
		if !types.MediaType(mt).IsIndex() {
			return digest, nil
		}
		child, err := pickPlatform(raw)
		if err != nil {
			return "", err
		}
		if raw, mt, digest, err = s.GetManifest(repo, child.Digest.String()); err != nil {
			return "", err
		}
	}
	return "", errors.New("image indexes nested too deeply")
}

// pullLocal adds an image pushed to the embedded registry to the cache,
// from its local blobs. The caller holds s.mu shared.
func (s *Store) pullLocal(ctx context.Context, d name.Digest) (*Image, error) {
	repo := d.Context().RepositoryStr()
	raw, mt, digest, err := s.GetManifest(repo, d.DigestStr())
	if err != nil {
		return nil, err
	}
	for depth := 0; types.MediaType(mt).IsIndex(); depth++ {
		if depth == 3 {
			return nil, errors.New("image indexes nested too deeply")
		}
		child, err := pickPlatform(raw)
		if err != nil {
			return nil, err
		}
		if img, err := s.cached(child.Digest.String(), d.Context().Name()); err == nil {
			return img, nil
		}
		if raw, mt, digest, err = s.GetManifest(repo, child.Digest.String()); err != nil {
			return nil, err
		}
	}
	m, err := s.checkManifest(raw)
	if err != nil {
		return nil, err
	}
	config, err := s.readLocalBlob(repo, m.Config.Digest.String(), s.limits.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	src := source{digest: h, manifest: raw, config: config, repos: []string{d.Context().Name()}}
	for _, l := range m.Layers {
		if _, err := s.BlobSize(repo, l.Digest.String()); err != nil {
			return nil, err
		}
		p := s.blobPath(l.Digest.String())
		src.layers = append(src.layers, blob{open: func() (io.ReadCloser, error) { return os.Open(p) }, local: true})
	}
	return s.add(ctx, src)
}

func (s *Store) readLocalBlob(repo, digest string, max int64) ([]byte, error) {
	f, size, err := s.OpenBlob(repo, digest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("blob %s is %d bytes, more than %d", digest, size, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// registryKept is what the registry's tags keep: the tagged manifests and,
// of an index, the manifests it names. The caller holds s.meta.
func (s *Store) registryKept(repos []string) (map[string]bool, error) {
	kept := map[string]bool{}
	for _, repo := range repos {
		idx, err := s.readIndex(repo)
		if err != nil {
			return nil, err
		}
		queue := make([]string, 0, len(idx.Tags))
		for _, d := range idx.Tags {
			queue = append(queue, d)
		}
		for steps := 0; len(queue) > 0 && steps < 4*maxIndexEntries; steps++ {
			d := queue[0]
			queue = queue[1:]
			if kept[d] {
				continue
			}
			kept[d] = true
			if !types.MediaType(idx.Manifests[d]).IsIndex() {
				continue
			}
			raw, err := os.ReadFile(s.blobPath(d))
			if err != nil {
				continue
			}
			_, refs, err := ParseManifest(raw, idx.Manifests[d], s.limits)
			if err != nil {
				continue
			}
			for _, r := range refs {
				queue = append(queue, r.Digest)
			}
		}
	}
	return kept, nil
}

// pruneRegistry drops from the repositories' indexes the manifests neither
// kept nor tagged, and the blob links that no remaining manifest references
// and that are older than the grace; it then removes the pushed blobs that
// nothing uses (used: blobs of kept images). The caller holds s.mu and
// s.meta. It returns the bytes freed.
func (s *Store) pruneRegistry(repos []string, kept map[string]bool, used map[string]bool) (int64, error) {
	linked := map[string]bool{}
	cutoff := time.Now().Add(-s.blobGrace)
	for _, repo := range repos {
		idx, err := s.readIndex(repo)
		if err != nil {
			return 0, err
		}
		refd := map[string]bool{}
		for d, mt := range idx.Manifests {
			if !kept[d] {
				delete(idx.Manifests, d)
				continue
			}
			used[d] = true
			refd[d] = true
			if raw, err := os.ReadFile(s.blobPath(d)); err == nil {
				if _, refs, err := ParseManifest(raw, mt, s.limits); err == nil {
					for _, r := range refs {
						refd[r.Digest], used[r.Digest] = true, true
					}
				}
			}
		}
		for d := range idx.Blobs {
			if refd[d] {
				continue
			}
			if fi, err := os.Stat(s.blobPath(d)); err == nil && fi.ModTime().After(cutoff) {
				used[d] = true // a push in progress
				continue
			}
			delete(idx.Blobs, d)
		}
		for d := range idx.Blobs {
			linked[d] = true
		}
		for t, d := range idx.Tags {
			if _, ok := idx.Manifests[d]; !ok {
				delete(idx.Tags, t)
			}
		}
		if err := s.writeIndex(repo, idx); err != nil {
			return 0, err
		}
	}
	// Blobs of the registry that no repository links any more, and no kept
	// image uses.
	var freed int64
	entries, err := os.ReadDir(filepath.Join(s.root, "blobs", "sha256"))
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		d := "sha256:" + e.Name()
		if used[d] || linked[d] || !ValidDigest(d) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if err := os.Remove(s.blobPath(d)); err == nil {
			freed += fi.Size()
		}
	}
	return freed, nil
}

// newUploadID returns a random upload session id.
func newUploadID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// NewUploadID returns a random, unguessable id for an upload session.
func NewUploadID() (string, error) { return newUploadID() }
