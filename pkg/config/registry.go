package config

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// Defaults of the embedded registry.
const (
	// DefaultRegistryAddr is the registry's well-known port on loopback,
	// where docker, crane and ko speak plain HTTP without being told.
	DefaultRegistryAddr = "127.0.0.1:5000"
	// DefaultRegistryName is the name Revisions may use for the registry
	// whatever its address: registry.knbox.local/<namespace>/<name>.
	DefaultRegistryName         = "registry.knbox.local"
	DefaultRegistryMaxBlobBytes = DefaultMaxLayerBytes
	DefaultRegistryMaxManifest  = DefaultMaxManifestBytes
	DefaultRegistryMaxUploads   = 64
	DefaultRegistryUploadTTL    = 15 * time.Minute
	DefaultRegistryBlobGrace    = time.Hour
)

// Registry configures knbox's embedded OCI registry (pkg/registry): pushes
// land in the image cache, and Revisions naming
// <addr>/<namespace>/<name> (or registry.knbox.local/<namespace>/<name>)
// run them without a network.
type Registry struct {
	// Disabled turns the registry off.
	Disabled bool `json:"disabled,omitempty"`
	// Addr is where it listens (host:port): plain HTTP on loopback, HTTPS
	// with the API's certificate elsewhere. Default DefaultRegistryAddr.
	Addr string `json:"addr,omitempty"`
	// Names are more names of the registry (host or host:port) that
	// Revisions may use; they are never resolved over the network.
	// Default [registry.knbox.local].
	Names []string `json:"names,omitempty"`
	// MaxBlobBytes bounds one pushed blob (413 beyond).
	MaxBlobBytes ByteSize `json:"maxBlobBytes,omitempty"`
	// MaxManifestBytes bounds one pushed manifest (413 beyond).
	MaxManifestBytes ByteSize `json:"maxManifestBytes,omitempty"`
	// MaxUploads bounds the blob uploads in progress at once (429 beyond).
	MaxUploads int `json:"maxUploads,omitempty"`
	// UploadTTL is how long an upload may stay idle before it is dropped.
	UploadTTL Duration `json:"uploadTTL,omitempty"`
	// BlobGrace is how long `knbox image prune` keeps a pushed blob that
	// no manifest references yet (a push in progress).
	BlobGrace Duration `json:"blobGrace,omitempty"`
}

func (r *Registry) applyDefaults() {
	if r.Addr == "" {
		r.Addr = DefaultRegistryAddr
	}
	if r.Names == nil {
		r.Names = []string{DefaultRegistryName}
	}
	defBytes(&r.MaxBlobBytes, DefaultRegistryMaxBlobBytes)
	defBytes(&r.MaxManifestBytes, DefaultRegistryMaxManifest)
	defInt(&r.MaxUploads, DefaultRegistryMaxUploads)
	defDuration(&r.UploadTTL, DefaultRegistryUploadTTL)
	defDuration(&r.BlobGrace, DefaultRegistryBlobGrace)
}

func (r *Registry) validate() error {
	if r.Disabled {
		return nil
	}
	if err := validateAddr("registry.addr", r.Addr); err != nil {
		return err
	}
	for i, n := range r.Names {
		host := n
		if h, _, err := net.SplitHostPort(n); err == nil {
			host = h
		}
		if strings.Contains(n, "/") || validateHost(host) != nil {
			return fmt.Errorf("registry.names[%d]: %q is not a registry host or host:port", i, n)
		}
	}
	switch {
	case r.MaxBlobBytes <= 0:
		return fmt.Errorf("registry.maxBlobBytes: must be positive, was %d", r.MaxBlobBytes)
	case r.MaxManifestBytes <= 0:
		return fmt.Errorf("registry.maxManifestBytes: must be positive, was %d", r.MaxManifestBytes)
	case r.MaxUploads <= 0:
		return fmt.Errorf("registry.maxUploads: must be positive, was %d", r.MaxUploads)
	case r.UploadTTL <= 0:
		return fmt.Errorf("registry.uploadTTL: must be positive, was %s", r.UploadTTL.D())
	case r.BlobGrace <= 0:
		return fmt.Errorf("registry.blobGrace: must be positive, was %s", r.BlobGrace.D())
	}
	return nil
}
