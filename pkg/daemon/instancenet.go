package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/knbox/knbox/pkg/serviceaccount"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/knbox/knbox/pkg/dns"
	"github.com/knbox/knbox/pkg/listen"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/router"
)

// Inside every instance's network namespace knbox serves, on instanceAddr
// (a loopback address of the namespace, so nothing outside reaches it),
// a name server on port 53 and the router on port 80: the instance's
// /etc/resolv.conf names that server with a pod's search path, platform
// names resolve to that address, and a call to
// http://name.namespace.svc.cluster.local (or name.namespace, or name)
// goes through the router like any request. Instances still reach neither
// each other nor the host's other ports.
//
// knbox's API is served there too, on port 443, as a pod reaches
// kube-apiserver: kubernetes.default.svc.<cluster domain> (and its short
// forms) resolves to instanceAddr, KUBERNETES_SERVICE_HOST and _PORT name
// it (replicas.Options.API), and the serving certificate holds those names
// and the address, so that client-go's rest.InClusterConfig works with the
// ServiceAccount token mounted at
// /var/run/secrets/kubernetes.io/serviceaccount. The API authenticates and
// authorizes those requests as any other: nothing is trusted for coming
// from inside.
//
// An instance whose containers declare port 80 (or 53, or 443) keeps that
// port: the router (or the name server, or the API) is not served there,
// and platform names (or the API) do not work from it.
var instanceAddr = netip.MustParseAddr("127.0.0.2")

// Ports of the instance-side services.
const (
	instanceDNSPort    = 53
	instanceRouterPort = 80
	instanceAPIPort    = 443
)

// instanceNet serves instances' names and calls inside their namespaces
// (pod.Options.Network). Listeners made before the router exists (pods
// adopted at start) wait, their connections in the backlog, until start.
type instanceNet struct {
	resolver *dns.Resolver
	log      *slog.Logger
	domain   string
	// tokens issues the metadata service's identity tokens (nil: none).
	tokens serviceaccount.TokenIssuer
	// newServer makes the router's Server for one namespace's instances.
	newServer func(namespace string) *router.Server
	// api serves knbox's API (HTTPS) on each instance's API listener, each
	// limited by apiLimits; nil: no API inside instances.
	api       *http.Server
	apiLimits listen.Limits

	mu      sync.Mutex
	rt      *router.Router
	servers map[string]*router.Server // by namespace
	pending []pendingListener
	closed  bool
}

type pendingListener struct {
	namespace string
	ln        net.Listener
}

// newInstanceNet returns the instances' network services; upstream are the
// name servers other names are forwarded to (nil: NXDOMAIN).
func newInstanceNet(clusterDomain string, upstream []string, log *slog.Logger) *instanceNet {
	if clusterDomain == "" {
		clusterDomain = dns.DefaultDomain
	}
	n := &instanceNet{log: log, domain: clusterDomain, servers: map[string]*router.Server{}}
	n.resolver = &dns.Resolver{Domain: clusterDomain, Router: instanceAddr, Upstream: upstream, Exists: n.exists}
	return n
}

// exists says whether a platform name is a Route's (every well-formed
// name until the router runs).
func (n *instanceNet) exists(host string) bool {
	if n.api != nil && host == "kubernetes.default.svc."+n.domain {
		return true
	}
	n.mu.Lock()
	rt := n.rt
	n.mu.Unlock()
	return rt == nil || rt.ServesLocal(host)
}

// start serves the listeners made so far, and those made later, with rt.
func (n *instanceNet) start(rt *router.Router, newServer func(namespace string) *router.Server) {
	n.mu.Lock()
	n.rt, n.newServer = rt, newServer
	pending := n.pending
	n.pending = nil
	n.mu.Unlock()
	for _, p := range pending {
		n.serve(p.namespace, p.ln)
	}
}

// serve serves ln with the namespace's Server, or keeps it for start.
func (n *instanceNet) serve(namespace string, ln net.Listener) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		ln.Close()
		return
	}
	if n.rt == nil {
		n.pending = append(n.pending, pendingListener{namespace, ln})
		n.mu.Unlock()
		return
	}
	s := n.servers[namespace]
	if s == nil {
		s = n.newServer(namespace)
		n.servers[namespace] = s
	}
	n.mu.Unlock()
	go func() {
		if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			n.log.Debug("an instance's router listener ended", "namespace", namespace, "err", err)
		}
	}()
}

// attach is pod.Options.Network.
func (n *instanceNet) attach(ctx context.Context, spec *pod.Spec, ns *network.NS) (string, io.Closer, error) {
	namespace := spec.Labels[replicas.LabelNamespace]
	if namespace == "" {
		return "", nil, nil // not an instance of a Revision
	}
	dnsPort, routerPort, metadataPort, apiPort := true, true, true, n.api != nil
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			dnsPort = dnsPort && p.ContainerPort != instanceDNSPort
			routerPort = routerPort && p.ContainerPort != instanceRouterPort
			metadataPort = metadataPort && p.ContainerPort != instanceMetadataPort
			apiPort = apiPort && p.ContainerPort != instanceAPIPort
		}
	}
	routerPort = routerPort && spec.Port != instanceRouterPort
	dnsPort = dnsPort && spec.Port != instanceDNSPort
	metadataPort = metadataPort && spec.Port != instanceMetadataPort
	apiPort = apiPort && spec.Port != instanceAPIPort
	att := &attachment{}
	if apiPort {
		// Shared, as the router's: a successor binds beside it.
		ln, err := ns.ListenShared("tcp4", netip.AddrPortFrom(instanceAddr, instanceAPIPort).String())
		if err != nil {
			return "", nil, fmt.Errorf("the API's listener: %w", err)
		}
		att.api = ln
		go func() {
			if err := n.api.ServeTLS(n.apiLimits.Listener(ln), "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				n.log.Debug("an instance's API listener ended", "namespace", namespace, "err", err)
			}
		}()
	}
	if metadataPort {
		ln, err := ns.ListenShared("tcp4", netip.AddrPortFrom(instanceAddr, instanceMetadataPort).String())
		if err != nil {
			att.Close()
			return "", nil, fmt.Errorf("the metadata service's listener: %w", err)
		}
		att.meta = serveMetadata(ln, spec, n.tokens)
	}
	if routerPort {
		// Shared (SO_REUSEPORT): a successor knbox adopting the instance
		// binds beside this one while it exits.
		ln, err := ns.ListenShared("tcp4", netip.AddrPortFrom(instanceAddr, instanceRouterPort).String())
		if err != nil {
			att.Close()
			return "", nil, fmt.Errorf("the router's listener: %w", err)
		}
		att.ln = ln
		n.serve(namespace, ln)
	}
	if !dnsPort {
		return "", att, nil
	}
	pc, err := ns.ListenPacket("udp4", netip.AddrPortFrom(instanceAddr, instanceDNSPort).String())
	if err != nil {
		att.Close()
		return "", nil, fmt.Errorf("the name server: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	att.cancel = cancel
	att.done = make(chan struct{})
	go func() {
		defer close(att.done)
		if err := n.resolver.Serve(sctx, pc); err != nil {
			n.log.Debug("an instance's name server ended", "namespace", namespace, "err", err)
		}
	}()
	return n.resolvConf(namespace), att, nil
}

// resolvConf is an instance's /etc/resolv.conf: knbox's name server and a
// pod's search path and ndots, as the kubelet writes them.
func (n *instanceNet) resolvConf(namespace string) string {
	d := n.domain
	return "# knbox: platform names (name.namespace.svc." + d + ") resolve to the router\n" +
		"nameserver " + instanceAddr.String() + "\n" +
		"search " + namespace + ".svc." + d + " svc." + d + " " + d + "\n" +
		"options ndots:5\n"
}

// Close closes every instance-side listener and Server.
func (n *instanceNet) Close() {
	n.mu.Lock()
	n.closed = true
	servers := n.servers
	n.servers = map[string]*router.Server{}
	pending := n.pending
	n.pending = nil
	n.mu.Unlock()
	for _, s := range servers {
		_ = s.Close()
	}
	for _, p := range pending {
		p.ln.Close()
	}
	if n.api != nil {
		_ = n.api.Close()
	}
}

// attachment is what attach serves for one pod.
type attachment struct {
	ln     net.Listener
	api    net.Listener
	meta   *http.Server // the metadata service
	cancel context.CancelFunc
	done   chan struct{}
}

func (a *attachment) Close() error {
	if a.ln != nil {
		a.ln.Close()
	}
	if a.api != nil {
		a.api.Close()
	}
	if a.meta != nil {
		a.meta.Close()
	}
	if a.cancel != nil {
		a.cancel()
		<-a.done
	}
	return nil
}

// hostNameservers are the name servers of the host's /etc/resolv.conf,
// loopback ones included (knbox asks them from the host's namespace), as
// "ip:53".
func hostNameservers() []string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(ip, 53).String())
			}
		}
	}
	return out
}
