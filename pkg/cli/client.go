package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// FieldManager names knbox in the objects it writes.
const FieldManager = "knbox"

// Client talks to one server on behalf of the client commands.
type Client struct {
	// Namespace is the namespace of namespaced objects that name none.
	Namespace string
	// EnforceNamespace makes a manifest whose namespace differs from
	// Namespace an error (set when the user gave -n).
	EnforceNamespace bool

	config    *rest.Config
	http      *http.Client
	dyn       dynamic.Interface
	disc      *discovery.DiscoveryClient
	watchHTTP *http.Client      // without the request timeout, for watches
	watchDyn  dynamic.Interface // the same

	mu       sync.Mutex
	resolver *Resolver
	rest     map[schema.GroupVersion]rest.Interface
}

// NewClient returns a client of the server cfg describes; namespace is the
// default namespace ("" means "default").
func NewClient(cfg *rest.Config, namespace string) (*Client, error) {
	if namespace == "" {
		namespace = "default"
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "knbox"
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	wc := rest.CopyConfig(cfg)
	wc.Timeout = 0
	whc, err := rest.HTTPClientFor(wc)
	if err != nil {
		return nil, err
	}
	wdyn, err := dynamic.NewForConfigAndClient(wc, whc)
	if err != nil {
		return nil, err
	}
	return &Client{Namespace: namespace, config: cfg, http: hc, dyn: dyn, disc: disc, watchHTTP: whc, watchDyn: wdyn,
		rest: map[schema.GroupVersion]rest.Interface{}}, nil
}

// Resolver returns the resolver of the server's resources, discovering
// them on first use.
func (c *Client) Resolver() (*Resolver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resolver != nil {
		return c.resolver, nil
	}
	groups, lists, err := c.disc.ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discover the server's resources: %w", Human(err))
	}
	c.resolver = NewResolver(groups, lists)
	return c.resolver, nil
}

// ServerVersion returns the server's /version gitVersion.
func (c *Client) ServerVersion() (string, error) {
	v, err := c.disc.ServerVersion()
	if err != nil {
		return "", Human(err)
	}
	return v.GitVersion, nil
}

// metaScheme decodes the meta.k8s.io kinds and Status.
var metaScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// restFor returns a REST client of m's group version; watch clients have
// no request timeout.
func (c *Client) restFor(m Mapping, watch bool) (rest.Interface, error) {
	gv := schema.GroupVersion{Group: m.Group, Version: m.Version}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !watch {
		if rc, ok := c.rest[gv]; ok {
			return rc, nil
		}
	}
	cfg := rest.CopyConfig(c.config)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(metaScheme).WithoutConversion()
	hc := c.http
	if watch {
		cfg.Timeout = 0
		hc = c.watchHTTP
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	if !watch {
		c.rest[gv] = rc
	}
	return rc, nil
}

// dynamicFor returns the dynamic client of m in namespace ns (all
// namespaces when "", none for cluster-scoped resources).
func (c *Client) dynamicFor(m Mapping, ns string) dynamic.ResourceInterface {
	r := c.dyn.Resource(m.GroupVersionResource())
	if m.Namespaced && ns != "" {
		return r.Namespace(ns)
	}
	return r
}

// humanError carries the message a user reads and the error it explains
// (so apierrors.IsNotFound and errors.Is still see through it).
type humanError struct {
	msg string
	err error
}

func (e *humanError) Error() string { return e.msg }
func (e *humanError) Unwrap() error { return e.err }

// Human rewrites an error from the server or the network into what a user
// reads: a server's Status message as-is (for Invalid, the causes on lines
// of their own: field and message), a network failure as the server that
// could not be reached and why. Other errors are returned unchanged.
func Human(err error) error {
	if err == nil {
		return nil
	}
	var he *humanError
	if errors.As(err, &he) {
		return err
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return &humanError{msg: statusMessage(se.Status()), err: err}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			host = u.Scheme + "://" + u.Host
		}
		return &humanError{msg: fmt.Sprintf("cannot reach the server at %s: %v", host, ue.Err), err: err}
	}
	return err
}

// statusMessage renders a failure Status.
func statusMessage(st metav1.Status) string {
	msg := st.Message
	if msg == "" {
		msg = string(st.Reason)
		if msg == "" {
			msg = fmt.Sprintf("the server failed the request with status %d", st.Code)
		}
	}
	if st.Reason == metav1.StatusReasonUnauthorized {
		return msg + " (is the token in the kubeconfig the server's?)"
	}
	// Causes name fields for invalid objects; others (client-go's
	// "UnexpectedServerResponse") only repeat the body.
	var causes []metav1.StatusCause
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Field != "" || (st.Reason == metav1.StatusReasonInvalid && c.Message != "") {
				causes = append(causes, c)
			}
		}
	}
	if len(causes) == 0 {
		return msg
	}
	// "X "n" is invalid: [a: b, c: d]" repeats the causes on one line;
	// keep the head and list them one per line.
	if i := strings.Index(msg, " is invalid: "); i >= 0 {
		msg = msg[:i+len(" is invalid")]
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(msg, ":"))
	b.WriteString(":")
	for _, c := range causes {
		b.WriteString("\n  ")
		if c.Field != "" {
			b.WriteString(c.Field)
			b.WriteString(": ")
		}
		b.WriteString(c.Message)
	}
	return b.String()
}
