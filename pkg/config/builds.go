package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Builds configures the seed API's builds (build.knative.dev/v1alpha1,
// package build).
type Builds struct {
	// DefaultTimeout is the timeout of a Build that names none; 0 means
	// DefaultBuildTimeout.
	DefaultTimeout Duration `json:"defaultTimeout,omitempty"`
	// MaxTimeout is the longest timeout a Build may name; 0 means
	// DefaultMaxBuildTimeout.
	MaxTimeout Duration `json:"maxTimeout,omitempty"`
	// Registries are registries on the host's loopback ("127.0.0.1:5000",
	// "[::1]:5000", "localhost:5000") that build steps reach at the same
	// address inside their sandbox (a step has its own network namespace,
	// whose loopback is not the host's): a step pushes to 127.0.0.1:5000/app
	// and a Revision pulls that name from the host. Nothing else of the
	// host is reachable from a step.
	Registries []string `json:"registries,omitempty"`
	// MaxUploadBytes bounds a Build's uploaded source archive (the
	// builds/NAME/source subresource; a larger upload gets 413); 0 means
	// DefaultMaxBuildUploadBytes.
	MaxUploadBytes int64 `json:"maxUploadBytes,omitempty"`
	// MaxSourceBytes and MaxSourceFiles bound what the archive unpacks to
	// in the workspace; 0 means DefaultMaxBuildSourceBytes and
	// DefaultMaxBuildSourceFiles.
	MaxSourceBytes int64 `json:"maxSourceBytes,omitempty"`
	MaxSourceFiles int64 `json:"maxSourceFiles,omitempty"`
	// GitTimeout bounds the clone of a Build's source.git (fetch and
	// checkout); 0 means DefaultBuildGitTimeout. The checkout is bounded by
	// MaxSourceBytes and MaxSourceFiles, as an upload is.
	GitTimeout Duration `json:"gitTimeout,omitempty"`
	// MaxGitFetchBytes bounds the bytes a source.git clone reads from the
	// network; 0 means DefaultMaxBuildGitFetchBytes.
	MaxGitFetchBytes int64 `json:"maxGitFetchBytes,omitempty"`
}

// The builds' defaults: knative/build's 10 minutes, and a day at most.
const (
	DefaultBuildTimeout    = Duration(10 * time.Minute)
	DefaultMaxBuildTimeout = Duration(24 * time.Hour)
	maxBuildRegistries     = 16

	DefaultMaxBuildUploadBytes = 256 << 20
	DefaultMaxBuildSourceBytes = 1 << 30
	DefaultMaxBuildSourceFiles = 100000

	DefaultBuildGitTimeout       = Duration(5 * time.Minute)
	DefaultMaxBuildGitFetchBytes = 512 << 20
)

func (b *Builds) applyDefaults() {
	if b.DefaultTimeout == 0 {
		b.DefaultTimeout = DefaultBuildTimeout
	}
	if b.MaxTimeout == 0 {
		b.MaxTimeout = DefaultMaxBuildTimeout
	}
	if b.MaxUploadBytes == 0 {
		b.MaxUploadBytes = DefaultMaxBuildUploadBytes
	}
	if b.MaxSourceBytes == 0 {
		b.MaxSourceBytes = DefaultMaxBuildSourceBytes
	}
	if b.MaxSourceFiles == 0 {
		b.MaxSourceFiles = DefaultMaxBuildSourceFiles
	}
	if b.GitTimeout == 0 {
		b.GitTimeout = DefaultBuildGitTimeout
	}
	if b.MaxGitFetchBytes == 0 {
		b.MaxGitFetchBytes = DefaultMaxBuildGitFetchBytes
	}
}

func (b *Builds) validate() error {
	if b.DefaultTimeout < Duration(time.Second) {
		return fmt.Errorf("builds.defaultTimeout: must be at least 1s, was %s", time.Duration(b.DefaultTimeout))
	}
	if b.MaxTimeout < b.DefaultTimeout {
		return fmt.Errorf("builds.maxTimeout: must be at least builds.defaultTimeout (%s), was %s",
			time.Duration(b.DefaultTimeout), time.Duration(b.MaxTimeout))
	}
	for _, n := range []struct {
		key string
		v   int64
	}{{"maxUploadBytes", b.MaxUploadBytes}, {"maxSourceBytes", b.MaxSourceBytes}, {"maxSourceFiles", b.MaxSourceFiles}, {"maxGitFetchBytes", b.MaxGitFetchBytes}} {
		if n.v < 1 {
			return fmt.Errorf("builds.%s: must be positive, was %d", n.key, n.v)
		}
	}
	if b.GitTimeout < Duration(time.Second) {
		return fmt.Errorf("builds.gitTimeout: must be at least 1s, was %s", time.Duration(b.GitTimeout))
	}
	if len(b.Registries) > maxBuildRegistries {
		return fmt.Errorf("builds.registries: at most %d, was %d", maxBuildRegistries, len(b.Registries))
	}
	for i, r := range b.Registries {
		if _, err := LoopbackRegistry(r); err != nil {
			return fmt.Errorf("builds.registries[%d]: %w", i, err)
		}
	}
	return nil
}

// LoopbackRegistry parses a builds.registries entry into the loopback
// address and port it names.
func LoopbackRegistry(r string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(r)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: want a loopback host:port: %w", r, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.AddrPort{}, fmt.Errorf("%q: port %q is not a port number", r, port)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() || ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("%q: %q is not a loopback address (127.0.0.0/8, ::1 or localhost)", r, host)
	}
	return netip.AddrPortFrom(ip, uint16(p)), nil
}
