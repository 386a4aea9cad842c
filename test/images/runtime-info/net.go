package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Interface is a network interface as the container sees it.
type Interface struct {
	Name  string   `json:"name"`
	Up    bool     `json:"up"`
	Addrs []string `json:"addrs"` // prefixes, e.g. 127.0.0.1/8
}

// DialResult is what /dial found.
type DialResult struct {
	Addr  string `json:"addr"`
	OK    bool   `json:"ok"`
	Line  string `json:"line,omitempty"`  // the first line the peer sent
	Error string `json:"error,omitempty"` // why the dial or read failed
}

// maxDialTimeout bounds /dial's ?ms=.
const maxDialTimeout = 30 * time.Second

// interfaces answers /net: the container's network interfaces.
func interfaces(w http.ResponseWriter, r *http.Request) {
	itfs, err := net.Interfaces()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := []Interface{}
	for _, itf := range itfs {
		i := Interface{Name: itf.Name, Up: itf.Flags&net.FlagUp != 0, Addrs: []string{}}
		addrs, _ := itf.Addrs()
		for _, a := range addrs {
			i.Addrs = append(i.Addrs, a.String())
		}
		out = append(out, i)
	}
	writeJSON(w, out)
}

// dial answers /dial?addr=IP:PORT[&ms=N]: it connects over TCP (an IP
// literal only, so no name server is asked), reads one line and reports.
// The dial fails after ms milliseconds (default 5000).
func dial(w http.ResponseWriter, r *http.Request) {
	ap, err := netip.ParseAddrPort(r.URL.Query().Get("addr"))
	if err != nil {
		http.Error(w, "addr: want IP:PORT: "+err.Error(), http.StatusBadRequest)
		return
	}
	ms, ok := intParam(w, r, "ms", 5000)
	if !ok {
		return
	}
	timeout := min(time.Duration(ms)*time.Millisecond, maxDialTimeout)
	res := DialResult{Addr: ap.String()}
	c, err := net.DialTimeout("tcp", ap.String(), timeout)
	if err != nil {
		res.Error = err.Error()
		writeJSON(w, res)
		return
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		res.Error = "read: " + err.Error()
	} else {
		res.OK, res.Line = true, line[:len(line)-1]
	}
	writeJSON(w, res)
}

// FetchResult is what /fetch got.
type FetchResult struct {
	URL    string `json:"url"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"` // at most 4 KiB
	Error  string `json:"error,omitempty"`
	Micros int64  `json:"micros"` // the request's duration
}

// fetch GETs url (with the resolver of /etc/resolv.conf) and says what came
// back: how instances call each other.
func fetch(w http.ResponseWriter, r *http.Request) {
	u := r.URL.Query().Get("url")
	if u == "" {
		http.Error(w, "url: required", http.StatusBadRequest)
		return
	}
	ms, ok := intParam(w, r, "ms", 30000)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(time.Duration(ms)*time.Millisecond, 60*time.Second))
	defer cancel()
	res := FetchResult{URL: u}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		http.Error(w, "url: "+err.Error(), http.StatusBadRequest)
		return
	}
	// h: one request header, "Name: value".
	if h := r.URL.Query().Get("h"); h != "" {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			http.Error(w, "h: want Name: value", http.StatusBadRequest)
			return
		}
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	start := time.Now()
	resp, err := fetchClient.Do(req)
	if err == nil {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		res.Status, res.Body = resp.StatusCode, string(b)
		err = rerr
	}
	res.Micros = time.Since(start).Microseconds()
	if err != nil {
		res.Error = err.Error()
	}
	writeJSON(w, res)
}

// fetchClient keeps connections, as a service calling another would.
var fetchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

// ResolveResult is what /resolve found.
type ResolveResult struct {
	Name     string   `json:"name"`
	Addrs    []string `json:"addrs,omitempty"`
	NotFound bool     `json:"notFound,omitempty"`
	Error    string   `json:"error,omitempty"`
	Micros   int64    `json:"micros"`
}

// resolve looks name up with /etc/resolv.conf (search path included).
func resolve(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res := ResolveResult{Name: name}
	start := time.Now()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	res.Micros = time.Since(start).Microseconds()
	res.Addrs = addrs
	if err != nil {
		res.Error = err.Error()
		var de *net.DNSError
		res.NotFound = errors.As(err, &de) && de.IsNotFound
	}
	writeJSON(w, res)
}

// The ServiceAccount volume's directory, as on a cluster.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeAPI GETs path from the platform's API as client-go's
// rest.InClusterConfig does: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (or ?host=NAME, e.g. kubernetes.default.svc, on that port), trusting only
// the mounted ca.crt, with the mounted token as bearer token (read at each
// request, as client-go rereads it). Answers a JSON FetchResult.
func kubeAPI(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if !strings.HasPrefix(p, "/") {
		http.Error(w, "path: required, starting with /", http.StatusBadRequest)
		return
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if h := r.URL.Query().Get("host"); h != "" {
		host = h
	}
	res := FetchResult{URL: "https://" + net.JoinHostPort(host, port) + p}
	done := func(err error) {
		if err != nil {
			res.Error = err.Error()
		}
		writeJSON(w, res)
	}
	if host == "" || port == "" {
		done(errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"))
		return
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		done(err)
		return
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		done(err)
		return
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		done(errors.New("ca.crt holds no certificate"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, res.URL, nil)
	if err != nil {
		done(err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer c.CloseIdleConnections()
	start := time.Now()
	resp, err := c.Do(req)
	if err == nil {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		res.Status, res.Body = resp.StatusCode, string(b)
		err = rerr
	}
	res.Micros = time.Since(start).Microseconds()
	done(err)
}
