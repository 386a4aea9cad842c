package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/disk"
)

// pullJobs bounds the layers of one image fetched and unpacked at once.
const pullJobs = 3

// record is what the cache knows about an image; its presence means that the
// image's manifest, config and layers are all in place.
type record struct {
	Digest  string    `json:"digest"`
	Config  string    `json:"config"`  // digest of the config blob
	DiffIDs []string  `json:"diffIDs"` // layers, bottom first
	Repos   []string  `json:"repos,omitempty"`
	Created time.Time `json:"created"`
}

// layerMeta is kept beside an unpacked layer.
type layerMeta struct {
	DiffID string `json:"diffID"`
	Size   int64  `json:"size"` // bytes on disk of the unpacked files
	// Bytes and Files are what the layer counts against an image's limits.
	Bytes int64 `json:"bytes,omitempty"`
	Files int64 `json:"files,omitempty"`
}

// source is an image to add to the cache, from a registry or an archive.
type source struct {
	digest   v1.Hash // of manifest, checked against it
	manifest []byte
	config   []byte   // checked against the manifest
	layers   []blob   // as the manifest lists them
	repos    []string // repositories it is known under
}

// blob is a layer as stored (compressed or not) and fetched.
type blob struct {
	open func() (io.ReadCloser, error)
	// local: the blob is on this machine already (in a loaded archive), so
	// it is verified where it is instead of copied first.
	local bool
}

// Pull returns the image ref names, fetching and unpacking it first unless
// it is cached. ref should be a digest reference (from Resolve); a tag is
// resolved first. A bare "sha256:..." names an image already in the cache
// (an unnamed loaded image). Concurrent Pulls of one image fetch and unpack
// it once. kc, if not nil, is tried before the Store's default keychain.
//
// Prune may remove an image between Pull and Mount unless it is kept; the
// caller that prunes decides what is kept.
func (s *Store) Pull(ctx context.Context, ref string, kc authn.Keychain) (*Image, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if bareDigest.MatchString(ref) {
		img, err := s.cached(ref, "")
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", ref, err)
		}
		return img, nil
	}
	r, err := s.parse(ref)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	d, ok := r.(name.Digest)
	if !ok {
		resolved, err := s.Resolve(ctx, ref, kc)
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", ref, err)
		}
		if r, err = s.parse(resolved); err != nil {
			return nil, fmt.Errorf("pull %s: %w", ref, err)
		}
		d = r.(name.Digest)
	}
	repo := d.Context().Name()
	if img, err := s.cached(d.DigestStr(), repo); err == nil {
		return img, nil
	}
	img, err := s.images.do(ctx, d.DigestStr(), func(ctx context.Context) (*Image, error) {
		if img, err := s.cached(d.DigestStr(), repo); err == nil {
			return img, nil
		}
		if s.isLocal(d.RegistryStr()) {
			// Pushed to knbox's registry: from its blobs, no network.
			return s.pullLocal(ctx, d)
		}
		start := time.Now()
		img, size, err := s.pullRemote(ctx, d, kc)
		if err == nil && size > 0 && s.observe != nil {
			s.observe(time.Since(start), size)
		}
		return img, err
	})
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	// The flight may have been started for another repository of the
	// same content: record this one too.
	if err := s.addRepos(img.Digest, []string{repo}); err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return img.withRef(repo + "@" + img.Digest), nil
}

// pullRemote fetches an image from its registry into the cache. size is
// what the manifest lists of compressed bytes (config and layers); 0 when
// the image turned out to be cached.
func (s *Store) pullRemote(ctx context.Context, d name.Digest, kc authn.Keychain) (_ *Image, size int64, err error) {
	opts := s.remoteOptions(ctx, kc)
	desc, err := remote.Get(d, opts...)
	if err != nil {
		return nil, 0, err
	}
	// A digest of an index: take this platform's image from it.
	for depth := 0; desc.MediaType.IsIndex(); depth++ {
		if depth == 3 {
			return nil, 0, errors.New("image indexes nested too deeply")
		}
		child, err := pickPlatform(desc.Manifest)
		if err != nil {
			return nil, 0, err
		}
		d = d.Context().Digest(child.Digest.String())
		if img, err := s.cached(d.DigestStr(), d.Context().Name()); err == nil {
			return img, 0, nil
		}
		if desc, err = remote.Get(d, opts...); err != nil {
			return nil, 0, err
		}
	}
	if !desc.MediaType.IsImage() {
		return nil, 0, unsupportedManifest(desc.MediaType)
	}
	// The limits that the manifest alone tells, before anything else is
	// fetched.
	m, err := s.checkManifest(desc.Manifest)
	if err != nil {
		return nil, 0, err
	}
	img, err := desc.Image()
	if err != nil {
		return nil, 0, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, 0, fmt.Errorf("fetch config: %w", err)
	}
	src := source{
		digest:   desc.Digest,
		manifest: desc.Manifest,
		config:   config,
		repos:    []string{d.Context().Name()},
	}
	for _, l := range m.Layers {
		src.layers = append(src.layers, blob{open: func() (io.ReadCloser, error) {
			layer, err := img.LayerByDigest(l.Digest)
			if err != nil {
				return nil, err
			}
			return layer.Compressed()
		}})
	}
	size = m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	out, err := s.add(ctx, src)
	return out, size, err
}

// checkManifest parses an image manifest and checks the limits it alone
// tells: its size, the size of the config, the number and sizes of the
// layers.
func (s *Store) checkManifest(raw []byte) (*v1.Manifest, error) {
	l := s.limits
	if int64(len(raw)) > l.MaxManifestBytes {
		return nil, fmt.Errorf("the manifest is %d bytes, more than %d (limits.images.maxManifestBytes)", len(raw), l.MaxManifestBytes)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	if m.Config.Size > l.MaxConfigBytes || m.Config.Size < 0 {
		return nil, fmt.Errorf("the config is %d bytes, more than %d (limits.images.maxConfigBytes)", m.Config.Size, l.MaxConfigBytes)
	}
	if len(m.Layers) > l.MaxLayers {
		return nil, fmt.Errorf("the image has %d layers, more than %d (limits.images.maxLayers)", len(m.Layers), l.MaxLayers)
	}
	var total int64
	for i, d := range m.Layers {
		if d.Size < 0 || d.Size > l.MaxLayerBytes {
			return nil, fmt.Errorf("layer %d (%s) is %d bytes compressed, more than %s (limits.images.maxLayerBytes)", i+1, d.Digest, d.Size, disk.Bytes(l.MaxLayerBytes))
		}
		if d.Digest.Algorithm != "sha256" {
			return nil, fmt.Errorf("layer %d: unsupported digest algorithm %q", i+1, d.Digest.Algorithm)
		}
		total += d.Size
	}
	if total > l.MaxImageBytes {
		return nil, fmt.Errorf("the layers are %d bytes compressed, more than %s (limits.images.maxImageBytes)", total, disk.Bytes(l.MaxImageBytes))
	}
	return m, nil
}

// add verifies an image's manifest and config, unpacks its layers that are
// not cached yet, and writes its record. The caller holds s.mu shared.
func (s *Store) add(ctx context.Context, src source) (*Image, error) {
	if got := sha256Hex(src.manifest); "sha256:"+got != src.digest.String() {
		return nil, fmt.Errorf("manifest digest is sha256:%s, want %s", got, src.digest)
	}
	m, err := s.checkManifest(src.manifest)
	if err != nil {
		return nil, err
	}
	if int64(len(src.config)) > s.limits.MaxConfigBytes {
		return nil, fmt.Errorf("the config is %d bytes, more than %d (limits.images.maxConfigBytes)", len(src.config), s.limits.MaxConfigBytes)
	}
	if m.Config.MediaType != "" && !m.Config.MediaType.IsConfig() {
		return nil, fmt.Errorf("not a container image: config media type %q", m.Config.MediaType)
	}
	if got := sha256Hex(src.config); "sha256:"+got != m.Config.Digest.String() {
		return nil, fmt.Errorf("config digest is sha256:%s, want %s", got, m.Config.Digest)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(src.config))
	if err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if (cf.OS != "" && cf.OS != platform.OS) || (cf.Architecture != "" && cf.Architecture != platform.Architecture) {
		return nil, fmt.Errorf("image is for %s/%s, this machine is %s/%s", cf.OS, cf.Architecture, platform.OS, platform.Architecture)
	}
	diffIDs := cf.RootFS.DiffIDs
	if len(diffIDs) != len(m.Layers) || len(diffIDs) != len(src.layers) {
		return nil, fmt.Errorf("config names %d layers, manifest %d", len(diffIDs), len(m.Layers))
	}
	for _, l := range m.Layers {
		if !isLayer(l.MediaType) {
			return nil, fmt.Errorf("unsupported layer media type %q", l.MediaType)
		}
	}
	if err := s.writeBlob(src.digest.String(), src.manifest); err != nil {
		return nil, err
	}
	if err := s.writeBlob(m.Config.Digest.String(), src.config); err != nil {
		return nil, err
	}

	// The image's limits count the layers it has in the cache already,
	// and those unpacked now as they are.
	ib := &imageBudget{maxBytes: s.limits.MaxImageBytes, maxFiles: s.limits.MaxImageFiles}
	for _, id := range diffIDs {
		if meta, ok := s.readLayerMeta(id.String()); ok {
			ib.bytes.Add(meta.Bytes)
			ib.files.Add(meta.Files)
		}
	}
	// Unpack up to pullJobs layers at once; each layer once per Store. The
	// first failure stops the others.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(diffIDs))
	sem := make(chan struct{}, pullJobs)
	var wg sync.WaitGroup
	for i, id := range diffIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if errs[i] = s.ensureLayer(lctx, id, m.Layers[i], src.layers[i], ib); errs[i] != nil {
				errs[i] = fmt.Errorf("layer %d of %d (%s): %w", i+1, len(diffIDs), m.Layers[i].Digest, errs[i])
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		// The first error that is not another layer's cancellation.
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	rec := record{Digest: src.digest.String(), Config: m.Config.Digest.String(), Created: time.Now().UTC()}
	for _, id := range diffIDs {
		rec.DiffIDs = append(rec.DiffIDs, id.String())
	}
	s.meta.Lock()
	if old, err := s.readRecord(rec.Digest); err == nil {
		rec.Repos, rec.Created = old.Repos, old.Created
	}
	rec.Repos = mergeSorted(rec.Repos, src.repos)
	err = s.writeRecord(rec)
	s.meta.Unlock()
	if err != nil {
		return nil, err
	}
	return s.imageOf(rec, cf)
}

func isLayer(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
		types.DockerUncompressedLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return true
	}
	return false
}

// ensureLayer unpacks a layer unless it is in place; two callers wanting
// one layer at once share one download. A blob whose content failed is not
// fetched again before its backoff ends.
func (s *Store) ensureLayer(ctx context.Context, diffID v1.Hash, desc v1.Descriptor, b blob, ib *imageBudget) error {
	if _, err := os.Stat(s.layerDir(diffID.String())); err == nil {
		return nil
	}
	if err := s.backoff.wait(desc.Digest.String()); err != nil {
		return err
	}
	_, err := s.layers.do(ctx, diffID.String(), func(ctx context.Context) (struct{}, error) {
		err := s.unpackLayer(ctx, diffID, desc, b, ib)
		switch {
		case err == nil:
			s.backoff.succeed(desc.Digest.String())
		case isContentError(err):
			s.backoff.fail(desc.Digest.String(), err)
		}
		return struct{}{}, err
	})
	return err
}

// unpackLayer fetches a layer's blob and checks its size and digest before
// anything is unpacked (a remote blob is copied into Root/tmp first, a
// local one is read twice), unpacks it into a temporary directory within
// the limits, checks that its content matches diffID, syncs it and renames
// it into place. Nothing of a layer that fails stays.
func (s *Store) unpackLayer(ctx context.Context, diffID v1.Hash, desc v1.Descriptor, b blob, ib *imageBudget) (err error) {
	final := s.layerDir(diffID.String())
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	if diffID.Algorithm != "sha256" || desc.Digest.Algorithm != "sha256" {
		return contentErrorf("unsupported digest algorithm %q", diffID.Algorithm)
	}
	verified, cleanup, err := s.verifiedBlob(ctx, desc, b)
	if err != nil {
		return err
	}
	defer cleanup()
	tmp, err := os.MkdirTemp(s.tmpDir(), "layer-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	lower := filepath.Join(tmp, "fs")
	if err := os.Mkdir(lower, 0o755); err != nil {
		return err
	}
	l, err := partial.CompressedToLayer(&archiveBlob{open: verified})
	if err != nil {
		return err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return contentErrorf("decompress: %w", err)
	}
	defer rc.Close()
	lb := &layerBudget{maxBytes: s.limits.MaxLayerBytes, maxFiles: s.limits.MaxLayerFiles, image: ib, checkDisk: s.checkDisk}
	// The whole stream is bounded, what follows the tar's end too (a gzip
	// bomb after it would otherwise be read for the diff ID).
	maxStream := s.limits.MaxLayerBytes + s.limits.MaxLayerFiles*(2*512) + 1<<20
	counted := &limitedReader{r: rc, left: maxStream}
	h := sha256.New()
	tee := io.TeeReader(counted, h)
	if err := unpack(ctx, lower, tee, lb); err != nil {
		return s.contentOrNot(err, counted)
	}
	// The diff ID covers the whole stream, the tar's end padding too.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return s.contentOrNot(err, counted)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != diffID.Hex {
		return contentErrorf("the layer's content is sha256:%s, not its diff ID %s", got, diffID)
	}
	size, err := diskUsage(lower)
	if err != nil {
		return err
	}
	meta, _ := json.Marshal(layerMeta{DiffID: diffID.String(), Size: size, Bytes: lb.bytes, Files: lb.files})
	if err := os.WriteFile(filepath.Join(tmp, "layer.json"), meta, 0o600); err != nil {
		return err
	}
	if err := syncFS(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			// Someone else put it in place first (a Pull that gave up
			// and was retried): theirs is as good as ours.
			os.RemoveAll(tmp)
			return nil
		}
		return err
	}
	return syncDir(filepath.Dir(final))
}

// contentOrNot makes an unpacking error a contentError when the layer's
// content caused it: a refused entry, a corrupt stream, a stream over its
// bound. Cancellation, a full disk and I/O errors of the cache stay as
// they are.
func (s *Store) contentOrNot(err error, r *limitedReader) error {
	switch {
	case isContentError(err):
		return err
	case r.over:
		return contentErrorf("the uncompressed layer is larger than %s (limits.images.maxLayerBytes)", disk.Bytes(s.limits.MaxLayerBytes))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errUnpackCanceled), disk.IsNoSpace(err):
		return err
	case errors.Is(err, tar.ErrHeader), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum),
		errors.Is(err, errTraversal), errors.Is(err, errSymlinkParent), errors.Is(err, errNotDirParent), errors.Is(err, errBadLinkTarget),
		errors.Is(err, errInvalidEntry), strings.HasPrefix(err.Error(), "read layer:"):
		return &contentError{err: err}
	}
	return err
}

// verifiedBlob returns an opener of the layer's blob once its size and
// digest match desc, and a cleanup function. A remote blob is copied into
// Root/tmp first (no more than its declared size, which the limits bound),
// so nothing is unpacked from bytes that were not verified.
func (s *Store) verifiedBlob(ctx context.Context, desc v1.Descriptor, b blob) (func() (io.ReadCloser, error), func(), error) {
	noop := func() {}
	verify := func(r io.Reader, w io.Writer) error {
		h := sha256.New()
		dst := io.Writer(h)
		if w != nil {
			dst = io.MultiWriter(w, h)
		}
		n, err := io.Copy(dst, &ctxReader{ctx: ctx, r: io.LimitReader(r, desc.Size+1)})
		got := hex.EncodeToString(h.Sum(nil))
		switch {
		case n > desc.Size:
			return contentErrorf("the blob is longer than the %d bytes the manifest says", desc.Size)
		case n == desc.Size && got != desc.Digest.Hex:
			// go-containerregistry also fails the read at its end:
			// the digest is the reason either way.
			return contentErrorf("the blob is sha256:%s, not %s as the manifest says: it failed verification", got, desc.Digest)
		case err != nil:
			return err
		case n < desc.Size:
			return contentErrorf("the blob is %d bytes, not %d as the manifest says", n, desc.Size)
		}
		return nil
	}
	if b.local {
		rc, err := b.open()
		if err != nil {
			return nil, noop, err
		}
		err = verify(rc, nil)
		rc.Close()
		if err != nil {
			return nil, noop, err
		}
		return b.open, noop, nil
	}
	if err := s.checkRoom(desc.Size); err != nil {
		return nil, noop, err
	}
	rc, err := b.open()
	if err != nil {
		return nil, noop, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(s.tmpDir(), "blob-")
	if err != nil {
		return nil, noop, err
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	if err := verify(rc, f); err != nil {
		cleanup()
		return nil, noop, err
	}
	open := func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(f, 0, desc.Size)), nil
	}
	return open, cleanup, nil
}

// checkDisk fails when the cache's file system has less than MinFreeBytes
// free.
func (s *Store) checkDisk() error { return s.checkRoom(0) }

// checkRoom fails unless n bytes more leave MinFreeBytes free.
func (s *Store) checkRoom(n int64) error {
	if s.limits.MinFreeBytes < 0 {
		return nil
	}
	free, err := disk.Free(s.root)
	if err != nil {
		return nil // cannot tell: the writes will
	}
	if free-n < s.limits.MinFreeBytes {
		return fmt.Errorf("the data dir has %s free, and pulling needs %s more than the %s kept free (limits.disk.minFreeBytes): prune images or free disk space",
			disk.Bytes(free), disk.Bytes(n), disk.Bytes(s.limits.MinFreeBytes))
	}
	return nil
}

// limitedReader reads at most left bytes of r and then fails, noting it.
type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.over = true
		return 0, errors.New("stream over its limit")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// ctxReader stops reading when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readLayerMeta reads the layer.json of a cached layer.
func (s *Store) readLayerMeta(diffID string) (layerMeta, bool) {
	raw, err := os.ReadFile(filepath.Join(s.layerDir(diffID), "layer.json"))
	if err != nil {
		return layerMeta{}, false
	}
	var m layerMeta
	if json.Unmarshal(raw, &m) != nil {
		return layerMeta{}, false
	}
	return m, true
}

// cached returns the image with the given manifest digest if it is in the
// cache with all its layers, recording repo (if not empty) as one of its
// repositories.
func (s *Store) cached(digest, repo string) (*Image, error) {
	rec, err := s.readRecord(digest)
	if err != nil {
		return nil, err
	}
	for _, id := range rec.DiffIDs {
		if _, err := os.Stat(s.layerFS(id)); err != nil {
			return nil, fmt.Errorf("layer %s of %s: %w", id, digest, ErrNotFound)
		}
	}
	raw, err := os.ReadFile(s.blobPath(rec.Config))
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", digest, err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", digest, err)
	}
	if repo != "" {
		if err := s.addRepos(digest, []string{repo}); err != nil {
			return nil, err
		}
	}
	img, err := s.imageOf(rec, cf)
	if err != nil {
		return nil, err
	}
	if repo != "" {
		img.Ref = repo + "@" + digest
	}
	return img, nil
}

// imageOf builds the Image of a record; Ref is its first repository.
func (s *Store) imageOf(rec record, cf *v1.ConfigFile) (*Image, error) {
	img := &Image{Ref: rec.Digest, Digest: rec.Digest, Config: configOf(cf)}
	if len(rec.Repos) > 0 {
		img.Ref = rec.Repos[0] + "@" + rec.Digest
	}
	for _, id := range rec.DiffIDs {
		img.Layers = append(img.Layers, s.layerFS(id))
	}
	return img, nil
}

func configOf(cf *v1.ConfigFile) Config {
	c := cf.Config
	out := Config{
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		Env:        slices.Clone(c.Env),
		WorkingDir: c.WorkingDir,
		User:       c.User,
	}
	for p := range c.ExposedPorts {
		out.ExposedPorts = append(out.ExposedPorts, p)
	}
	slices.Sort(out.ExposedPorts)
	return out
}

// withRef returns a copy of img (so callers sharing a flight do not share
// slices) with the given Ref.
func (img *Image) withRef(ref string) *Image {
	c := *img
	c.Ref = ref
	c.Layers = slices.Clone(img.Layers)
	c.Config.Entrypoint = slices.Clone(img.Config.Entrypoint)
	c.Config.Cmd = slices.Clone(img.Config.Cmd)
	c.Config.Env = slices.Clone(img.Config.Env)
	c.Config.ExposedPorts = slices.Clone(img.Config.ExposedPorts)
	return &c
}

// addRepos records more repositories of a cached image.
func (s *Store) addRepos(digest string, repos []string) error {
	s.meta.Lock()
	defer s.meta.Unlock()
	rec, err := s.readRecord(digest)
	if err != nil {
		return err
	}
	merged := mergeSorted(rec.Repos, repos)
	if slices.Equal(merged, rec.Repos) {
		return nil
	}
	rec.Repos = merged
	return s.writeRecord(rec)
}

func mergeSorted(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Store) readRecord(digest string) (record, error) {
	var rec record
	if !bareDigest.MatchString(digest) {
		return rec, fmt.Errorf("invalid digest %q", digest)
	}
	raw, err := os.ReadFile(s.recordPath(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return rec, fmt.Errorf("image record %s: %w", digest, err)
	}
	return rec, nil
}

func (s *Store) writeRecord(rec record) error {
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.recordPath(rec.Digest), raw)
}

func (s *Store) writeBlob(digest string, data []byte) error {
	p := s.blobPath(digest)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return writeFileAtomic(p, data)
}

// localTag looks a normalised tag up in the local tag index.
func (s *Store) localTag(tag string) (string, bool) {
	s.meta.Lock()
	defer s.meta.Unlock()
	tags, err := s.readTags()
	if err != nil {
		return "", false
	}
	d, ok := tags[tag]
	return d, ok
}

func (s *Store) readTags() (map[string]string, error) {
	tags := map[string]string{}
	raw, err := os.ReadFile(s.tagsFile())
	if errors.Is(err, fs.ErrNotExist) {
		return tags, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &tags); err != nil {
		return nil, fmt.Errorf("tag index: %w", err)
	}
	return tags, nil
}

func (s *Store) writeTags(tags map[string]string) error {
	raw, err := json.MarshalIndent(tags, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.tagsFile(), raw)
}

// List returns the cached images, sorted by digest.
func (s *Store) List() ([]Info, error) {
	s.meta.Lock()
	defer s.meta.Unlock()
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	tags, err := s.readTags()
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, rec := range recs {
		info := Info{Digest: rec.Digest, Created: rec.Created}
		for _, repo := range rec.Repos {
			info.References = append(info.References, repo+"@"+rec.Digest)
		}
		var tagged []string
		for tag, d := range tags {
			if d == rec.Digest {
				tagged = append(tagged, tag)
			}
		}
		slices.Sort(tagged)
		info.References = append(info.References, tagged...)
		info.Size = s.blobSize(rec.Digest) + s.blobSize(rec.Config)
		for _, id := range rec.DiffIDs {
			info.Size += s.layerSize(id)
		}
		out = append(out, info)
	}
	return out, nil
}

// records reads all image records, sorted by digest.
func (s *Store) records() ([]record, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, "images", "sha256"))
	if err != nil {
		return nil, err
	}
	var recs []record
	for _, e := range entries {
		hexDigest, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		rec, err := s.readRecord("sha256:" + hexDigest)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (s *Store) blobSize(digest string) int64 {
	fi, err := os.Stat(s.blobPath(digest))
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (s *Store) layerSize(diffID string) int64 {
	m, _ := s.readLayerMeta(diffID)
	return m.Size
}

// Prune removes the cached images whose digests are not in keep (digest
// references, "repo@sha256:..." or "sha256:..."; a tag of the local tag
// index also names its image), the local tags of removed images, and the
// unpacked layers that no kept image uses. A layer that a mounted overlay
// uses (per /proc/self/mountinfo) is never removed, even if its image is;
// a later Prune removes it once it is unmounted. What the embedded
// registry's tags reference is kept as if named in keep, and its untagged,
// unused manifests and unreferenced blobs go (registry.go). It returns the
// bytes freed.
func (s *Store) Prune(keep []string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meta.Lock()
	defer s.meta.Unlock()

	tags, err := s.readTags()
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	kept := map[string]bool{}
	for _, k := range keep {
		switch {
		case bareDigest.MatchString(k):
			kept[k] = true
		case strings.Contains(k, "@"):
			_, d, _ := strings.Cut(k, "@")
			if !bareDigest.MatchString(d) {
				return 0, fmt.Errorf("prune: keep %q: not a sha256 digest reference", k)
			}
			kept[d] = true
		default:
			t, err := name.NewTag(k)
			if err != nil {
				return 0, fmt.Errorf("prune: keep %q: %w", k, err)
			}
			if d, ok := tags[t.Name()]; ok {
				kept[d] = true
			}
		}
	}

	// What the embedded registry's tags reference is kept too.
	repos, err := s.repositories()
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	regKept, err := s.registryKept(repos)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	for d := range regKept {
		kept[d] = true
	}

	recs, err := s.records()
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	var freed int64
	usedBlobs, usedLayers := map[string]bool{}, map[string]bool{}
	var removed []record
	for _, rec := range recs {
		if kept[rec.Digest] {
			usedBlobs[rec.Digest], usedBlobs[rec.Config] = true, true
			for _, id := range rec.DiffIDs {
				usedLayers[id] = true
			}
			continue
		}
		removed = append(removed, rec)
	}
	n, err := s.pruneRegistry(repos, kept, usedBlobs)
	freed += n
	if err != nil {
		return freed, fmt.Errorf("prune: %w", err)
	}
	for _, rec := range removed {
		if err := os.Remove(s.recordPath(rec.Digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return freed, fmt.Errorf("prune: %w", err)
		}
		for _, b := range []string{rec.Digest, rec.Config} {
			if usedBlobs[b] {
				continue
			}
			n := s.blobSize(b)
			if err := os.Remove(s.blobPath(b)); err == nil {
				freed += n
			}
		}
	}
	changed := false
	for tag, d := range tags {
		if !kept[d] {
			delete(tags, tag)
			changed = true
		}
	}
	if changed {
		if err := s.writeTags(tags); err != nil {
			return freed, fmt.Errorf("prune: %w", err)
		}
	}

	mounted, err := mountedLowerDirs()
	if err != nil {
		return freed, fmt.Errorf("prune: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(s.root, "layers", "sha256"))
	if err != nil {
		return freed, fmt.Errorf("prune: %w", err)
	}
	for _, e := range entries {
		id := "sha256:" + e.Name()
		if usedLayers[id] || mounted[s.layerFS(id)] {
			continue
		}
		n := s.layerSize(id)
		if err := os.RemoveAll(s.layerDir(id)); err != nil {
			return freed, fmt.Errorf("prune: %w", err)
		}
		freed += n
	}
	// Nothing is in progress while Prune holds s.mu: leftovers in tmp are
	// from failed work.
	if tmp, err := os.ReadDir(s.tmpDir()); err == nil {
		for _, e := range tmp {
			os.RemoveAll(filepath.Join(s.tmpDir(), e.Name()))
		}
	}
	return freed, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeFileAtomic writes data to a temporary file beside p, syncs it and
// renames it to p, so p is either old or new, never partial.
func writeFileAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return syncDir(filepath.Dir(p))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// syncFS flushes the file system holding dir (all files of a just unpacked
// layer at once).
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}

// diskUsage is the bytes of disk blocks used under dir, hard links counted
// once.
func diskUsage(dir string) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
