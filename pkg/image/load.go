package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations that name the images of an OCI layout.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// maxMetaFile bounds the JSON files read from an archive into memory.
const maxMetaFile = 16 << 20

// Load imports a `docker save` tarball or an OCI image layout archive (a tar
// of an oci-layout directory) for offline use and returns the references it
// loaded: its tags, normalised ("index.docker.io/library/app:v1"), which
// Resolve then finds in the local tag index without asking a registry. An
// image without a name is returned as its bare digest, "sha256:...", which
// Pull and Resolve accept for cached images.
//
// In an OCI layout, a manifest is named by its io.containerd.image.name
// annotation, else by org.opencontainers.image.ref.name if that is a full
// reference with a tag ("app:v1"; a bare "v1" names no repository); an index
// in it yields this platform's image. When an archive is both (docker 25
// writes both), the OCI layout is read: it keeps the registry's digests.
func (s *Store) Load(ctx context.Context, r io.Reader) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	spool, err := os.CreateTemp(s.tmpDir(), "load-*.tar")
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	// The archive is spooled to disk: keep MinFreeBytes free while it is.
	guard := &layerBudget{checkDisk: s.checkDisk}
	if _, err := io.Copy(&diskGuard{w: spool, b: guard}, r); err != nil {
		return nil, fmt.Errorf("load: read archive: %w", err)
	}
	a, err := indexArchive(spool)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	var imgs []loaded
	switch {
	case a.has("oci-layout") && a.has("index.json"):
		imgs, err = a.ociImages()
	case a.has("manifest.json"):
		imgs, err = a.dockerImages()
	default:
		err = errors.New("neither a docker save tarball (manifest.json) nor an OCI layout archive (oci-layout, index.json)")
	}
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}

	var refs []string
	for _, li := range imgs {
		img, err := s.add(ctx, li.src)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", li.describe(), err)
		}
		if len(li.tags) == 0 {
			refs = append(refs, img.Digest)
			continue
		}
		s.meta.Lock()
		tags, err := s.readTags()
		if err == nil {
			for _, t := range li.tags {
				tags[t] = img.Digest
			}
			err = s.writeTags(tags)
		}
		s.meta.Unlock()
		if err != nil {
			return nil, fmt.Errorf("load: tag index: %w", err)
		}
		refs = append(refs, li.tags...)
	}
	return refs, nil
}

// loaded is an image found in an archive.
type loaded struct {
	src  source
	tags []string // normalised tags
}

func (li loaded) describe() string {
	if len(li.tags) > 0 {
		return li.tags[0]
	}
	return li.src.digest.String()
}

// archive is a tar file indexed by entry name, so that entries can be read
// in any order without extracting them.
type archive struct {
	f       *os.File
	entries map[string]section
}

type section struct{ off, size int64 }

// indexArchive records where each regular file of the tar f starts.
func indexArchive(f *os.File) (*archive, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	cr := &countingReader{r: bufio.NewReaderSize(f, 64<<10)}
	tr := tar.NewReader(cr)
	a := &archive{f: f, entries: map[string]section{}}
	links := map[string]string{} // name -> target, both cleaned archive paths
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		p, err := cleanPath(hdr.Name)
		if err != nil || p == "" {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
		case tar.TypeSymlink:
			// Older `docker save` links a layer stored once from the
			// directories of the other images that have it.
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(p), target)
			}
			if t, err := cleanPath(target); err == nil && t != "" {
				links[p] = t
			}
			continue
		case tar.TypeLink:
			if t, err := cleanPath(hdr.Linkname); err == nil && t != "" {
				links[p] = t
			}
			continue
		default:
			continue
		}
		// The tar reader has consumed exactly the headers: the data
		// starts here. (Sparse entries would break this; archives of
		// images have none, and every blob read is checked against its
		// digest or diff ID anyway.)
		a.entries[p] = section{off: cr.n, size: hdr.Size}
	}
	for name, target := range links {
		// Follow a few links at most; a link that leads nowhere (or
		// in a loop) is left out.
		for range 8 {
			if sec, ok := a.entries[target]; ok {
				a.entries[name] = sec
				break
			}
			next, ok := links[target]
			if !ok {
				break
			}
			target = next
		}
	}
	return a, nil
}

// diskGuard checks the free space as it writes.
type diskGuard struct {
	w io.Writer
	b *layerBudget
}

func (g *diskGuard) Write(p []byte) (int, error) {
	n, err := g.w.Write(p)
	if err == nil {
		err = g.b.written(int64(n))
	}
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (a *archive) has(name string) bool {
	_, ok := a.entries[name]
	return ok
}

func (a *archive) open(name string) (io.ReadCloser, error) {
	p, err := cleanPath(name)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", name, err)
	}
	sec, ok := a.entries[p]
	if !ok {
		return nil, fmt.Errorf("%s: not in the archive", name)
	}
	return io.NopCloser(io.NewSectionReader(a.f, sec.off, sec.size)), nil
}

func (a *archive) read(name string) ([]byte, error) {
	rc, err := a.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxMetaFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMetaFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxMetaFile)
	}
	return b, nil
}

func blobName(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// blob is a layer blob of the archive, verified and unpacked where it is.
func (a *archive) blob(name string) blob {
	return blob{open: func() (io.ReadCloser, error) { return a.open(name) }, local: true}
}

// archiveBlob lets go-containerregistry detect and undo the compression of a
// blob (gzip or zstd, by its first bytes); only Compressed is ever called.
type archiveBlob struct {
	open func() (io.ReadCloser, error)
}

func (b *archiveBlob) Digest() (v1.Hash, error)            { return v1.Hash{}, errors.New("not computed") }
func (b *archiveBlob) Compressed() (io.ReadCloser, error)  { return b.open() }
func (b *archiveBlob) Size() (int64, error)                { return 0, errors.New("not computed") }
func (b *archiveBlob) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

// ociImages reads the images of an OCI image layout.
func (a *archive) ociImages() ([]loaded, error) {
	raw, err := a.read("index.json")
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	var out []loaded
	byDigest := map[v1.Hash]int{}
	for _, desc := range idx.Manifests {
		src, err := a.ociImage(desc, 0)
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
		}
		tags := ociTags(desc.Annotations)
		for _, t := range tags {
			src.repos = append(src.repos, t.Context().Name())
		}
		i, ok := byDigest[src.digest]
		if !ok {
			i = len(out)
			byDigest[src.digest] = i
			out = append(out, loaded{src: src})
		} else {
			out[i].src.repos = append(out[i].src.repos, src.repos...)
		}
		for _, t := range tags {
			if !slices.Contains(out[i].tags, t.Name()) {
				out[i].tags = append(out[i].tags, t.Name())
			}
		}
	}
	return out, nil
}

// ociImage reads the image a descriptor of an OCI layout names, taking this
// platform's image from an index.
func (a *archive) ociImage(desc v1.Descriptor, depth int) (source, error) {
	raw, err := a.read(blobName(desc.Digest))
	if err != nil {
		return source{}, err
	}
	if desc.Digest.Algorithm != "sha256" || sha256Hex(raw) != desc.Digest.Hex {
		return source{}, fmt.Errorf("blob does not match its digest")
	}
	switch {
	case desc.MediaType.IsIndex():
		if depth == 3 {
			return source{}, errors.New("image indexes nested too deeply")
		}
		child, err := pickPlatform(raw)
		if err != nil {
			return source{}, err
		}
		return a.ociImage(child, depth+1)
	case desc.MediaType.IsImage():
	default:
		return source{}, unsupportedManifest(desc.MediaType)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return source{}, err
	}
	config, err := a.read(blobName(m.Config.Digest))
	if err != nil {
		return source{}, fmt.Errorf("config: %w", err)
	}
	src := source{digest: desc.Digest, manifest: raw, config: config}
	for _, l := range m.Layers {
		name := blobName(l.Digest)
		if !a.has(name) {
			return source{}, fmt.Errorf("layer %s is not in the archive", l.Digest)
		}
		src.layers = append(src.layers, a.blob(name))
	}
	return src, nil
}

// ociTags returns the tags an OCI layout descriptor's annotations name.
func ociTags(ann map[string]string) []name.Tag {
	if n := ann[annotationContainerdName]; n != "" {
		if t, err := name.NewTag(n); err == nil {
			return []name.Tag{t}
		}
	}
	if n := ann[annotationRefName]; n != "" {
		// StrictValidation wants an explicit tag, so a bare "v1" (a
		// tag without a repository) is not read as an image "v1".
		if t, err := name.NewTag(n, name.StrictValidation); err == nil {
			return []name.Tag{t}
		}
	}
	return nil
}

// dockerManifest is an entry of a `docker save` manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// dockerImages reads the images of a `docker save` tarball. Such a tarball
// has no image manifest, so one is made: an OCI manifest whose layers are the
// archive's layer files as they are (uncompressed tar, as docker writes
// them, with the diff ID as digest; or gzip or zstd).
func (a *archive) dockerImages() ([]loaded, error) {
	raw, err := a.read("manifest.json")
	if err != nil {
		return nil, err
	}
	var entries []dockerManifest
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	var out []loaded
	for _, e := range entries {
		config, err := a.read(e.Config)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		cf, err := v1.ParseConfigFile(bytes.NewReader(config))
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", e.Config, err)
		}
		if len(cf.RootFS.DiffIDs) != len(e.Layers) {
			return nil, fmt.Errorf("config %s names %d layers, manifest.json %d", e.Config, len(cf.RootFS.DiffIDs), len(e.Layers))
		}
		m := v1.Manifest{
			SchemaVersion: 2,
			MediaType:     types.OCIManifestSchema1,
			Config: v1.Descriptor{
				MediaType: types.OCIConfigJSON,
				Size:      int64(len(config)),
				Digest:    v1.Hash{Algorithm: "sha256", Hex: sha256Hex(config)},
			},
		}
		var li loaded
		for i, l := range e.Layers {
			desc, err := a.dockerLayer(l, cf.RootFS.DiffIDs[i])
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l, err)
			}
			m.Layers = append(m.Layers, desc)
			li.src.layers = append(li.src.layers, a.blob(l))
		}
		mraw, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		li.src.manifest, li.src.config = mraw, config
		li.src.digest = v1.Hash{Algorithm: "sha256", Hex: sha256Hex(mraw)}
		for _, rt := range e.RepoTags {
			t, err := name.NewTag(rt)
			if err != nil {
				return nil, fmt.Errorf("repo tag %q: %w", rt, err)
			}
			li.tags = append(li.tags, t.Name())
			li.src.repos = append(li.src.repos, t.Context().Name())
		}
		out = append(out, li)
	}
	return out, nil
}

// dockerLayer describes a layer file of a docker save tarball.
func (a *archive) dockerLayer(name string, diffID v1.Hash) (v1.Descriptor, error) {
	p, err := cleanPath(name)
	if err != nil {
		return v1.Descriptor{}, err
	}
	sec, ok := a.entries[p]
	if !ok {
		return v1.Descriptor{}, errors.New("not in the archive")
	}
	magic := make([]byte, 4)
	n, _ := a.f.ReadAt(magic, sec.off)
	magic = magic[:min(n, int(sec.size))]
	var mt types.MediaType
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		mt = types.OCILayer
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		mt = types.OCILayerZStd
	default:
		// Uncompressed: the blob is the diff, its digest the diff ID.
		return v1.Descriptor{MediaType: types.OCIUncompressedLayer, Size: sec.size, Digest: diffID}, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(a.f, sec.off, sec.size)); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: sec.size, Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}, nil
}
