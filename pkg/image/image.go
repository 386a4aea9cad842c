// Package image owns container images on this machine: it resolves tags to
// digests, pulls images from any registry with go-containerregistry (or
// loads them from `docker save` and OCI layout archives), caches manifests
// and configs by digest, unpacks every layer once into a directory that is
// an overlayfs lower layer, and gives each instance a root filesystem that is
// an overlay of those layers with a private writable upper layer, so starting
// an instance copies nothing.
//
// The package must not import other knbox packages, and it does not export
// go-containerregistry types except authn.Keychain, the seam through which
// callers pass credentials.
//
// # Layout of the cache
//
//	Root/blobs/sha256/<hex>        manifests and configs, by digest
//	Root/layers/sha256/<hex>/fs    an unpacked layer, by diff ID (an overlay lower dir)
//	Root/layers/sha256/<hex>/layer.json  its size on disk
//	Root/images/sha256/<hex>.json  an image record, by manifest digest
//	Root/tags.json                 the local tag index (tags of loaded archives)
//	Root/tmp/                      work in progress, emptied by Open
//	Root/empty/                    the lower dir of an image without layers
//	Root/registry/, Root/uploads/  the embedded registry's repositories and uploads (registry.go)
//
// A layer is unpacked into Root/tmp and renamed into place after its content
// matched its diff ID and was synced, and an image record is written only
// after all its layers are in place, so a crash never leaves a half layer or
// half image that looks complete. One Store (one process) owns a Root.
//
// # Hostile images
//
// Nothing is unpacked from bytes that were not verified: a layer's blob is
// copied into Root/tmp (no more than the size the manifest gives) and its
// size and digest checked first; a blob of a loaded archive is checked where
// it is. What an image may take is bounded (Limits): the manifest, the
// config, the number of layers and their compressed sizes are checked before
// anything else is fetched; while unpacking, every entry counts against the
// files and bytes of its layer and of its image (a sparse file counts its
// full length, holes included), the whole uncompressed stream is bounded
// (what follows the tar's end too), and the free space is checked as bytes
// are written. Blocks of zeros are written as holes, so a sparse file stays
// sparse. A blob whose content failed (verification, a limit, an entry
// refused) is not fetched again before a backoff that doubles from
// Limits.PullBackoff; its error, which names the limit to raise, is
// returned meanwhile.
//
// # Layers in use
//
// Prune never removes a layer that a mounted overlay uses. It learns which
// layers are in use from /proc/self/mountinfo (the lowerdir options of
// overlay mounts) rather than from a reference count in memory, so the answer
// survives a restart of the daemon while instances keep running.
//
// # Unpacking
//
// Layers are unpacked without ever following a symlink: every parent
// directory is opened component by component with O_NOFOLLOW, so a layer
// cannot write through a symlink, and entries with ".." components are
// refused. Symlinks are created as they are (absolute targets included);
// they are resolved later inside the container's root. Ownership, mode
// (setuid, setgid and sticky bits included), modification times, hard links
// within the layer, FIFOs and the extended attributes user.* and
// security.capability are kept. Character and block devices are skipped: the
// runtime provides /dev. Other extended attributes (trusted.*, for instance,
// which would let an image forge overlayfs metadata) are dropped. OCI
// whiteouts become overlayfs whiteouts: ".wh.name" becomes a character
// device 0/0 named "name", and ".wh..wh..opq" sets trusted.overlay.opaque=y
// on its directory.
package image

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrNotFound is returned when an image asked for by digest is neither cached
// nor obtainable (a bare digest of an image that is not in the cache).
var ErrNotFound = errors.New("image not found")

// Options configure a Store. The zero value of every field but Root is a
// documented default.
type Options struct {
	// Root is the cache directory (the data directory's "images"). It must
	// be an absolute path or is made one; it must not contain ':' or ','
	// because overlayfs options separate paths with them.
	Root string
	// Insecure lists registries ("host" or "host:port") that may be reached
	// over plain HTTP. Loopback registries (127.0.0.0/8, ::1, localhost)
	// are always allowed plain HTTP; every other registry is HTTPS only.
	// An entry without a port matches the host on any port.
	Insecure []string
	// Keychain gives default credentials; nil means authn.DefaultKeychain
	// (the docker config of the user, else anonymous).
	Keychain authn.Keychain
	// Limits bound what an image may take; see Limits.
	Limits Limits
	// ObservePull, if not nil, is told of each image fetched from a
	// registry (not of cached ones): how long the fetch and unpack took and
	// how many compressed bytes the manifest lists (config and layers).
	ObservePull func(d time.Duration, bytes int64)
	// SkipTagResolving lists registries (host or host:port, as Knative's
	// registries-skipping-tag-resolving) whose tags are resolved from the
	// local tag index only (loaded images), never by asking the registry.
	SkipTagResolving []string
	// LocalRegistries are the names (host or host:port) of knbox's
	// embedded registry: references to them are resolved and pulled from
	// what was pushed (see registry.go), never over the network.
	LocalRegistries []string
	// BlobGrace is how long Prune keeps a pushed blob that no manifest
	// references yet; DefaultBlobGrace if zero.
	BlobGrace time.Duration
}

// Config is what an image says about how to run it.
type Config struct {
	Entrypoint   []string `json:"entrypoint,omitempty"`
	Cmd          []string `json:"cmd,omitempty"`
	Env          []string `json:"env,omitempty"`
	WorkingDir   string   `json:"workingDir,omitempty"`
	User         string   `json:"user,omitempty"`
	ExposedPorts []string `json:"exposedPorts,omitempty"` // "8080/tcp", sorted
}

// Image is a pulled image, ready to Mount.
type Image struct {
	// Ref is the digest reference, "repo@sha256:...", the image was
	// pulled as (a bare "sha256:..." for an unnamed loaded image).
	Ref string
	// Digest is the digest of the image manifest, "sha256:...".
	Digest string
	Config Config
	// Layers are the unpacked layers, bottom first: overlay lower dirs.
	Layers []string
}

// Info describes a cached image.
type Info struct {
	// References are the digest references of the repositories the image
	// was pulled from or loaded as, then the tags of the local tag index
	// that point to it.
	References []string
	Digest     string
	// Size is the bytes on disk of the manifest, the config and the
	// unpacked layers; a layer shared by two images counts in both.
	Size    int64
	Created time.Time // when the image entered the cache
}

// Store is a cache of images on local disk. It is safe for concurrent use.
type Store struct {
	root      string
	insecure  []string
	keychain  authn.Keychain
	transport http.RoundTripper

	// mu is held shared by everything that adds to the cache or mounts
	// from it (Pull, Load, Mount) and exclusively by Prune.
	mu sync.RWMutex
	// meta serialises read-modify-write of image records and the tag index.
	meta sync.Mutex

	images flight[*Image]
	layers flight[struct{}]

	limits  Limits
	skip    []string
	observe func(time.Duration, int64)
	backoff backoff // of blobs whose content failed

	local     []string // the embedded registry's names, lowercase
	blobGrace time.Duration
}

// Open opens (creating if needed) the cache at opts.Root and removes work
// left in progress by an earlier process.
func Open(opts Options) (*Store, error) {
	if opts.Root == "" {
		return nil, errors.New("open image store: no root directory")
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	if strings.ContainsAny(root, ":,\n\t ") {
		return nil, fmt.Errorf("open image store: root %q must not contain ':', ',' or white space (overlayfs options)", root)
	}
	s := &Store{
		root:      root,
		insecure:  append([]string(nil), opts.Insecure...),
		keychain:  opts.Keychain,
		limits:    opts.Limits.withDefaults(),
		skip:      append([]string(nil), opts.SkipTagResolving...),
		observe:   opts.ObservePull,
		blobGrace: opts.BlobGrace,
	}
	if s.blobGrace <= 0 {
		s.blobGrace = DefaultBlobGrace
	}
	for _, r := range opts.LocalRegistries {
		if r = strings.ToLower(strings.TrimSpace(r)); r != "" {
			s.local = append(s.local, r)
		}
	}
	s.backoff = backoff{first: s.limits.PullBackoff, max: s.limits.MaxPullBackoff, now: time.Now}
	if s.keychain == nil {
		s.keychain = authn.DefaultKeychain
	}
	base := remote.DefaultTransport.(*http.Transport).Clone()
	s.transport = &guardTransport{base: base, allow: s.plainHTTPAllowed}

	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	// The kernel names lower dirs in /proc/self/mountinfo without
	// symlinks; so must the Store, to recognise its layers there.
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	s.root = root
	if strings.ContainsAny(root, ":,\n\t ") {
		return nil, fmt.Errorf("open image store: root %q must not contain ':', ',' or white space (overlayfs options)", root)
	}
	for _, d := range []string{s.tmpDir(), s.uploadsDir()} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("open image store: clean %s: %w", d, err)
		}
	}
	for _, d := range []string{
		filepath.Join(root, "blobs", "sha256"),
		filepath.Join(root, "layers", "sha256"),
		filepath.Join(root, "images", "sha256"),
		s.tmpDir(),
		s.emptyDir(),
		s.registryDir(),
		s.uploadsDir(),
	} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	// The empty lower dir is the root of an image without layers.
	if err := os.Chmod(s.emptyDir(), 0o755); err != nil {
		return nil, fmt.Errorf("open image store: %w", err)
	}
	return s, nil
}

func (s *Store) tmpDir() string   { return filepath.Join(s.root, "tmp") }
func (s *Store) emptyDir() string { return filepath.Join(s.root, "empty") }
func (s *Store) tagsFile() string { return filepath.Join(s.root, "tags.json") }

// blobPath is where a manifest or config with digest "sha256:<hex>" is kept.
func (s *Store) blobPath(digest string) string {
	return filepath.Join(s.root, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// layerDir is the directory of the unpacked layer with the given diff ID.
func (s *Store) layerDir(diffID string) string {
	return filepath.Join(s.root, "layers", "sha256", strings.TrimPrefix(diffID, "sha256:"))
}

// layerFS is the overlay lower dir of a layer.
func (s *Store) layerFS(diffID string) string { return filepath.Join(s.layerDir(diffID), "fs") }

func (s *Store) recordPath(digest string) string {
	return filepath.Join(s.root, "images", "sha256", strings.TrimPrefix(digest, "sha256:")+".json")
}
