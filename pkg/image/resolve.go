package image

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// userAgent is sent to registries.
const userAgent = "knbox"

// bareDigest matches a digest without a repository, the name of an unnamed
// image loaded from an archive.
var bareDigest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Resolve turns a reference into a digest reference, repo@sha256:..., as
// Knative does when a Revision is created: a digest reference is returned
// as it is (normalised), a tag is looked up in the local tag index (tags of
// loaded archives) and else in its registry. For an image index the digest
// is the one of the manifest for this machine's platform
// (runtime.GOOS/runtime.GOARCH). kc, if not nil, is tried before the
// Store's default keychain.
func (s *Store) Resolve(ctx context.Context, ref string, kc authn.Keychain) (string, error) {
	if bareDigest.MatchString(ref) {
		if _, err := s.readRecord(ref); err != nil {
			return "", fmt.Errorf("resolve %s: %w", ref, ErrNotFound)
		}
		return ref, nil
	}
	r, err := s.parse(ref)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", ref, err)
	}
	switch r := r.(type) {
	case name.Digest:
		return r.Context().Name() + "@" + r.DigestStr(), nil
	case name.Tag:
		if d, ok := s.localTag(r.Name()); ok {
			return r.Context().Name() + "@" + d, nil
		}
		if s.isLocal(r.RegistryStr()) {
			d, err := s.resolveLocal(r)
			if err != nil {
				return "", fmt.Errorf("resolve %s: %w", ref, err)
			}
			return r.Context().Name() + "@" + d, nil
		}
		if reg := r.RegistryStr(); slices.Contains(s.skip, reg) {
			return "", fmt.Errorf("resolve %s: %w: registry %s is in config-deployment's registries-skipping-tag-resolving, so its tags are resolved from loaded images only (knbox image load), and this one is not loaded", ref, ErrNotFound, reg)
		}
		d, err := s.resolveRemote(ctx, r, kc)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", ref, err)
		}
		return r.Context().Name() + "@" + d, nil
	default:
		return "", fmt.Errorf("resolve %s: unsupported reference", ref)
	}
}

// resolveRemote asks the registry for the tag's manifest and returns the
// digest of the image manifest for this platform.
func (s *Store) resolveRemote(ctx context.Context, tag name.Tag, kc authn.Keychain) (string, error) {
	desc, err := remote.Get(tag, s.remoteOptions(ctx, kc)...)
	if err != nil {
		return "", err
	}
	mt, raw, digest := desc.MediaType, desc.Manifest, desc.Digest
	// An index may name another index; follow a few levels at most.
	for range 3 {
		switch {
		case mt.IsImage():
			return digest.String(), nil
		case mt.IsIndex():
			child, err := pickPlatform(raw)
			if err != nil {
				return "", err
			}
			if child.MediaType.IsImage() {
				return child.Digest.String(), nil
			}
			desc, err = remote.Get(tag.Context().Digest(child.Digest.String()), s.remoteOptions(ctx, kc)...)
			if err != nil {
				return "", err
			}
			mt, raw, digest = desc.MediaType, desc.Manifest, desc.Digest
		default:
			return "", unsupportedManifest(mt)
		}
	}
	return "", fmt.Errorf("image indexes nested too deeply")
}

func unsupportedManifest(mt types.MediaType) error {
	if mt.IsSchema1() {
		return fmt.Errorf("docker schema 1 manifests are not supported (%s): push the image again with a current client", mt)
	}
	return fmt.Errorf("unsupported manifest media type %q", mt)
}

// platform is this machine's platform, as an image index names it.
var platform = v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}

// pickPlatform chooses the manifest for this machine's platform from a raw
// image index. Among manifests of the right OS and architecture, one without
// a variant (or with the architecture's baseline variant) is preferred.
func pickPlatform(rawIndex []byte) (v1.Descriptor, error) {
	idx, err := v1.ParseIndexManifest(bytes.NewReader(rawIndex))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("parse image index: %w", err)
	}
	best := -1
	for i, m := range idx.Manifests {
		p := m.Platform
		if p == nil || p.OS != platform.OS || p.Architecture != platform.Architecture {
			continue
		}
		if !m.MediaType.IsImage() && !m.MediaType.IsIndex() {
			continue
		}
		if best < 0 {
			best = i
		}
		if p.Variant == "" || (p.Architecture == "arm64" && p.Variant == "v8") {
			best = i
			break
		}
	}
	if best < 0 {
		var have []string
		for _, m := range idx.Manifests {
			if m.Platform != nil {
				have = append(have, m.Platform.String())
			}
		}
		return v1.Descriptor{}, fmt.Errorf("no image for %s/%s in the index (it has %s)", platform.OS, platform.Architecture, strings.Join(have, ", "))
	}
	return idx.Manifests[best], nil
}

// parse parses a reference, marking its registry insecure (plain HTTP
// allowed) when plainHTTPAllowed says so.
func (s *Store) parse(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if s.plainHTTPAllowed(r.Context().RegistryStr()) {
		return name.ParseReference(ref, name.Insecure)
	}
	return r, nil
}

// remoteOptions are the options of every registry call: ctx, credentials
// (kc before the default keychain), the transport that refuses plain HTTP
// where it is not allowed, and this machine's platform.
func (s *Store) remoteOptions(ctx context.Context, kc authn.Keychain) []remote.Option {
	keychain := s.keychain
	if kc != nil {
		keychain = authn.NewMultiKeychain(kc, s.keychain)
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(keychain),
		remote.WithTransport(s.transport),
		remote.WithUserAgent(userAgent),
		remote.WithPlatform(platform),
	}
}

func (s *Store) plainHTTPAllowed(registry string) bool {
	return plainHTTPAllowed(registry, s.insecure)
}

// plainHTTPAllowed decides whether a registry ("host" or "host:port") may be
// reached over plain HTTP: loopback registries (localhost, 127.0.0.0/8, ::1)
// always, others only when listed in insecure (an entry without a port
// matches any port of its host). go-containerregistry on its own would also
// try plain HTTP for private (RFC 1918) addresses and *.local; knbox does not.
func plainHTTPAllowed(registry string, insecure []string) bool {
	registry = strings.ToLower(registry)
	host := hostOf(registry)
	for _, in := range insecure {
		in = strings.ToLower(strings.TrimSpace(in))
		if in == "" {
			continue
		}
		if in == registry || (!hasPort(in) && hostOf(in) == host) {
			return true
		}
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostOf strips the port and IPv6 brackets from host[:port].
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

func hasPort(hostport string) bool {
	_, _, err := net.SplitHostPort(hostport)
	return err == nil
}

// guardTransport refuses requests over plain HTTP to hosts that allow does
// not accept, before any traffic is sent. It also sees every redirect, so a
// registry cannot send knbox to plain HTTP elsewhere.
type guardTransport struct {
	base  http.RoundTripper
	allow func(host string) bool
}

func (g *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !g.allow(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("refusing plain HTTP to %s: not a loopback registry and not listed as insecure", req.URL.Host)
	}
	return g.base.RoundTrip(req)
}
