package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/authz"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/listen"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/store"
)

// The configuration's limits, as the options of the packages that apply
// them.

func storeOptions(cfg *config.Config) store.Options {
	l := cfg.Limits
	o := store.Options{
		EventLogSize:     l.Store.EventLogSize,
		EventLogBytes:    int64(l.Store.EventLogBytes),
		CacheBytes:       int64(l.Store.CacheBytes),
		WatchBufferBytes: int64(l.Store.WatchBufferBytes),
		MaxValueBytes:    int64(l.API.MaxObjectBytes),
		MinFreeBytes:     int64(l.Disk.MinFreeBytes),
		ReserveBytes:     int64(l.Disk.ReserveBytes),
		Labels:           apiserver.StoredLabels,
	}
	if len(l.API.MaxObjectBytesByResource) > 0 {
		o.MaxValueBytesByResource = map[string]int64{}
		for r, n := range l.API.MaxObjectBytesByResource {
			o.MaxValueBytesByResource[r] = int64(n)
		}
	}
	return o
}

// ephemeralStorage is the pod runtime's local storage limits.
func ephemeralStorage(cfg *config.Config) pod.EphemeralStorage {
	e := cfg.Limits.EphemeralStorage
	return pod.EphemeralStorage{
		Interval:     e.Interval.D(),
		DefaultLimit: int64(e.DefaultContainerLimit),
		MaxFiles:     e.MaxFiles,
		MaxDepth:     e.MaxDepth,
	}
}

func apiLimits(cfg *config.Config) apiserver.Limits {
	a := cfg.Limits.API
	return apiserver.Limits{
		MaxRequestsInFlight:         a.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: a.MaxMutatingRequestsInFlight,
		MaxLongRunningRequests:      a.MaxLongRunningRequests,
		RequestTimeout:              a.RequestTimeout.D(),
		StreamIdleTimeout:           a.StreamIdleTimeout.D(),
		StreamCreationTimeout:       a.StreamCreationTimeout.D(),
		EventTTL:                    cfg.Limits.Events.TTL.D(),
		MaxEventsPerNamespace:       cfg.Limits.Events.MaxPerNamespace,
		// knbox's own controllers, as system:masters, are never turned away.
		ExemptGroups: []string{"system:masters", authz.InternalGroup},
	}
}

// apiListen and routerListen bound the connections of the API and of the
// router (HTTP and HTTPS).
func apiListen(cfg *config.Config) listen.Limits {
	a := cfg.Limits.API
	return listen.Limits{MaxConnections: a.MaxConnections, ReadHeaderTimeout: a.ReadHeaderTimeout.D(), IdleTimeout: a.IdleTimeout.D()}
}

func routerListen(cfg *config.Config) listen.Limits {
	r := cfg.Limits.Router
	readTimeout := r.ReadTimeout.D()
	if readTimeout == 0 {
		readTimeout = -1 // none
	}
	return listen.Limits{MaxConnections: r.MaxConnections, ReadHeaderTimeout: r.ReadHeaderTimeout.D(), ReadTimeout: readTimeout, IdleTimeout: r.IdleTimeout.D()}
}

// imageOptions are the image cache's options: its root in the data dir,
// the registries, the limits, and config-deployment's
// registries-skipping-tag-resolving.
func imageOptions(cfg *config.Config) (image.Options, error) {
	dep, err := cfg.Deployment()
	if err != nil {
		return image.Options{}, err
	}
	i := cfg.Limits.Images
	return image.Options{
		Root:     filepath.Join(cfg.DataDir, "images"),
		Insecure: cfg.InsecureRegistries,
		Limits: image.Limits{
			MaxLayerBytes: int64(i.MaxLayerBytes), MaxImageBytes: int64(i.MaxImageBytes),
			MaxLayerFiles: int64(i.MaxLayerFiles), MaxImageFiles: int64(i.MaxImageFiles),
			MaxLayers: i.MaxLayers, MaxConfigBytes: int64(i.MaxConfigBytes), MaxManifestBytes: int64(i.MaxManifestBytes),
			MinFreeBytes: int64(cfg.Limits.Disk.MinFreeBytes),
			PullBackoff:  i.PullBackoff.D(), MaxPullBackoff: i.MaxPullBackoff.D(),
		},
		SkipTagResolving: sets.List(dep.RegistriesSkippingTagResolving),
		BlobGrace:        cfg.Registry.BlobGrace.D(),
	}, nil
}

// tuneGC applies limits.memory to the Go runtime of this process, except
// what the GOGC and GOMEMLIMIT environment variables already set. (The
// shims, the same binary, keep Go's defaults: they never call it.)
func tuneGC(m config.MemoryLimits, log *slog.Logger) {
	if _, ok := os.LookupEnv("GOGC"); !ok && m.GCPercent > 0 {
		debug.SetGCPercent(m.GCPercent)
		if m.GCPercent != config.DefaultGCPercent {
			log.Info("garbage collector target set", "gcPercent", m.GCPercent)
		}
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok && m.SoftLimit > 0 {
		debug.SetMemoryLimit(int64(m.SoftLimit))
		log.Info("soft memory limit set", "bytes", int64(m.SoftLimit))
	}
}
