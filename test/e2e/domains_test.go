package e2e

// Services calling services (issue 13): platform names inside instances
// under runc and runsc, cluster-local visibility, scale from zero woken by
// another service.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fetchResult is runtime-info's /fetch answer.
type fetchResult struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Body   string `json:"body"`
	Error  string `json:"error"`
	Micros int64  `json:"micros"`
}

// resolveResult is runtime-info's /resolve answer.
type resolveResult struct {
	Addrs    []string `json:"addrs"`
	NotFound bool     `json:"notFound"`
	Error    string   `json:"error"`
}

func (e *contractEnv) fetchFrom(t *testing.T, svc, u string) fetchResult {
	t.Helper()
	var f fetchResult
	body := e.mustGet(t, svc, "/fetch?url="+url.QueryEscape(u))
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("/fetch: %v\n%s", err, body)
	}
	return f
}

func (e *contractEnv) fetchFromH(t *testing.T, svc, u, header string) fetchResult {
	t.Helper()
	var f fetchResult
	body := e.mustGet(t, svc, "/fetch?url="+url.QueryEscape(u)+"&h="+url.QueryEscape(header))
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("/fetch: %v\n%s", err, body)
	}
	return f
}

func (e *contractEnv) resolveFrom(t *testing.T, svc, name string) resolveResult {
	t.Helper()
	var r resolveResult
	body := e.mustGet(t, svc, "/resolve?name="+url.QueryEscape(name))
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/resolve: %v\n%s", err, body)
	}
	return r
}

// TestServiceToService: callers under runc and runsc reach a callee by
// every name form (full, name.ns, name), a callee at zero (woken by the
// call) and a cluster-local one, which the external listener refuses with
// 404; other names fail at once with NXDOMAIN (egress off).
func TestServiceToService(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfg, []byte(dataPlaneConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newContractEnv(t, "--config", cfg)
	callee := contractService("callee", "runc", corev1.Container{Image: e.infoRef})
	private := contractService("private", "runc", corev1.Container{Image: e.infoRef})
	private.Labels = map[string]string{"networking.knative.dev/visibility": "cluster-local"}
	sleepy := contractService("sleepy", "runc", corev1.Container{Image: e.infoRef})
	sleepy.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/initial-scale": "0"}
	e.apply(t, callee)
	e.apply(t, private)
	e.apply(t, sleepy)
	for _, rc := range contractRuntimeClasses {
		e.apply(t, contractService("caller", rc, corev1.Container{Image: e.infoRef}))
	}
	for _, s := range []string{"callee-runc", "private-runc", "sleepy-runc", "caller-runc", "caller-runsc"} {
		e.waitReady(t, s)
	}

	// The external listener: 404 for the cluster-local Service, whose URL
	// is its cluster-local address.
	if u := e.url(t, "private-runc"); u != "http://private-runc.default.svc.cluster.local" {
		t.Errorf("cluster-local status.url %q", u)
	}
	if code, body, err := e.get(t, "private-runc", "/", 30*time.Second); err != nil || code != http.StatusNotFound {
		t.Errorf("external GET of the cluster-local Service: %d %v %s, want 404", code, err, body)
	}

	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			caller := "caller-" + rc
			for _, u := range []string{
				"http://callee-runc.default.svc.cluster.local/",
				"http://callee-runc.default.svc.cluster.local./",
				"http://callee-runc.default/",
				"http://callee-runc/",
				"http://private-runc.default.svc.cluster.local/",
				"http://private-runc/",
			} {
				f := e.fetchFrom(t, caller, u)
				if f.Status != 200 || f.Error != "" {
					t.Errorf("%s -> %s: %+v", caller, u, f)
				}
			}
			if f := e.fetchFrom(t, caller, "http://nope.default.svc.cluster.local/"); f.Status != 0 || f.Error == "" {
				t.Errorf("unknown service: %+v, want a lookup failure", f)
			}
			for _, name := range []string{"example.com", "nope.default.svc.cluster.local", "nope"} {
				if r := e.resolveFrom(t, caller, name); !r.NotFound {
					t.Errorf("resolve %s: %+v, want NXDOMAIN", name, r)
				}
			}
			if r := e.resolveFrom(t, caller, "callee-runc"); len(r.Addrs) != 1 || r.Addrs[0] != "127.0.0.2" {
				t.Errorf("resolve callee-runc: %+v", r)
			}
			// The metadata service: the caller's own identity.
			if f := e.fetchFrom(t, caller, "http://127.0.0.2:8181/v1/instance/service"); f.Status != http.StatusForbidden {
				t.Errorf("metadata without Metadata-Flavor: %+v, want 403", f)
			}
			var m struct{ Namespace, Service, Revision, Instance string }
			f := e.fetchFromH(t, caller, "http://127.0.0.2:8181/v1/instance", "Metadata-Flavor: knbox")
			if err := json.Unmarshal([]byte(f.Body), &m); f.Status != 200 || err != nil || m.Namespace != "default" ||
				m.Service != caller || !strings.HasPrefix(m.Revision, caller+"-") || !strings.HasPrefix(m.Instance, m.Revision) {
				t.Errorf("metadata: %+v %v (%+v)", f, err, m)
			}
			// An identity token of its ServiceAccount for an audience.
			f = e.fetchFromH(t, caller, "http://127.0.0.2:8181/v1/instance/service-accounts/default/identity?audience=https%3A%2F%2Fcallee.example",
				"Metadata-Flavor: Google")
			if parts := strings.Split(f.Body, "."); f.Status != 200 || len(parts) != 3 {
				t.Errorf("identity token: %+v", f)
			} else if claims, err := base64.RawURLEncoding.DecodeString(parts[1]); err != nil ||
				!strings.Contains(string(claims), `"sub":"system:serviceaccount:default:default"`) || !strings.Contains(string(claims), `"https://callee.example"`) {
				t.Errorf("identity token claims: %s %v", claims, err)
			}
			if f := e.fetchFromH(t, caller, "http://127.0.0.2:8181/v1/instance/service-accounts/default/identity", "Metadata-Flavor: knbox"); f.Status != http.StatusBadRequest {
				t.Errorf("identity token without audience: %+v, want 400", f)
			}
		})
	}

	// Names on the host: the printed URL's host resolves with the glibc
	// resolver (libnss-myhostname, which hack/install-deps.sh installs)
	// to an address where the router answers.
	t.Run("GetentHosts", func(t *testing.T) {
		requireTool(t, "getent")
		u, err := url.Parse(e.url(t, "callee-runc"))
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("getent", "ahostsv4", u.Hostname()).CombinedOutput()
		if err != nil {
			msg := fmt.Sprintf("getent ahostsv4 %s: %v %s (run hack/install-deps.sh: libnss-myhostname)", u.Hostname(), err, out)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		f := strings.Fields(string(out))
		if len(f) == 0 || f[0] != "127.0.0.1" {
			t.Fatalf("getent ahostsv4 %s: %q, want 127.0.0.1", u.Hostname(), out)
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(f[0], port)+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = u.Host
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET the resolved %s: %v", req.URL, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET the resolved %s (Host %s): %d", req.URL, u.Host, resp.StatusCode)
		}
	})

	// The callee at zero, woken by another service's call.
	f := e.fetchFrom(t, "caller-runc", "http://sleepy-runc/")
	if f.Status != 200 {
		t.Fatalf("call to a callee at zero: %+v", f)
	}
	t.Logf("FIGURE cold start of a callee woken by another service (runc): %.1f ms", float64(f.Micros)/1000)

	// Latency: the same callee called from an instance (through the
	// router's in-namespace listener) and from the host (through the
	// external listener), interleaved, p50 of each.
	const n = 40
	var inner, outer []time.Duration
	keep := routerClient(e.k.srv.httpAddr, 1) // keep-alive, as the caller's client
	calleeURL := e.url(t, "callee-runc") + "/healthz"
	for range n {
		f := e.fetchFrom(t, "caller-runc", "http://callee-runc.default.svc.cluster.local/healthz")
		if f.Status != 200 {
			t.Fatalf("internal call: %+v", f)
		}
		inner = append(inner, time.Duration(f.Micros)*time.Microsecond)
		start := time.Now()
		resp, err := keep.Get(calleeURL)
		if err != nil {
			t.Fatalf("external call: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("external call: %d", resp.StatusCode)
		}
		outer = append(outer, time.Since(start))
	}
	t.Logf("FIGURE p50 service-to-service %v, external %v (n=%d, same callee, same run)", p50(inner), p50(outer), n)
}

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// TestDomainMapping: a DomainMapping through kubectl maps a domain to a
// Service once a ClusterDomainClaim gives the domain to its namespace (the
// Knative gate, autocreate-cluster-domain-claims off); a mapping of a domain
// claimed for another namespace is refused in its status and not served;
// bad names are refused with their reason.
func TestDomainMapping(t *testing.T) {
	e := newContractEnv(t)
	e.apply(t, contractService("shop", "runc", corev1.Container{Image: e.infoRef}))
	e.waitReady(t, "shop-runc")
	dm := func(ns string) string {
		return "apiVersion: serving.knative.dev/v1beta1\nkind: DomainMapping\nmetadata:\n  name: shop.example.com\n  namespace: " + ns +
			"\nspec:\n  ref:\n    apiVersion: serving.knative.dev/v1\n    kind: Service\n    name: shop-runc\n"
	}
	getHost := func(host string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+e.k.srv.httpAddr+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	e.kubectl(t, dm("default"), "apply", "-f", "-")
	e.waitFor(t, "domainmapping/shop.example.com", "condition=DomainClaimed=false", time.Minute)
	if code := getHost("shop.example.com"); code != http.StatusNotFound {
		t.Errorf("unclaimed domain served: %d", code)
	}
	e.kubectl(t, "apiVersion: networking.internal.knative.dev/v1alpha1\nkind: ClusterDomainClaim\nmetadata:\n  name: shop.example.com\nspec:\n  namespace: default\n", "apply", "-f", "-")
	// The claim wakes the mapping waiting for its domain.
	e.waitFor(t, "domainmapping/shop.example.com", "condition=Ready", time.Minute)
	if u := e.kubectl(t, "", "get", "dm", "shop.example.com", "-o", "jsonpath={.status.url}"); !strings.HasPrefix(u, "http://shop.example.com") {
		t.Errorf("status.url %q", u)
	}
	if code := getHost("shop.example.com"); code != 200 {
		t.Errorf("mapped domain: %d, want 200", code)
	}
	// The Service gets its cluster-local host, as Knative rewrites it.
	req, err := http.NewRequest(http.MethodGet, "http://"+e.k.srv.httpAddr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "shop.example.com"
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Request struct{ Host string } `json:"request"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.Request.Host != "shop-runc.default.svc.cluster.local" {
		t.Errorf("mapped request's Host: %q %v, want shop-runc.default.svc.cluster.local", info.Request.Host, err)
	}

	// Another namespace mapping the claimed domain: refused in status.
	e.kubectl(t, "", "create", "namespace", "other")
	e.kubectl(t, dm("other"), "apply", "-f", "-")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		reason := e.kubectl(t, "", "get", "dm", "shop.example.com", "-n", "other", "-o",
			`jsonpath={.status.conditions[?(@.type=="DomainClaimed")].reason}`)
		if reason == "DomainAlreadyClaimed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("conflicting mapping: reason %q, want DomainAlreadyClaimed", reason)
		}
	}
	if code := getHost("shop.example.com"); code != 200 {
		t.Errorf("mapped domain after a conflicting mapping: %d, want 200", code)
	}

	// Bad input.
	for _, tc := range []struct{ name, want string }{
		{"Not_A_Domain", "invalid name"},
		{"x.default.svc.cluster.local", "cluster local domain"},
	} {
		m := strings.Replace(dm("default"), "shop.example.com", tc.name, 1)
		out, err := e.kubectlRun(t, m, "apply", "-f", "-")
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("DomainMapping %q: %v %s, want refused with %q", tc.name, err, out, tc.want)
		}
	}
	out, err := e.kubectlRun(t, "apiVersion: networking.internal.knative.dev/v1alpha1\nkind: ClusterDomainClaim\nmetadata:\n  name: nons.example.com\nspec: {}\n", "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.namespace") {
		t.Errorf("claim without namespace: %v %s", err, out)
	}

	// config-domain changes without a restart: the ConfigMap Knative reads.
	// knative-serving exists, as on a cluster with Knative installed (it
	// holds knbox's ingress Service).
	e.kubectl(t, "", "create", "configmap", "config-domain", "-n", "knative-serving", "--from-literal=example.org=")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		u := e.kubectl(t, "", "get", "ksvc", "shop-runc", "-o", "jsonpath={.status.url}")
		if strings.HasPrefix(u, "http://shop-runc.default.example.org") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.url %q after the config-domain change", u)
		}
	}
	if code := getHost("shop-runc.default.example.org"); code != 200 {
		t.Errorf("the new domain: %d, want 200", code)
	}
	if code := getHost("shop-runc.default.localhost"); code != http.StatusNotFound {
		t.Errorf("the old domain: %d, want 404", code)
	}

	// Deleting the mapping unpublishes the domain.
	e.kubectl(t, "", "delete", "dm", "shop.example.com")
	deadline := time.Now().Add(time.Minute)
	for getHost("shop.example.com") != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatal("the deleted mapping's domain is still served")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
