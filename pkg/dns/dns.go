// Package dns answers the name lookups of instances. The platform's names,
// name.namespace.svc.<cluster domain> (which an instance also reaches as
// name.namespace and name through its search path), resolve to the address
// where knbox's router listens inside the instance's own network namespace;
// other names are forwarded to the host's name servers when the instance has
// outbound network, and get NXDOMAIN at once when it has not.
//
// It serves the sockets it is given (the caller makes them inside each
// instance's network namespace) and imports no other knbox package. Every
// query gets at most one answer; forwarded queries are bounded in number
// (MaxInFlight, SERVFAIL beyond it) and in time (Timeout).
package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Defaults of [Resolver].
const (
	// DefaultDomain is Kubernetes' and Knative's cluster domain.
	DefaultDomain = "cluster.local"
	// DefaultTimeout bounds a forwarded query, per upstream server.
	DefaultTimeout = 2 * time.Second
	// DefaultMaxInFlight bounds the forwarded queries of all instances.
	DefaultMaxInFlight = 256
	// TTL of the platform's answers: short, as names come and go.
	TTL = 5
)

// maxMessage bounds a query read and an upstream answer relayed: classic
// DNS over UDP is 512 bytes, EDNS answers rarely exceed 4 KiB; longer
// upstream answers are cut by the read and dropped (the client retries
// over TCP is not offered: the platform's answers are small).
const maxMessage = 4096

// Resolver answers queries. Zero values of its fields are the documented
// defaults; Router is required. It is safe for concurrent use and may
// serve any number of sockets.
type Resolver struct {
	// Domain is the cluster domain ("": DefaultDomain). Names under it
	// are answered here, never forwarded.
	Domain string
	// Router is the IPv4 address platform names resolve to.
	Router netip.Addr
	// Exists reports whether host, a name.namespace.svc.<Domain> name in
	// lower case without the final dot, is served; nil: every name of
	// that form is.
	Exists func(host string) bool
	// Upstream are the name servers ("ip:port") other names are forwarded
	// to, tried in order; empty: other names get NXDOMAIN.
	Upstream []string
	// Timeout bounds each forwarded query per upstream server (0:
	// DefaultTimeout).
	Timeout time.Duration
	// MaxInFlight bounds the forwarded queries in flight (0:
	// DefaultMaxInFlight).
	MaxInFlight int

	once sync.Once
	sem  chan struct{}
}

func (r *Resolver) init() {
	r.once.Do(func() {
		n := r.MaxInFlight
		if n <= 0 {
			n = DefaultMaxInFlight
		}
		r.sem = make(chan struct{}, n)
	})
}

func (r *Resolver) domain() string {
	if r.Domain != "" {
		return strings.ToLower(strings.TrimSuffix(r.Domain, "."))
	}
	return DefaultDomain
}

// Serve answers the queries that arrive on pc until it is closed or ctx
// ends; it then returns nil (other read errors end it with the error).
// Forwarded queries still in flight answer on pc if it is still open.
func (r *Resolver) Serve(ctx context.Context, pc net.PacketConn) error {
	r.init()
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	buf := make([]byte, maxMessage)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		resp, forward := r.Answer(buf[:n])
		if forward {
			select {
			case r.sem <- struct{}{}:
				q := append([]byte(nil), buf[:n]...)
				go func() {
					defer func() { <-r.sem }()
					if a := r.forward(ctx, q); a != nil {
						_, _ = pc.WriteTo(a, addr)
					} else if f := fail(q, dnsmessage.RCodeServerFailure); f != nil {
						_, _ = pc.WriteTo(f, addr)
					}
				}()
			default:
				resp = fail(buf[:n], dnsmessage.RCodeServerFailure)
			}
		}
		if resp != nil {
			_, _ = pc.WriteTo(resp, addr)
		}
	}
}

// Answer returns the answer to the query q, or forward when q is for a name
// outside the cluster domain and there are upstream servers; nil and false
// when q is not a query to answer at all (no valid header, or a response).
func (r *Resolver) Answer(q []byte) (resp []byte, forward bool) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil, false
	}
	if h.OpCode != 0 {
		return reply(h, nil, dnsmessage.RCodeNotImplemented, false), false
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, nil, dnsmessage.RCodeFormatError, false), false
	}
	question := qs[0]
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	d := r.domain()
	if name != d && !strings.HasSuffix(name, "."+d) {
		if len(r.Upstream) > 0 {
			return nil, true
		}
		return reply(h, &question, dnsmessage.RCodeNameError, false), false
	}
	if question.Class != dnsmessage.ClassINET && question.Class != dnsmessage.ClassANY || !r.platformName(name, d) {
		return reply(h, &question, dnsmessage.RCodeNameError, true), false
	}
	if question.Type != dnsmessage.TypeA && question.Type != dnsmessage.TypeALL {
		// The name exists, with no record of this type (NODATA): a
		// resolver asking for AAAA and A uses the A answer.
		return reply(h, &question, dnsmessage.RCodeSuccess, true), false
	}
	b := dnsmessage.NewBuilder(nil, header(h, dnsmessage.RCodeSuccess, true))
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(question)
	_ = b.StartAnswers()
	_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: TTL},
		dnsmessage.AResource{A: r.Router.As4()})
	out, err := b.Finish()
	if err != nil {
		return reply(h, nil, dnsmessage.RCodeServerFailure, false), false
	}
	return out, false
}

// platformName reports whether name (under domain d) is a served
// name.namespace.svc.<d>.
func (r *Resolver) platformName(name, d string) bool {
	rest, ok := strings.CutSuffix(name, ".svc."+d)
	if !ok {
		return false
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || !isLabel(svc) || !isLabel(ns) {
		return false
	}
	return r.Exists == nil || r.Exists(name)
}

// isLabel reports whether s is a DNS-1123 label.
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// header is the header of an answer to h.
func header(h dnsmessage.Header, rcode dnsmessage.RCode, authoritative bool) dnsmessage.Header {
	return dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: authoritative,
		RecursionDesired: h.RecursionDesired, RCode: rcode}
}

// reply is an answer to h without records, echoing the question if given.
func reply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, authoritative bool) []byte {
	b := dnsmessage.NewBuilder(nil, header(h, rcode, authoritative))
	if q != nil {
		_ = b.StartQuestions()
		if err := b.Question(*q); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// fail answers q with rcode (nil if q has no valid header).
func fail(q []byte, rcode dnsmessage.RCode) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	if qs, err := p.AllQuestions(); err == nil && len(qs) == 1 {
		return reply(h, &qs[0], rcode, false)
	}
	return reply(h, nil, rcode, false)
}

// forward sends q to the upstream servers in turn and returns the first
// answer with q's ID; nil if none answered in time.
func (r *Resolver) forward(ctx context.Context, q []byte) []byte {
	if len(q) < 2 {
		return nil
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	buf := make([]byte, maxMessage)
	for _, up := range r.Upstream {
		if a := exchange(ctx, up, q, buf, timeout); a != nil {
			return a
		}
	}
	return nil
}

// exchange sends q to server over UDP and waits for the answer with its ID.
func exchange(ctx context.Context, server string, q, buf []byte, timeout time.Duration) []byte {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(q); err != nil {
		return nil
	}
	for i := 0; i < 8; i++ { // stray datagrams, bounded
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		if n >= 12 && buf[0] == q[0] && buf[1] == q[1] && buf[2]&0x80 != 0 {
			return append([]byte(nil), buf[:n]...)
		}
	}
	return nil
}
