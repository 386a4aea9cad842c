package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Limits bound what clients, tenants and images may cost the host. Every
// bound has a default (the Default* constants; zero in the file means the
// default) chosen for an operator who runs strangers' code on one machine;
// docs/knbox.example.yaml lists them.
type Limits struct {
	API    APILimits    `json:"api,omitempty"`
	Router ServerLimits `json:"router,omitempty"`
	Store  StoreLimits  `json:"store,omitempty"`
	Disk   DiskLimits   `json:"disk,omitempty"`
	Images ImageLimits  `json:"images,omitempty"`
	Events EventLimits  `json:"events,omitempty"`
	// EphemeralStorage is the pods' local storage, measured and limited as
	// the kubelet's eviction manager does (see package pod).
	EphemeralStorage EphemeralStorageLimits `json:"ephemeralStorage,omitempty"`
	// InstanceDNS bounds the name server knbox serves inside instances.
	InstanceDNS DNSLimits `json:"instanceDNS,omitempty"`
	// InstanceAPI bounds the API endpoint knbox serves inside instances
	// (kubernetes.default.svc).
	InstanceAPI InstanceAPILimits `json:"instanceAPI,omitempty"`
	// Memory tunes the Go garbage collector of knbox itself.
	Memory MemoryLimits `json:"memory,omitempty"`
	// PreparedSandboxes bounds the sandboxes kept prepared (made up to
	// their containers' start) for the next scale-up of revisions, so
	// that a cold start costs only the start (see package replicas).
	PreparedSandboxes PreparedSandboxLimits `json:"preparedSandboxes,omitempty"`
	// IdleShims bounds the instances' shims kept started ahead of need,
	// so that a burst of cold starts does not start one per instance
	// (see package pod, "Idle shims").
	IdleShims IdleShimLimits `json:"idleShims,omitempty"`
}

// IdleShimLimits bound the idle shims: started once knbox has made an
// instance, each is knbox's binary waiting for one (12-13 MiB of PSS at
// rest, measured during the burst bench: 7-8 MiB of it its own, the rest
// its share of the binary's pages; nine hold about 115 MiB), and they end
// once knbox made no instance for KeepFor.
type IdleShimLimits struct {
	// Disabled: none is kept; every instance starts its shim.
	Disabled bool `json:"disabled,omitempty"`
	// Count is the most kept at once.
	Count int `json:"count,omitempty"`
	// KeepFor is how long they are kept after knbox last made an
	// instance; then they end, until the next.
	KeepFor Duration `json:"keepFor,omitempty"`
}

// PreparedSandboxLimits bound the prepared sandboxes, one per revision at
// most, shared by all revisions in the order of their last request.
type PreparedSandboxLimits struct {
	// Disabled: no sandbox is prepared; every instance is made when it is
	// wanted.
	Disabled bool `json:"disabled,omitempty"`
	// Count is the most sandboxes kept at once.
	Count int `json:"count,omitempty"`
	// Memory bounds their summed memory: the proportional set size (PSS)
	// of each one's shim and what waits under it (the runtime's created
	// init; runsc's sandbox and gofer).
	Memory ByteSize `json:"memory,omitempty"`
}

// MemoryLimits tune the Go runtime's garbage collector of the knbox
// process, as the GOGC and GOMEMLIMIT environment variables do (which win
// when set). The collector's target defaults to 50, not Go's 100: at rest
// the process holds up to about one and a half times its live data, not
// twice (DefaultGCPercent says what it costs).
type MemoryLimits struct {
	// GCPercent is how far the heap grows beyond the live data before
	// the next collection, in percent (GOGC). Lower holds less memory for
	// more collector CPU (BenchmarkIdleServices prints both).
	GCPercent int `json:"gcPercent,omitempty"`
	// SoftLimit, when not zero, is the runtime's soft memory limit
	// (GOMEMLIMIT): near it the collector runs more often and returns
	// free memory to the system sooner, at the cost of CPU (up to half of
	// it when the live data itself nears the limit). Zero: none.
	SoftLimit ByteSize `json:"softLimit,omitempty"`
	// Rest is what the collector does once the process has been quiet for
	// a while: a server with every Service at zero allocates little, so a
	// low target there costs little CPU and holds less memory.
	Rest MemoryRestLimits `json:"rest,omitempty"`
}

// MemoryRestLimits: once knbox has allocated less than QuietBytesPerSecond
// (over the last ten seconds) for After, the collector's target is
// GCPercent and one collection returns every free page to the system (as
// Java's G1 does at rest since JEP 346); once it allocates more,
// limits.memory.gcPercent is back.
// GOGC in the environment turns it off, as it overrides gcPercent.
type MemoryRestLimits struct {
	// Disabled: the target stays limits.memory.gcPercent.
	Disabled bool `json:"disabled,omitempty"`
	// After is how long the process has to be quiet.
	After Duration `json:"after,omitempty"`
	// GCPercent is the collector's target at rest (GOGC).
	GCPercent int `json:"gcPercent,omitempty"`
	// QuietBytesPerSecond: the process is quiet while it allocates less
	// than this much per second, over the last ten seconds.
	QuietBytesPerSecond ByteSize `json:"quietBytesPerSecond,omitempty"`
	// KeepPages: the pages of knbox's binary and of knbox.db stay mapped
	// at rest. By default knbox unmaps them as it comes to rest
	// (madvise MADV_DONTNEED): they stay in the page cache, no longer
	// counted in its RSS, and what it uses after that maps back in with a
	// minor fault.
	KeepPages bool `json:"keepPages,omitempty"`
}

// InstanceAPILimits bound what one instance may hold of the API endpoint
// served inside it; its requests are then bounded as every API client's.
type InstanceAPILimits struct {
	// MaxConnections is the most connections one instance holds to the
	// API at once; one more is closed at once.
	MaxConnections int `json:"maxConnections,omitempty"`
}

// DNSLimits bound the name server of instances (package dns) in what it
// forwards to the host's name servers (egress on).
type DNSLimits struct {
	// MaxForwarding is the number of queries forwarded at once, for all
	// instances together; more get SERVFAIL.
	MaxForwarding int `json:"maxForwarding,omitempty"`
	// ForwardTimeout bounds a forwarded query, per upstream server.
	ForwardTimeout Duration `json:"forwardTimeout,omitempty"`
}

// EventLimits bound the Events (core/v1 and events.k8s.io/v1) the API keeps.
type EventLimits struct {
	// TTL: an Event not updated for this long is deleted
	// (kube-apiserver's --event-ttl).
	TTL Duration `json:"ttl,omitempty"`
	// MaxPerNamespace Events are kept in a namespace; beyond, the least
	// recently updated are deleted, down to nine tenths of it.
	MaxPerNamespace int `json:"maxPerNamespace,omitempty"`
}

// EphemeralStorageLimits bound what instances write on the data dir's
// disk: their containers' writable layers and emptyDir volumes. An
// instance over its containers' limits.ephemeral-storage or an emptyDir
// over its sizeLimit is evicted (reason Evicted on the Revision).
type EphemeralStorageLimits struct {
	// Interval between two measures of an instance (the kubelet's
	// housekeeping interval).
	Interval Duration `json:"interval,omitempty"`
	// DefaultContainerLimit is the limit of a container that sets no
	// limits.ephemeral-storage; 0 (the default): none, as on Kubernetes.
	// An operator running strangers' code sets one.
	DefaultContainerLimit ByteSize `json:"defaultContainerLimit,omitempty"`
	// MaxFiles and MaxDepth bound one measure's walk of an instance's
	// storage; an instance that holds more (or deeper) is evicted, since
	// its usage cannot be measured.
	MaxFiles int `json:"maxFiles,omitempty"`
	MaxDepth int `json:"maxDepth,omitempty"`
}

// ServerLimits bound an HTTP listener's connections.
type ServerLimits struct {
	// MaxConnections held at once; more are closed as they come.
	MaxConnections int `json:"maxConnections,omitempty"`
	// ReadHeaderTimeout disconnects a client that has not sent a request's
	// headers in time (slowloris).
	ReadHeaderTimeout Duration `json:"readHeaderTimeout,omitempty"`
	// ReadTimeout bounds the reading of a whole request, body included
	// (the router's default 0 means none: a Revision's timeoutSeconds
	// bounds its requests).
	ReadTimeout Duration `json:"readTimeout,omitempty"`
	// IdleTimeout closes a keep-alive connection without a request.
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
}

// APILimits bound the API server.
type APILimits struct {
	// MaxConnections held at once; more are closed as they come.
	MaxConnections int `json:"maxConnections,omitempty"`
	// ReadHeaderTimeout disconnects a client that has not sent a request's
	// headers in time (slowloris).
	ReadHeaderTimeout Duration `json:"readHeaderTimeout,omitempty"`
	// IdleTimeout closes a keep-alive connection without a request.
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// MaxRequestsInFlight reads and MaxMutatingRequestsInFlight writes
	// are served at once; more get 429 with Retry-After (kube-apiserver's
	// defaults). Watches and followed logs count against
	// MaxLongRunningRequests instead. Members of system:masters are not
	// limited.
	MaxRequestsInFlight         int `json:"maxRequestsInFlight,omitempty"`
	MaxMutatingRequestsInFlight int `json:"maxMutatingRequestsInFlight,omitempty"`
	MaxLongRunningRequests      int `json:"maxLongRunningRequests,omitempty"`
	// RequestTimeout bounds the reading of a request that is not
	// long-running.
	RequestTimeout Duration `json:"requestTimeout,omitempty"`
	// StreamIdleTimeout closes an exec or port-forward session idle this
	// long; StreamCreationTimeout bounds the time a client has to open a
	// session's streams (the kubelet's defaults, 4h and 30s).
	StreamIdleTimeout     Duration `json:"streamIdleTimeout,omitempty"`
	StreamCreationTimeout Duration `json:"streamCreationTimeout,omitempty"`
	// MaxObjectBytes bounds a stored object, any kind (etcd's request
	// limit, which bounds a Kubernetes object: 1.5 MiB).
	MaxObjectBytes ByteSize `json:"maxObjectBytes,omitempty"`
	// MaxObjectBytesByResource sets the bound of some kinds, by resource
	// ("configmaps", "services.serving.knative.dev").
	MaxObjectBytesByResource map[string]ByteSize `json:"maxObjectBytesByResource,omitempty"`
}

// StoreLimits bound the store's history and watches.
type StoreLimits struct {
	// EventLogSize events are kept for watches resuming from a
	// resourceVersion (their kind, name and revision)...
	EventLogSize int `json:"eventLogSize,omitempty"`
	// ...and the objects of the newest of them up to EventLogBytes (as
	// stored: compressed, about half their JSON); a watch resuming from
	// before them gets 410 Gone and relists.
	EventLogBytes ByteSize `json:"eventLogBytes,omitempty"`
	// CacheBytes of the newest events are also held in memory.
	CacheBytes ByteSize `json:"cacheBytes,omitempty"`
	// WatchBufferBytes: a watch whose client lags further behind is
	// closed (the client re-watches).
	WatchBufferBytes ByteSize `json:"watchBufferBytes,omitempty"`
}

// DiskLimits keep the data dir's disk from filling up.
type DiskLimits struct {
	// MinFreeBytes: with less free, API writes other than deletions get
	// 507, image pulls fail, and /readyz fails.
	MinFreeBytes ByteSize `json:"minFreeBytes,omitempty"`
	// ReserveBytes are held in a file beside the store and given up when
	// a deletion finds the disk full, so deleting always works.
	ReserveBytes ByteSize `json:"reserveBytes,omitempty"`
}

// ImageLimits bound what a pulled or loaded image may take.
type ImageLimits struct {
	// MaxLayerBytes and MaxImageBytes bound the unpacked size (files'
	// lengths, holes of sparse files included) of a layer and of an
	// image; a layer's compressed size too.
	MaxLayerBytes ByteSize `json:"maxLayerBytes,omitempty"`
	MaxImageBytes ByteSize `json:"maxImageBytes,omitempty"`
	// MaxLayerFiles and MaxImageFiles bound the entries of a layer and of
	// an image.
	MaxLayerFiles int `json:"maxLayerFiles,omitempty"`
	MaxImageFiles int `json:"maxImageFiles,omitempty"`
	// MaxLayers bounds the layers of an image.
	MaxLayers int `json:"maxLayers,omitempty"`
	// MaxConfigBytes and MaxManifestBytes bound an image's config and
	// manifest (or index).
	MaxConfigBytes   ByteSize `json:"maxConfigBytes,omitempty"`
	MaxManifestBytes ByteSize `json:"maxManifestBytes,omitempty"`
	// PullBackoff is the first wait before a layer that failed
	// verification or a limit is fetched again; it doubles up to
	// MaxPullBackoff (the kubelet's 10 s and 5 min).
	PullBackoff    Duration `json:"pullBackoff,omitempty"`
	MaxPullBackoff Duration `json:"maxPullBackoff,omitempty"`
}

// Defaults of Limits.
const (
	DefaultAPIMaxConnections           = 1000
	DefaultAPIReadHeaderTimeout        = 32 * time.Second // kube-apiserver's
	DefaultAPIIdleTimeout              = 90 * time.Second // kube-apiserver's
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
	DefaultMaxLongRunningRequests      = 1000
	DefaultRequestTimeout              = 60 * time.Second
	DefaultStreamIdleTimeout           = 4 * time.Hour
	DefaultStreamCreationTimeout       = 30 * time.Second
	DefaultMaxObjectBytes              = 3 << 19 // 1.5 MiB

	DefaultRouterMaxConnections    = 10000
	DefaultRouterReadHeaderTimeout = 10 * time.Second
	DefaultRouterIdleTimeout       = 90 * time.Second

	DefaultEventLogSize     = 10000
	DefaultEventLogBytes    = 4 << 20 // store.DefaultEventLogBytes says why
	DefaultCacheBytes       = 1 << 20
	DefaultWatchBufferBytes = 16 << 20

	DefaultMinFreeBytes = 256 << 20
	DefaultReserveBytes = 64 << 20

	DefaultMaxLayerBytes    = 4 << 30
	DefaultMaxImageBytes    = 8 << 30
	DefaultMaxLayerFiles    = 250000
	DefaultMaxImageFiles    = 500000
	DefaultMaxLayers        = 127 // as Docker's overlay2
	DefaultMaxConfigBytes   = 8 << 20
	DefaultMaxManifestBytes = 4 << 20 // as the distribution registry's
	DefaultPullBackoff      = 10 * time.Second
	DefaultMaxPullBackoff   = 5 * time.Minute

	DefaultEventTTL                 = time.Hour // kube-apiserver's --event-ttl
	DefaultMaxEventsPerNamespace    = 1000
	DefaultEphemeralStorageInterval = 10 * time.Second // the kubelet's
	DefaultEphemeralStorageMaxFiles = 500000
	DefaultEphemeralStorageMaxDepth = 256
	// MaxEphemeralStorageMaxDepth: a measure holds a directory open per
	// level.
	MaxEphemeralStorageMaxDepth = 4096

	DefaultDNSMaxForwarding = 256
	// DefaultInstanceAPIMaxConnections: a client-go client holds one or
	// two; informers and watches a few more.
	DefaultInstanceAPIMaxConnections = 32
	// DefaultPreparedSandboxes and DefaultPreparedSandboxMemory: a
	// prepared runc sandbox holds about 10-35 MiB (PSS of its shim and
	// waiting init; runsc more), so the memory bound usually binds first.
	DefaultPreparedSandboxes     = 16
	DefaultPreparedSandboxMemory = 256 << 20
	// DefaultIdleShims: a burst of ten cold starts, one of them from a
	// prepared sandbox, takes nine. DefaultIdleShimsKeepFor: a knbox that
	// made no instance for as long holds none.
	DefaultIdleShims         = 9
	DefaultIdleShimsKeepFor  = 10 * time.Minute
	DefaultDNSForwardTimeout = 2 * time.Second

	// DefaultGCPercent: half Go's 100. BenchmarkIdleServer (knbox serve,
	// 500 Services made and scaled to zero): anonymous memory 115 ->
	// 89 MiB at 500 Services and 65 -> 50 MiB at 100, for 75 -> 81 s of
	// CPU over the whole run (+8%, the collector's share of making the
	// Services; at rest it costs nothing, and the request path hardly
	// allocates).
	DefaultGCPercent = 50

	// DefaultRestAfter, DefaultRestGCPercent, DefaultRestQuietBytes: a
	// knbox serve with every Service at zero allocates 100-300 KiB/s
	// over ten seconds (a Prometheus scrape every second included),
	// making or updating Services several MiB/s. At rest the collector then runs about once per
	// tenth of the live data allocated: at 500 Services (~60 MiB live)
	// once a minute or so. BenchmarkIdleServer prints what it saves.
	DefaultRestAfter      = 30 * time.Second
	DefaultRestGCPercent  = 10
	DefaultRestQuietBytes = 1 << 20
)

func (l *Limits) applyDefaults() {
	a := &l.API
	defInt(&a.MaxConnections, DefaultAPIMaxConnections)
	defDuration(&a.ReadHeaderTimeout, DefaultAPIReadHeaderTimeout)
	defDuration(&a.IdleTimeout, DefaultAPIIdleTimeout)
	defInt(&a.MaxRequestsInFlight, DefaultMaxRequestsInFlight)
	defInt(&a.MaxMutatingRequestsInFlight, DefaultMaxMutatingRequestsInFlight)
	defInt(&a.MaxLongRunningRequests, DefaultMaxLongRunningRequests)
	defDuration(&a.RequestTimeout, DefaultRequestTimeout)
	defDuration(&a.StreamIdleTimeout, DefaultStreamIdleTimeout)
	defDuration(&a.StreamCreationTimeout, DefaultStreamCreationTimeout)
	defBytes(&a.MaxObjectBytes, DefaultMaxObjectBytes)
	r := &l.Router
	defInt(&r.MaxConnections, DefaultRouterMaxConnections)
	defDuration(&r.ReadHeaderTimeout, DefaultRouterReadHeaderTimeout)
	defDuration(&r.IdleTimeout, DefaultRouterIdleTimeout)
	defInt(&l.Memory.GCPercent, DefaultGCPercent)
	defDuration(&l.Memory.Rest.After, DefaultRestAfter)
	defInt(&l.Memory.Rest.GCPercent, DefaultRestGCPercent)
	defBytes(&l.Memory.Rest.QuietBytesPerSecond, DefaultRestQuietBytes)
	s := &l.Store
	defInt(&s.EventLogSize, DefaultEventLogSize)
	defBytes(&s.EventLogBytes, DefaultEventLogBytes)
	defBytes(&s.CacheBytes, DefaultCacheBytes)
	defBytes(&s.WatchBufferBytes, DefaultWatchBufferBytes)
	defBytes(&l.Disk.MinFreeBytes, DefaultMinFreeBytes)
	defBytes(&l.Disk.ReserveBytes, DefaultReserveBytes)
	i := &l.Images
	defBytes(&i.MaxLayerBytes, DefaultMaxLayerBytes)
	defBytes(&i.MaxImageBytes, DefaultMaxImageBytes)
	defInt(&i.MaxLayerFiles, DefaultMaxLayerFiles)
	defInt(&i.MaxImageFiles, DefaultMaxImageFiles)
	defInt(&i.MaxLayers, DefaultMaxLayers)
	defBytes(&i.MaxConfigBytes, DefaultMaxConfigBytes)
	defBytes(&i.MaxManifestBytes, DefaultMaxManifestBytes)
	defDuration(&i.PullBackoff, DefaultPullBackoff)
	defDuration(&i.MaxPullBackoff, DefaultMaxPullBackoff)
	defDuration(&l.Events.TTL, DefaultEventTTL)
	defInt(&l.Events.MaxPerNamespace, DefaultMaxEventsPerNamespace)
	defInt(&l.InstanceDNS.MaxForwarding, DefaultDNSMaxForwarding)
	defInt(&l.InstanceAPI.MaxConnections, DefaultInstanceAPIMaxConnections)
	defInt(&l.PreparedSandboxes.Count, DefaultPreparedSandboxes)
	defBytes(&l.PreparedSandboxes.Memory, DefaultPreparedSandboxMemory)
	defInt(&l.IdleShims.Count, DefaultIdleShims)
	defDuration(&l.IdleShims.KeepFor, DefaultIdleShimsKeepFor)
	defDuration(&l.InstanceDNS.ForwardTimeout, DefaultDNSForwardTimeout)
	e := &l.EphemeralStorage
	defDuration(&e.Interval, DefaultEphemeralStorageInterval)
	defInt(&e.MaxFiles, DefaultEphemeralStorageMaxFiles)
	defInt(&e.MaxDepth, DefaultEphemeralStorageMaxDepth)
}

func defInt(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

func defBytes(v *ByteSize, d int64) {
	if *v == 0 {
		*v = ByteSize(d)
	}
}

func defDuration(v *Duration, d time.Duration) {
	if *v == 0 {
		*v = Duration(d)
	}
}

// validate checks the limits after defaults: every count and size is
// positive, every timeout but the router's read timeout too, and the
// dependent ones are consistent.
func (l *Limits) validate() error {
	var errs []error
	pos := func(field string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("limits.%s: must be positive, was %d", field, v))
		}
	}
	posDur := func(field string, d Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("limits.%s: must be positive, was %s", field, time.Duration(d)))
		}
	}
	a, r, s, d, i := l.API, l.Router, l.Store, l.Disk, l.Images
	pos("api.maxConnections", int64(a.MaxConnections))
	posDur("api.readHeaderTimeout", a.ReadHeaderTimeout)
	posDur("api.idleTimeout", a.IdleTimeout)
	pos("api.maxRequestsInFlight", int64(a.MaxRequestsInFlight))
	pos("api.maxMutatingRequestsInFlight", int64(a.MaxMutatingRequestsInFlight))
	pos("api.maxLongRunningRequests", int64(a.MaxLongRunningRequests))
	posDur("api.requestTimeout", a.RequestTimeout)
	posDur("api.streamIdleTimeout", a.StreamIdleTimeout)
	posDur("api.streamCreationTimeout", a.StreamCreationTimeout)
	pos("api.maxObjectBytes", int64(a.MaxObjectBytes))
	for _, res := range slices.Sorted(maps.Keys(a.MaxObjectBytesByResource)) {
		if res == "" || strings.ContainsAny(res, "/ ") {
			errs = append(errs, fmt.Errorf("limits.api.maxObjectBytesByResource: %q is not a resource such as configmaps or services.serving.knative.dev", res))
		}
		pos("api.maxObjectBytesByResource."+res, int64(a.MaxObjectBytesByResource[res]))
	}
	pos("router.maxConnections", int64(r.MaxConnections))
	posDur("router.readHeaderTimeout", r.ReadHeaderTimeout)
	posDur("router.idleTimeout", r.IdleTimeout)
	if r.ReadTimeout < 0 {
		errs = append(errs, fmt.Errorf("limits.router.readTimeout: must not be negative, was %s", time.Duration(r.ReadTimeout)))
	}
	pos("memory.gcPercent", int64(l.Memory.GCPercent))
	posDur("memory.rest.after", l.Memory.Rest.After)
	pos("memory.rest.gcPercent", int64(l.Memory.Rest.GCPercent))
	pos("memory.rest.quietBytesPerSecond", int64(l.Memory.Rest.QuietBytesPerSecond))
	if l.Memory.SoftLimit < 0 {
		errs = append(errs, fmt.Errorf("limits.memory.softLimit: must not be negative (0: none), was %d", l.Memory.SoftLimit))
	}
	pos("store.eventLogSize", int64(s.EventLogSize))
	pos("store.eventLogBytes", int64(s.EventLogBytes))
	pos("store.cacheBytes", int64(s.CacheBytes))
	pos("store.watchBufferBytes", int64(s.WatchBufferBytes))
	pos("disk.minFreeBytes", int64(d.MinFreeBytes))
	pos("disk.reserveBytes", int64(d.ReserveBytes))
	pos("images.maxLayerBytes", int64(i.MaxLayerBytes))
	pos("images.maxImageBytes", int64(i.MaxImageBytes))
	pos("images.maxLayerFiles", int64(i.MaxLayerFiles))
	pos("images.maxImageFiles", int64(i.MaxImageFiles))
	pos("images.maxLayers", int64(i.MaxLayers))
	pos("images.maxConfigBytes", int64(i.MaxConfigBytes))
	pos("images.maxManifestBytes", int64(i.MaxManifestBytes))
	posDur("images.pullBackoff", i.PullBackoff)
	posDur("images.maxPullBackoff", i.MaxPullBackoff)
	posDur("events.ttl", l.Events.TTL)
	pos("events.maxPerNamespace", int64(l.Events.MaxPerNamespace))
	pos("instanceDNS.maxForwarding", int64(l.InstanceDNS.MaxForwarding))
	posDur("instanceDNS.forwardTimeout", l.InstanceDNS.ForwardTimeout)
	pos("instanceAPI.maxConnections", int64(l.InstanceAPI.MaxConnections))
	pos("preparedSandboxes.count", int64(l.PreparedSandboxes.Count))
	pos("preparedSandboxes.memory", int64(l.PreparedSandboxes.Memory))
	pos("idleShims.count", int64(l.IdleShims.Count))
	posDur("idleShims.keepFor", l.IdleShims.KeepFor)
	if i.MaxPullBackoff < i.PullBackoff {
		errs = append(errs, fmt.Errorf("limits.images.maxPullBackoff: %s is shorter than pullBackoff %s", time.Duration(i.MaxPullBackoff), time.Duration(i.PullBackoff)))
	}
	e := l.EphemeralStorage
	posDur("ephemeralStorage.interval", e.Interval)
	if e.DefaultContainerLimit < 0 {
		errs = append(errs, fmt.Errorf("limits.ephemeralStorage.defaultContainerLimit: must not be negative (0: none), was %d", e.DefaultContainerLimit))
	}
	pos("ephemeralStorage.maxFiles", int64(e.MaxFiles))
	pos("ephemeralStorage.maxDepth", int64(e.MaxDepth))
	if e.MaxDepth > MaxEphemeralStorageMaxDepth {
		errs = append(errs, fmt.Errorf("limits.ephemeralStorage.maxDepth: at most %d (a measure holds a directory open per level), was %d", MaxEphemeralStorageMaxDepth, e.MaxDepth))
	}
	if i.MaxImageBytes < i.MaxLayerBytes || i.MaxImageFiles < i.MaxLayerFiles {
		errs = append(errs, errors.New("limits.images: an image's limits (maxImageBytes, maxImageFiles) must not be below a layer's"))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// ByteSize is a number of bytes, written in the file as a number (1048576)
// or as a Kubernetes quantity ("1Mi", "1.5Gi", "64M").
type ByteSize int64

// UnmarshalJSON reads a number or a quantity string.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return fmt.Errorf("%q is not a size such as 1048576, 512Mi or 2Gi", s)
		}
		n := q.Value()
		if q.Cmp(*resource.NewQuantity(n, resource.BinarySI)) != 0 {
			return fmt.Errorf("%q is not a whole number of bytes", s)
		}
		*b = ByteSize(n)
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("%s is not a size such as 1048576, 512Mi or 2Gi", data)
	}
	*b = ByteSize(n)
	return nil
}

// Duration is a time.Duration written as a string ("90s", "5m").
type Duration time.Duration

// UnmarshalJSON reads a duration string; a bare number is refused, since
// its unit would be a guess.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%s is not a duration such as 90s or 5m", data)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 90s or 5m", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
