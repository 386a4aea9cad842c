package pod

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
)

// Probe timing.
const (
	// Until an instance is first ready, readiness is probed at once, then
	// after firstProbeInterval, doubling up to startProbeInterval: a server
	// that listens a few milliseconds after its start is seen ready within
	// about a millisecond of it, and one that takes long is probed every
	// 25ms, so the probe does not lengthen cold starts.
	firstProbeInterval = time.Millisecond
	startProbeInterval = 25 * time.Millisecond
	// defaultReadyPeriod is the readiness period once ready when the probe
	// sets none (Knative's periodSeconds 0 means "aggressive" probing, which
	// once ready becomes a check every second).
	defaultReadyPeriod = time.Second
	// probeUserAgent is what HTTP probes send, as the kubelet does.
	probeUserAgent = "kube-probe/1.29"
	// maxProbeBody bounds what is read of an HTTP probe's response.
	maxProbeBody = 10 << 10
)

// dialFunc connects to an address in the instance's network namespace.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// prober runs one probe (readiness or liveness) against an instance.
type prober struct {
	probe *corev1.Probe
	port  int32
	h2c   bool
	dial  dialFunc
	// exec runs an exec probe's command in the serving container and
	// returns its exit code and (the start of) its output.
	exec func(ctx context.Context, cmd []string) (int, string, error)

	rt http.RoundTripper // made on first use; keeps no connection between probes
}

// transport returns the prober's HTTP transport: HTTP/2 with prior
// knowledge for an h2c port, else HTTP/1.1 (TLS unverified for https, as
// the kubelet's probes).
func (p *prober) transport(scheme string) http.RoundTripper {
	if p.rt != nil {
		return p.rt
	}
	if p.h2c && scheme == "http" {
		p.rt = &http2.Transport{
			AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return p.dial(ctx, network, addr)
			},
		}
	} else {
		p.rt = &http.Transport{
			DialContext:       p.dial,
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // as the kubelet: a probe does not verify
		}
	}
	return p.rt
}

// CheckProbe refuses probes the runtime contract does not allow: only
// httpGet and tcpSocket run (exec and grpc are refused).
func CheckProbe(what string, p *corev1.Probe) error { return checkProbe(what, p, false) }

// CheckProbeExec is CheckProbe for an operator who allows exec probes
// (run with the handler's exec in the serving container).
func CheckProbeExec(what string, p *corev1.Probe) error { return checkProbe(what, p, true) }

func checkProbe(what string, p *corev1.Probe, execOK bool) error {
	if p == nil {
		return nil
	}
	switch {
	case p.Exec != nil && execOK:
		if len(p.Exec.Command) == 0 {
			return fmt.Errorf("%s: exec.command: Required value", what)
		}
	case p.Exec != nil:
		return fmt.Errorf("%s: exec probes are not supported: use httpGet or tcpSocket", what)
	case p.GRPC != nil:
		return fmt.Errorf("%s: grpc probes are not supported: use httpGet or tcpSocket", what)
	}
	return nil
}

func (p *prober) timeout() time.Duration {
	if p.probe != nil && p.probe.TimeoutSeconds > 0 {
		return time.Duration(p.probe.TimeoutSeconds) * time.Second
	}
	return time.Second
}

// period is the interval between probes once the first one succeeded.
func (p *prober) period(def time.Duration) time.Duration {
	if p.probe != nil && p.probe.PeriodSeconds > 0 {
		return time.Duration(p.probe.PeriodSeconds) * time.Second
	}
	return def
}

func (p *prober) initialDelay() time.Duration {
	if p.probe != nil && p.probe.InitialDelaySeconds > 0 {
		return time.Duration(p.probe.InitialDelaySeconds) * time.Second
	}
	return 0
}

func (p *prober) failureThreshold() int {
	if p.probe != nil && p.probe.FailureThreshold > 0 {
		return int(p.probe.FailureThreshold)
	}
	return 3
}

func (p *prober) successThreshold() int {
	if p.probe != nil && p.probe.SuccessThreshold > 0 {
		return int(p.probe.SuccessThreshold)
	}
	return 1
}

// check runs the probe once.
func (p *prober) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	if p.probe != nil && p.probe.HTTPGet != nil {
		return p.checkHTTP(ctx, p.probe.HTTPGet)
	}
	if p.probe != nil && p.probe.Exec != nil {
		if p.exec == nil {
			return fmt.Errorf("exec probes are not supported")
		}
		code, out, err := p.exec(ctx, p.probe.Exec.Command)
		switch {
		case err != nil:
			return fmt.Errorf("exec probe: %w", err)
		case code != 0:
			return fmt.Errorf("exec probe: command %q exited with %d: %s", p.probe.Exec.Command, code, out)
		}
		return nil
	}
	port := p.port
	if p.probe != nil && p.probe.TCPSocket != nil && p.probe.TCPSocket.Port.IntValue() > 0 {
		port = int32(p.probe.TCPSocket.Port.IntValue())
	}
	c, err := p.dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("tcp probe of port %d: %w", port, err)
	}
	return c.Close()
}

func (p *prober) checkHTTP(ctx context.Context, g *corev1.HTTPGetAction) error {
	port := p.port
	if g.Port.IntValue() > 0 {
		port = int32(g.Port.IntValue())
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	target := g.Path
	if !strings.HasPrefix(target, "/") {
		target = "/" + target
	}
	url := scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))) + target
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("http probe %s: %w", url, err)
	}
	req.Header.Set("User-Agent", probeUserAgent)
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	rt := p.transport(scheme)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("http probe %s: %w", url, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	resp.Body.Close()
	if t, ok := rt.(*http2.Transport); ok {
		t.CloseIdleConnections()
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http probe %s: status %d", url, resp.StatusCode)
	}
	return nil
}
