package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/replicas"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// The metadata service (the runtime contract's MAY): every instance reaches,
// at http://127.0.0.2:8181 inside its own network namespace, its identity.
// Requests must carry "Metadata-Flavor: knbox" (or Cloud Run's "Google"),
// so that a request forged through the application (SSRF) does not get it.
//
//	GET /v1/instance          JSON: namespace, service, configuration,
//	                          revision, instance, hostname (the host's),
//	                          region and zone ("local")
//	GET /v1/instance/<field>  that field as text
//	GET /v1/instance/service-accounts/default/identity?audience=AUD
//	                          an identity token (a JWT, as text) for the
//	                          audience AUD, as Cloud Run's metadata server
//	                          hands them out (also at Cloud Run's path,
//	                          /computeMetadata/v1/instance/...): a
//	                          ServiceAccount token of the instance's
//	                          ServiceAccount, valid identityTokenSeconds,
//	                          signed by the API server's issuer, so that
//	                          TokenReview and OIDC-style verifiers accept it
//
// An instance whose containers declare port 8181 keeps it, without the
// service.
const instanceMetadataPort = 8181

// instanceMetadata is what the metadata service tells an instance.
type instanceMetadata struct {
	Namespace     string `json:"namespace"`
	Service       string `json:"service"`
	Configuration string `json:"configuration"`
	Revision      string `json:"revision"`
	Instance      string `json:"instance"`
	Hostname      string `json:"hostname"`
	Region        string `json:"region"`
	Zone          string `json:"zone"`
	// ServiceAccount is the instance's ServiceAccount; "" for an instance
	// started before knbox labelled it (it gets no identity token).
	ServiceAccount string `json:"-"`
}

// identityTokenSeconds is the lifetime of an identity token, Cloud Run's
// (one hour; capped by serviceAccounts.maxTokenExpirationSeconds).
const identityTokenSeconds = 3600

// issueTimeout bounds one token's issue (a cache read and a signature).
const issueTimeout = 10 * time.Second

// maxCachedIdentities bounds the identity tokens one instance's metadata
// service keeps for reuse (one per audience).
const maxCachedIdentities = 16

// identityCache keeps an instance's identity tokens until they are due for
// a refresh (serviceaccount.RefreshAt), so an instance that asks in a loop
// costs a map lookup, not a signature each time.
type identityCache struct {
	next serviceaccount.TokenIssuer
	mu   sync.Mutex
	toks map[string]cachedIdentity // by audience
}

type cachedIdentity struct {
	token         string
	expiry, renew time.Time
}

// Issue implements serviceaccount.TokenIssuer for one audience at a time;
// other requests go to the next issuer uncached.
func (c *identityCache) Issue(ctx context.Context, namespace, sa string, aud []string, secs int64, bound *serviceaccount.BoundObject) (string, time.Time, error) {
	if len(aud) != 1 || bound != nil {
		return c.next.Issue(ctx, namespace, sa, aud, secs, bound)
	}
	now := time.Now()
	c.mu.Lock()
	if t, ok := c.toks[aud[0]]; ok && now.Before(t.renew) {
		c.mu.Unlock()
		return t.token, t.expiry, nil
	}
	c.mu.Unlock()
	tok, exp, err := c.next.Issue(ctx, namespace, sa, aud, secs, bound)
	if err != nil {
		return "", time.Time{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.toks == nil {
		c.toks = map[string]cachedIdentity{}
	}
	if _, ok := c.toks[aud[0]]; !ok && len(c.toks) >= maxCachedIdentities {
		for k := range c.toks { // any one: a bound, not a policy
			delete(c.toks, k)
			break
		}
	}
	c.toks[aud[0]] = cachedIdentity{token: tok, expiry: exp, renew: serviceaccount.RefreshAt(now, exp)}
	return tok, exp, nil
}

// metadataOf is spec's identity, from its labels and the serving
// container's K_* environment (which replicas sets as Knative does).
func metadataOf(spec *pod.Spec) instanceMetadata {
	m := instanceMetadata{Namespace: spec.Labels[replicas.LabelNamespace], Revision: spec.Labels[replicas.LabelRevision],
		Instance: spec.ID, Region: "local", Zone: "local", ServiceAccount: spec.Labels[replicas.LabelServiceAccount]}
	m.Hostname, _ = os.Hostname()
	if spec.Serving >= 0 && spec.Serving < len(spec.Containers) {
		for _, e := range spec.Containers[spec.Serving].Env {
			switch e.Name {
			case "K_SERVICE":
				m.Service = e.Value
			case "K_CONFIGURATION":
				m.Configuration = e.Value
			}
		}
	}
	return m
}

// metadataHandler serves m, with identity tokens from tokens (nil: none).
func metadataHandler(m instanceMetadata, tokens serviceaccount.TokenIssuer) http.Handler {
	if tokens != nil {
		tokens = &identityCache{next: tokens}
	}
	fields := map[string]string{"namespace": m.Namespace, "service": m.Service, "configuration": m.Configuration,
		"revision": m.Revision, "instance": m.Instance, "hostname": m.Hostname, "region": m.Region, "zone": m.Zone}
	body, _ := json.Marshal(m)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instance", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /v1/instance/{field}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := fields[r.PathValue("field")]
		if !ok {
			http.Error(w, "no such field: see GET /v1/instance", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(v))
	})
	identity := func(w http.ResponseWriter, r *http.Request) {
		code, text := identityToken(r, m, tokens)
		if code != http.StatusOK {
			http.Error(w, text, code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(text))
	}
	mux.HandleFunc("GET /v1/instance/service-accounts/default/identity", identity)
	mux.HandleFunc("GET /computeMetadata/v1/instance/service-accounts/default/identity", identity)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "knbox")
		if f := r.Header.Get("Metadata-Flavor"); f != "knbox" && f != "Google" {
			http.Error(w, `missing header "Metadata-Flavor: knbox"`, http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// identityToken answers a request for an identity token: the status and
// the token, or the status and why not.
func identityToken(r *http.Request, m instanceMetadata, tokens serviceaccount.TokenIssuer) (int, string) {
	q := r.URL.Query()
	aud := q["audience"]
	switch {
	case len(aud) == 0 || aud[0] == "":
		return http.StatusBadRequest, "audience: required (?audience=https://callee.example)"
	case len(aud) > 1:
		return http.StatusBadRequest, "audience: give one audience"
	}
	if tokens == nil {
		return http.StatusNotFound, "this knbox issues no ServiceAccount tokens"
	}
	if m.ServiceAccount == "" {
		return http.StatusNotFound, "this instance was started without its ServiceAccount label: identity tokens need a new instance"
	}
	ctx, cancel := context.WithTimeout(r.Context(), issueTimeout)
	defer cancel()
	tok, _, err := tokens.Issue(ctx, m.Namespace, m.ServiceAccount, aud, identityTokenSeconds, nil)
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return http.StatusOK, tok
	case apierrors.IsNotFound(err):
		return http.StatusNotFound, "serviceaccount " + m.Namespace + "/" + m.ServiceAccount + ": " + err.Error()
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return http.StatusBadRequest, "audience: " + err.Error()
	case errors.As(err, &status) && status.Status().Code >= 400 && status.Status().Code < 500:
		return int(status.Status().Code), err.Error()
	default:
		return http.StatusServiceUnavailable, "identity token: " + err.Error()
	}
}

// serveMetadata serves spec's metadata on ln until the returned server is
// closed; tokens issues identity tokens (nil: none).
func serveMetadata(ln net.Listener, spec *pod.Spec, tokens serviceaccount.TokenIssuer) *http.Server {
	s := &http.Server{Handler: metadataHandler(metadataOf(spec), tokens), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() { _ = s.Serve(ln) }()
	return s
}
