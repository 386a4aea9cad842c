package config

import (
	"strings"
	"testing"
	"time"
)

func TestLimitsFromFile(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
limits:
  api:
    maxConnections: 50
    maxRequestsInFlight: 10
    requestTimeout: 30s
    maxObjectBytes: 1Mi
    maxObjectBytesByResource:
      configmaps: 512Ki
      services.serving.knative.dev: 65536
  router:
    readTimeout: 5m
    idleTimeout: 1m
  store:
    eventLogBytes: 128Mi
  disk:
    minFreeBytes: 1.5Gi
    reserveBytes: 32M
  images:
    maxLayerBytes: 1Gi
    maxImageFiles: 1000000
    pullBackoff: 1s
  ephemeralStorage:
    interval: 2s
    defaultContainerLimit: 1Gi
`)
	l := c.Limits
	if l.API.MaxConnections != 50 || l.API.MaxRequestsInFlight != 10 || l.API.MaxMutatingRequestsInFlight != DefaultMaxMutatingRequestsInFlight ||
		l.API.RequestTimeout.D() != 30*time.Second || l.API.MaxObjectBytes != 1<<20 ||
		l.API.MaxObjectBytesByResource["configmaps"] != 512<<10 || l.API.MaxObjectBytesByResource["services.serving.knative.dev"] != 65536 {
		t.Errorf("api: %+v", l.API)
	}
	if l.Router.ReadTimeout.D() != 5*time.Minute || l.Router.IdleTimeout.D() != time.Minute || l.Router.MaxConnections != DefaultRouterMaxConnections {
		t.Errorf("router: %+v", l.Router)
	}
	if l.Store.EventLogBytes != 128<<20 || l.Store.EventLogSize != DefaultEventLogSize {
		t.Errorf("store: %+v", l.Store)
	}
	if l.Disk.MinFreeBytes != 3<<29 || l.Disk.ReserveBytes != 32_000_000 {
		t.Errorf("disk: %+v", l.Disk)
	}
	if l.Images.MaxLayerBytes != 1<<30 || l.Images.MaxImageFiles != 1000000 || l.Images.PullBackoff.D() != time.Second ||
		l.Images.MaxPullBackoff.D() != DefaultMaxPullBackoff {
		t.Errorf("images: %+v", l.Images)
	}
	if e := l.EphemeralStorage; e.Interval.D() != 2*time.Second || e.DefaultContainerLimit != 1<<30 ||
		e.MaxFiles != DefaultEphemeralStorageMaxFiles || e.MaxDepth != DefaultEphemeralStorageMaxDepth {
		t.Errorf("ephemeralStorage: %+v", e)
	}
	if d := Default().Limits.EphemeralStorage; d.DefaultContainerLimit != 0 || d.Interval.D() != DefaultEphemeralStorageInterval {
		t.Errorf("default ephemeralStorage: %+v, want no default container limit, interval 10s", d)
	}
}

func TestLimitsErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ content, want string }{
		{"limits:\n  api:\n    maxConnections: -1\n", "limits.api.maxConnections"},
		{"limits:\n  instanceDNS:\n    maxForwarding: -1\n", "limits.instanceDNS.maxForwarding"},
		{"limits:\n  instanceDNS:\n    forwardTimeout: -1s\n", "limits.instanceDNS.forwardTimeout"},
		{"limits:\n  api:\n    requestTimeout: 10\n", "duration"},
		{"limits:\n  api:\n    requestTimeout: soon\n", `"soon"`},
		{"limits:\n  api:\n    maxObjectBytes: lots\n", `"lots"`},
		{"limits:\n  api:\n    maxObjectBytes: 1.5\n", "size"},
		{"limits:\n  api:\n    maxObjectBytes: 100m\n", "whole number"},
		{"limits:\n  api:\n    maxObjectBytesByResource:\n      serving.knative.dev/services: 1Ki\n", "maxObjectBytesByResource"},
		{"limits:\n  api:\n    maxObjectBytesByResource:\n      configmaps: -1\n", "maxObjectBytesByResource.configmaps"},
		{"limits:\n  api:\n    readTimeout: 1s\n", `unknown field "readTimeout"`},
		{"limits:\n  router:\n    readTimeout: -1s\n", "limits.router.readTimeout"},
		{"limits:\n  store:\n    eventLogBytes: -5\n", "limits.store.eventLogBytes"},
		{"limits:\n  memory:\n    gcPercent: -5\n", "limits.memory.gcPercent"},
		{"limits:\n  memory:\n    softLimit: -1\n", "limits.memory.softLimit"},
		{"limits:\n  disk:\n    minFreeBytes: -1Gi\n", "limits.disk.minFreeBytes"},
		{"limits:\n  images:\n    maxLayerBytes: 16Gi\n", "limits.images"},
		{"limits:\n  images:\n    pullBackoff: 10m\n", "limits.images.maxPullBackoff"},
		{"limits:\n  events:\n    ttl: -1h\n", "limits.events.ttl"},
		{"limits:\n  events:\n    maxPerNamespace: -3\n", "limits.events.maxPerNamespace"},
		{"limits:\n  imges: {}\n", `unknown field "imges"`},
		{"limits:\n  ephemeralStorage:\n    interval: -1s\n", "limits.ephemeralStorage.interval"},
		{"limits:\n  ephemeralStorage:\n    defaultContainerLimit: -1Mi\n", "limits.ephemeralStorage.defaultContainerLimit"},
		{"limits:\n  ephemeralStorage:\n    maxFiles: -3\n", "limits.ephemeralStorage.maxFiles"},
		{"limits:\n  ephemeralStorage:\n    maxDepth: 100000\n", "limits.ephemeralStorage.maxDepth"},
	} {
		_, err := parse([]byte(tt.content))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error with %q", tt.content, err, tt.want)
		}
	}
}
