// Temporary: pins the dependencies that parts under construction import, so
// helpers working in parallel do not race on go.mod. Removed once they land.

package main

import (
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/google/go-containerregistry/pkg/v1/tarball"
	_ "github.com/google/go-containerregistry/pkg/v1/layout"
	_ "github.com/google/go-containerregistry/pkg/authn"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/vishvananda/netns"
	_ "github.com/vishvananda/netlink"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/net/http2/h2c"
	_ "k8s.io/utils/clock/testing"
	_ "knative.dev/serving/pkg/autoscaler/config"
	_ "golang.org/x/sys/unix"
)

func main() {}
